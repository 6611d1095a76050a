"""Flags shared by the commands that run a search (`search`, `resume`, `best --reevaluate`, `train`), read
into the API's checks (tune_runner.api.checks), which hold the messages.

Their own module so that cli/train.py uses them without importing cli/main.py, which imports train.
"""

from __future__ import annotations

import argparse
from typing import Any

from tune_runner.api.checks import check_run_settings, positive  # noqa: F401 - positive: for the commands
from tune_runner.errors import UserError

RAY_FLAGS = ("address", "num_cpus", "num_gpus", "cpus_per_trial", "gpus_per_trial", "gpu")


def ray_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The flags choosing and sizing a run's Ray, as the API's keywords (None where a command lacks one)."""
    return {flag: getattr(args, flag, None) for flag in RAY_FLAGS}


def run_options(args: argparse.Namespace, **extra: Any) -> Any:
    """The RunOptions of `search` and `train` from their flags, checked before Ray or MLflow is imported."""
    from tune_runner.api.checks import run_options as options

    return options(storage=args.storage, mlflow_uri=args.mlflow_uri, name=args.name, verbose=args.verbose,
                   **ray_settings(args), **extra)


def check_run_flags(args: argparse.Namespace) -> str | None:
    """The flags of a run that need no Ray checked (--gpu applied); the --address given, if any."""
    return check_run_settings(**ray_settings(args))


def plugins_setting(args: argparse.Namespace) -> list[str] | bool:
    """--plugins PATH... as a list, --no-plugins as False (the API's `plugins`); both at once are refused."""
    if args.no_plugins and args.plugins:
        raise UserError(f"--no-plugins: --plugins {args.plugins[0]} asks to import a plug-in, --no-plugins to import "
                        f"none; drop one of them")
    return False if args.no_plugins else args.plugins
