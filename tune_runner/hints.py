"""The commands hints print for the user to run (resume a search, re-evaluate it, open the dashboard, re-run a
config): built here, each word quoted for a shell and every secret redacted, so that each runs exactly as printed."""

from __future__ import annotations

import shlex

from tune_runner import paths, storage
from tune_runner.tracking.uri import redacted

HIDDEN = "***"  # what redacted() writes in place of a secret


def storage_flag(where: storage.Storage | None) -> dict[str, str]:
    """{"storage": ...} where `where` is not the default (without --storage the search is not found), else {}."""
    if where is None or where == paths.default_storage():
        return {}
    return {"storage": redacted(str(where))}


def search_command(verb: str, name: str, *words: str, flags: dict[str, str] | None = None) -> str:
    """`tune-rl VERB NAME WORDS... --flag value...` (flags' keys as Python names: mlflow_uri), as `printed` writes
    it: the one builder of every command a hint prints for a search (resume, best, ...)."""
    options = [w for k, v in (flags or {}).items() for w in (f"--{k.replace('_', '-')}", v)]
    return printed(["tune-rl", verb, name, *words, *options])


def printed(words: list[str]) -> str:
    """A command for the user to run, each word quoted for a shell (a folder with a space in its name runs as
    printed); where a secret was redacted (***), a note to put it back."""
    line = " ".join(shlex.quote(word) for word in words)
    return line + f"  # put the secret back in place of {HIDDEN}" if HIDDEN in line else line
