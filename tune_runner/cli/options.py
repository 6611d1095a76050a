"""Flags shared by the commands that run a search (`search`, `resume`, `best --reevaluate`, `train`).

Their own module so that cli/train.py uses them without importing cli/main.py, which imports train.
"""

from __future__ import annotations

import argparse
from typing import Any

from tune_runner.errors import UserError


def run_options(args: argparse.Namespace, **extra: Any) -> Any:
    """The RunOptions of `search` and `train` from their flags, checked before Ray or MLflow is imported."""
    from tune_runner import paths

    address = check_run_flags(args)
    from tune_runner.search.runner import RunOptions  # Ray Tune and MLflow: after every check of the flags

    return RunOptions(storage=args.storage or paths.default_storage(),
                      mlflow_uri=args.mlflow_uri or paths.default_mlflow_uri(), name=args.name,
                      verbose=args.verbose, num_cpus=args.num_cpus, num_gpus=getattr(args, "num_gpus", None),
                      cpus_per_trial=getattr(args, "cpus_per_trial", None),
                      gpus_per_trial=getattr(args, "gpus_per_trial", None), address=address, **extra)


def check_run_flags(args: argparse.Namespace) -> str | None:
    """The flags of a run that need no Ray checked (--gpu applied); the --address given, if any."""
    address = getattr(args, "address", None)
    if address is not None:
        if not address.strip():
            raise UserError("--address: empty; give auto, host:port or ray://host:10001")
        for flag in ("num_cpus", "num_gpus"):
            if getattr(args, flag, None) is not None:
                raise UserError(f"--{flag.replace('_', '-')}: sizes a local Ray; a cluster joined with --address "
                                f"{address} has its own size (use --cpus-per-trial/--gpus-per-trial)")
    for flag in ("num_gpus", "cpus_per_trial", "gpus_per_trial"):
        value = getattr(args, flag, None)
        if value is not None and not value >= 0:
            raise UserError(f"--{flag.replace('_', '-')} {value}: must be 0 or more")
    if getattr(args, "gpu", None) is not None:
        ids = [part.strip() for part in args.gpu.split(",")]
        if not all(part.isdigit() for part in ids):
            raise UserError(f'--gpu {args.gpu}: expected GPU indices like "0" or "0,1"')
        import os

        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)  # before Ray starts: it offers only these
    return address


def positive(flag: str, value: int | None) -> None:
    """Refuse a count flag below 1, naming the flag and its value."""
    if value is not None and value < 1:
        raise UserError(f"{flag} {value}: must be a positive integer")
