"""A checkpoint of our learners (learner.pkl in Tune's checkpoint_NNNNNN folder): its one writer and its one
reader, for the trial that saves and restores it and for what reads a policy back (evaluate, the MLflow model).

Light on purpose (no Ray, no torch import here): tune-rl evaluate decides what a folder holds with it.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tune_runner import files
from tune_runner.algos.records import ours
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


def policy_seed(state: dict[str, Any], among: Sequence[int] | None = None) -> tuple[dict[str, Any], int | None]:
    """The one-seed state a policy is read from, and which seed it is (None for a one-seed learner's state).

    A learner of several seeds (seeds_per_trial) saves {"num_seeds": K, "seeds": [K one-seed states]}; its
    policy is the seed (of those in `among`, or of all) whose recent episodes (the window its
    episode_return_mean averages) returned the most, the first such on a tie: evaluate, load_policy and the
    MLflow model then act as that seed did."""
    if "num_seeds" not in state:
        return state, None
    seeds = state["seeds"]

    def recent_return(index: int) -> float:
        returns = (seeds[index].get("stats") or {}).get("recent_returns") or ()
        return sum(returns) / len(returns) if returns else float("-inf")

    index = max(range(len(seeds)) if among is None else among, key=lambda i: (recent_return(i), -i))
    return seeds[index], index


def member_policy(saved: dict[str, Any], member: str | None) -> dict[str, Any] | None:
    """The one-seed state of `member`'s policy in a checkpoint (read's dict): in a population trial's, the best
    of the seeds of the slot that held `member` when it was saved (None when no slot did: its weights were
    trained over by a later member); in any other, or with no member named, `policy_seed`'s."""
    slots = (saved.get("members") or {}).get("slots")
    if not slots or member is None:
        return policy_seed(saved["learner"])[0]
    held = [j for j, (owner, _) in enumerate(slots) if owner == member]
    if not held:
        return None
    per_slot = int(saved["learner"].get("num_seeds", 1)) // len(slots)
    return policy_seed(saved["learner"], range(held[0] * per_slot, (held[0] + 1) * per_slot))[0]


def learner_state(folder: Path, *, fix: str, member: str | None = None) -> dict[str, Any]:
    """The learner's state in the checkpoint `folder` (one seed's: `member_policy`); a damaged or foreign file is
    one line ending in `fix`."""
    path = folder / CHECKPOINT_FILE
    saved = files.load_checkpoint(path, lambda _: read(folder), fix=fix)
    state = saved.get("learner") if isinstance(saved, dict) else None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a readable checkpoint (expected a mapping with learner, got "
                        f"{files.short(saved)}); pass a checkpoint folder written by our {'/'.join(ours())}")
    policy = member_policy(saved, member)
    if policy is None:
        raise UserError(f"{path}: member {member} is not in this population trial's checkpoint (a later member "
                        f"trains in its slot); pass a checkpoint saved while it trained, or re-train its config "
                        f"with tune-rl train --config")
    return policy
