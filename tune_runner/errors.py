"""Exit statuses and the errors that reach the user as a single line: UserError and its kinds."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import Any


class ExitStatus(IntEnum):
    """What `tune-rl` returns to the shell."""

    OK = 0
    ERROR = 1
    BAD_INPUT = 2
    ALL_TRIALS_FAILED = 3
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # what reads our stdout closed it (`| head`): 128 + SIGPIPE, as cat or grep end then


class UserError(Exception):
    """Bad input: printed as one line on stderr, exit status 2, no traceback.

    Its kinds below let a Python caller (tune_runner.api) catch what it can act on; each carries the same
    one-line message the CLI prints, and the exit status the CLI returns for it."""

    exit_status = ExitStatus.BAD_INPUT


class SpecError(UserError):
    """A search space, or an override of it, that does not validate."""


class NotFound(UserError):
    """A space, an experiment or a saved search that is not where it was looked for."""


class SearchEnded(UserError):
    """A search that ran but gave no result to use; `result` holds what it left (tune_runner.api.SearchResult)."""

    def __init__(self, message: str, *, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class AllTrialsFailed(SearchEnded):
    """Every trial of the search errored: exit status 3."""

    exit_status = ExitStatus.ALL_TRIALS_FAILED


class DiskFull(SearchEnded):
    """The search stopped, its state saved, because its results folder ran short of space (tuning.disk); it
    continues with tune-rl resume once space is freed: exit status 1."""

    exit_status = ExitStatus.ERROR


class Interrupted(SearchEnded):
    """The search was stopped (Ctrl-C) with its state saved; it continues with tune-rl resume: exit status 130."""

    exit_status = ExitStatus.INTERRUPTED


@contextmanager
def raised_as(kind: type[UserError]) -> Iterator[None]:
    """A plain UserError raised in the block (or the decorated function) is raised as `kind`, with its text: for
    code whose every refusal is of one kind (a space's checks: SpecError). A kind chosen inside is kept."""
    try:
        yield
    except UserError as exc:
        if type(exc) is not UserError:
            raise
        raise kind(*exc.args).with_traceback(exc.__traceback__) from None


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The nearest of `choices` to `word`, or None when nothing is close."""
    found = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


LONGEST_CHOICES = 20
"""Up to this many choices are listed whole after an unknown name; of more, the closest few and a count."""


def unknown_name(what: str, word: Any, choices: Iterable[str], *, listing: str = "") -> str:
    """"unknown X 'y'; did you mean 'z'? (choices: ...)" with the closest match first. Of more than
    LONGEST_CHOICES choices (gymnasium's environments), only the closest five and how to list them all."""
    choices = sorted(choices)
    if not isinstance(word, str):  # a mapping or a list where a name goes: say what is expected, not `unhashable`
        shown = text if len(text := repr(word)) <= 60 else text[:57] + "..."
        listed = ", ".join(choices) if len(choices) <= LONGEST_CHOICES else f"{len(choices)} known" + (
            f"; {listing}" if listing else "")
        got = "nothing (an empty value)" if word is None else f"{shown} (a {type(word).__name__})"
        return f"{what} must be a name ({listed}), got {got}"
    near = closest(word, choices)
    hint = f"; did you mean {near!r}?" if near else ""
    if len(choices) <= LONGEST_CHOICES:
        return f"unknown {what} {word!r}{hint} (choices: {', '.join(choices)})"
    similar = difflib.get_close_matches(str(word), choices, n=5, cutoff=0.5)
    known = f"{len(choices)} known" + (f", the closest: {', '.join(similar)}" if similar else "")
    return f"unknown {what} {word!r}{hint} ({known}{'; ' + listing if listing else ''})"
