"""The options a user's class declares with `add_args(parser)`: agents' hyperparameters, models' settings.

Plain argparse, no torch: `tune-rl train --agent_name X --help` lists a user agent's options
without loading a network.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from tune_runner.errors import unknown_name


def options_parser(cls: Any, *, prog: str) -> argparse.ArgumentParser:
    """An argparse parser holding only the options `cls.add_args` declares (none without add_args)."""
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    add_args = getattr(cls, "add_args", None)
    if callable(add_args):
        add_args(parser)
    return parser


def options(cls: Any, *, prog: str) -> dict[str, argparse.Action]:
    """The options `cls.add_args` declares, by their dest name."""
    return {a.dest: a for a in options_parser(cls, prog=prog)._actions if a.dest != "help"}


def parse_options(cls: Any, values: Mapping[str, Any], *, prog: str) -> argparse.Namespace:
    """`add_args` defaults updated by `values`; an unknown key or a value outside `choices` is a ValueError."""
    declared = options(cls, prog=prog)
    args = options_parser(cls, prog=prog).parse_args([])
    for key, value in values.items():
        if key not in declared:
            raise ValueError(unknown_name(f"{prog} option", key, declared))
        action = declared[key]
        if action.type is not None and isinstance(value, str) and action.type is not str:
            value = action.type(value)
        if action.choices is not None and value not in action.choices:
            raise ValueError(f"{prog} option {key} must be one of {list(action.choices)}, got {key}={value!r}")
        setattr(args, key, value)
    return args
