"""Exit statuses and the one error type that reaches the user as a single line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import IntEnum


class ExitStatus(IntEnum):
    """What `tune-rl` returns to the shell."""

    OK = 0
    ERROR = 1
    BAD_INPUT = 2
    ALL_TRIALS_FAILED = 3
    INTERRUPTED = 130


class UserError(Exception):
    """Bad input: printed as one line on stderr, exit status 2, no traceback."""

    exit_status = ExitStatus.BAD_INPUT


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The nearest of `choices` to `word`, or None when nothing is close."""
    found = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_name(what: str, word: str, choices: Iterable[str]) -> str:
    """"unknown X 'y'; did you mean 'z'? (choices: ...)" with the closest match first."""
    choices = sorted(choices)
    near = closest(word, choices)
    hint = f"; did you mean {near!r}?" if near else ""
    return f"unknown {what} {word!r}{hint} (choices: {', '.join(choices)})"
