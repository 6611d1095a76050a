"""The checks of a run's settings that need no Ray, shared by the API and the command line.

Each message names the flag the command line takes for the setting (`--num-cpus 0: ...`): a Python caller
gets the same text a `tune-rl` user reads, and the flag says which keyword of the API is meant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError


def positive(flag: str, value: int | None) -> None:
    """Refuse a count below 1, naming the flag and its value."""
    if value is not None and value < 1:
        raise UserError(f"{flag} {value}: must be a positive integer")


def check_run_settings(*, address: str | None = None, num_cpus: int | None = None, num_gpus: float | None = None,
                       cpus_per_trial: float | None = None, gpus_per_trial: float | None = None,
                       gpu: str | None = None) -> str | None:
    """The settings of a run that need no Ray checked (`gpu` applied); the address given, if any."""
    if address is not None:
        if not address.strip():
            raise UserError("--address: empty; give auto, host:port or ray://host:10001")
        for flag, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
            if value is not None:
                raise UserError(f"--{flag.replace('_', '-')}: sizes a local Ray; a cluster joined with --address "
                                f"{address} has its own size (use --cpus-per-trial/--gpus-per-trial)")
    for flag, value in (("num_gpus", num_gpus), ("cpus_per_trial", cpus_per_trial),
                        ("gpus_per_trial", gpus_per_trial)):
        if value is not None and not value >= 0:
            raise UserError(f"--{flag.replace('_', '-')} {value}: must be 0 or more")
    if gpu is not None:
        ids = [part.strip() for part in gpu.split(",")]
        if not all(part.isdigit() for part in ids):
            raise UserError(f'--gpu {gpu}: expected GPU indices like "0" or "0,1"')
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)  # before Ray starts: it offers only these
    return address


def run_options(*, storage: Any, mlflow_uri: str | None, name: str | None, verbose: bool, num_cpus: int | None,
                num_gpus: float | None = None, cpus_per_trial: float | None = None,
                gpus_per_trial: float | None = None, address: str | None = None, gpu: str | None = None,
                **extra: Any) -> Any:
    """The RunOptions of a search or `train`, checked before Ray or MLflow is imported."""
    from tune_runner import paths

    address = check_run_settings(address=address, num_cpus=num_cpus, num_gpus=num_gpus, cpus_per_trial=cpus_per_trial,
                                 gpus_per_trial=gpus_per_trial, gpu=gpu)
    from tune_runner.tuning.runner import RunOptions  # Ray Tune and MLflow: after every check of the settings

    return RunOptions(storage=storage or paths.default_storage(), mlflow_uri=mlflow_uri or paths.default_mlflow_uri(),
                      name=name, verbose=verbose, num_cpus=num_cpus, num_gpus=num_gpus,
                      cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial, address=address, **extra)


def storage_setting(value: str | Path | None) -> Any:
    """A results folder or URI as `--storage` reads it (a path made absolute, a URI's scheme checked)."""
    if value is None:
        return None
    from tune_runner.storage import parse

    return parse(str(value))


def name_setting(value: str | None) -> str | None:
    """An experiment name as `--name` reads it: one folder name."""
    if value is None:
        return None
    from tune_runner.paths import check_name

    return check_name(value)
