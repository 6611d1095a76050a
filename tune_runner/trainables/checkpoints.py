"""A checkpoint of our learners (learner.pkl in Tune's checkpoint_NNNNNN folder): its one writer and its one
reader, for the trial that saves and restores it and for what reads a policy back (evaluate, the MLflow model).

Light on purpose (no Ray, no torch import here): tune-rl evaluate decides what a folder holds with it.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from tune_runner import files
from tune_runner.errors import UserError
from tune_runner.paths import CHECKPOINT_FILE


def holds_one(folder: Path) -> bool:
    """Whether `folder` is a checkpoint of our learners."""
    return (folder / CHECKPOINT_FILE).is_file()


def write(folder: Path, *, learner: dict[str, Any], runners: dict[str, Any] | None) -> None:
    """The learner's state (and its rollout workers', when it has them), fsynced and renamed into place."""
    state = {"learner": learner, "runners": runners}
    files.write_atomically(folder / CHECKPOINT_FILE, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def read(folder: Path) -> dict[str, Any]:
    """What `write` wrote into `folder`: {"learner": state, "runners": state or None}; a damaged file raises
    what unpickling raised (a trial's restore lets Tune retry; `learner_state` makes it one line)."""
    with open(folder / CHECKPOINT_FILE, "rb") as f:
        return pickle.load(f)  # noqa: S301 - our own checkpoint, written by write()


def learner_state(folder: Path, *, fix: str) -> dict[str, Any]:
    """The learner's state in the checkpoint `folder`; a damaged or foreign file is one line ending in `fix`."""
    path = folder / CHECKPOINT_FILE
    saved = files.load_checkpoint(path, lambda _: read(folder), fix=fix)
    state = saved.get("learner") if isinstance(saved, dict) else None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a readable checkpoint (expected a mapping with learner, got "
                        f"{files.short(saved)}); pass a checkpoint folder written by our ppo/dqn")
    return state
