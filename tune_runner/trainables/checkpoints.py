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


def write(folder: Path, *, learner: dict[str, Any], runners: dict[str, Any] | None,
          members: dict[str, Any] | None = None) -> None:
    """The learner's state (and its rollout workers', when it has them; a population trial's slots), fsynced and
    renamed into place."""
    state = {"learner": learner, "runners": runners, **({"members": members} if members is not None else {})}
    files.write_atomically(folder / CHECKPOINT_FILE, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def read(folder: Path) -> dict[str, Any]:
    """What `write` wrote into `folder`: {"learner": state, "runners": state or None}; a damaged file raises
    what unpickling raised (a trial's restore lets Tune retry; `learner_state` makes it one line)."""
    with open(folder / CHECKPOINT_FILE, "rb") as f:
        return pickle.load(f)  # noqa: S301 - our own checkpoint, written by write()


def policy_seed(state: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The one-seed state a policy is read from, and which seed it is (None for a one-seed learner's state).

    A learner of several seeds (seeds_per_trial) saves {"num_seeds": K, "seeds": [K one-seed states]}; its
    policy is the seed whose recent episodes (the window its episode_return_mean averages) returned the most,
    the first such on a tie: evaluate, load_policy and the MLflow model then act as that seed did."""
    if "num_seeds" not in state:
        return state, None
    seeds = state["seeds"]

    def recent_return(index: int) -> float:
        returns = (seeds[index].get("stats") or {}).get("recent_returns") or ()
        return sum(returns) / len(returns) if returns else float("-inf")

    index = max(range(len(seeds)), key=lambda i: (recent_return(i), -i))
    return seeds[index], index


def learner_state(folder: Path, *, fix: str) -> dict[str, Any]:
    """The learner's state in the checkpoint `folder` (one seed's: `policy_seed`); a damaged or foreign file is
    one line ending in `fix`."""
    path = folder / CHECKPOINT_FILE
    saved = files.load_checkpoint(path, lambda _: read(folder), fix=fix)
    state = saved.get("learner") if isinstance(saved, dict) else None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a readable checkpoint (expected a mapping with learner, got "
                        f"{files.short(saved)}); pass a checkpoint folder written by our ppo/dqn")
    return policy_seed(state)[0]
