"""Our metric names, the same for every trainable, mapped from each backend in one place."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Our name -> path in RLlib's (new API stack) nested result dict. The episode figures are ours
# (`tune_rl/...`, the last metrics_num_episodes_for_smoothing episodes, see tune_runner.trainables.rllib_episodes);
# RLlib's own return, which covers only the latest iteration's episodes, keeps another name.
RLLIB_METRICS: dict[str, str] = {
    "episode_return_mean": "tune_rl/episode_return_mean",
    "episode_return_max": "tune_rl/episode_return_max",
    "episode_return_min": "tune_rl/episode_return_min",
    "episode_len_mean": "tune_rl/episode_len_mean",
    "episodes": "tune_rl/episodes",
    "rllib_episode_return_mean": "env_runners/episode_return_mean",
    "env_steps": "num_env_steps_sampled_lifetime",
    "policy_loss": "learners/default_policy/policy_loss",
    "vf_loss": "learners/default_policy/vf_loss",
    "vf_explained_var": "learners/default_policy/vf_explained_var",
    "entropy": "learners/default_policy/entropy",
    "kl": "learners/default_policy/mean_kl_loss",
    "total_loss": "learners/default_policy/total_loss",
    "qf_loss": "learners/default_policy/qf_loss",
    "td_error_mean": "learners/default_policy/td_error_mean",
    "lr": "learners/default_policy/default_optimizer_learning_rate",
    "task": "curriculum/task",  # added by tune_runner.trainables.curriculum's callback when there is a curriculum
}

# Always present in what our trainables report (the budget and schedulers count env steps).
REQUIRED = ("episode_return_mean", "env_steps")


def lookup(result: Mapping[str, Any], path: str) -> Any:
    """`a/b/c` in a nested dict, or None."""
    node: Any = result
    for part in path.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def from_rllib(result: Mapping[str, Any], *, previous: Mapping[str, float] | None = None) -> dict[str, float]:
    """Our metrics from one RLlib `Algorithm.train()` result.

    The episode figures come from our window (tune_runner.trainables.rllib_episodes, NaN before the
    first finished episode). A metric missing from the result is left out, except the
    return, which keeps its previous value so schedulers always see it (RLlib's own figure
    never stands in for it). `sps` is env steps per second of this iteration.
    """
    previous = previous or {}
    out: dict[str, float] = {}
    for name, path in RLLIB_METRICS.items():
        value = lookup(result, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    out.setdefault("episode_return_mean", previous.get("episode_return_mean", math.nan))
    out["env_steps"] = int(out.get("env_steps", previous.get("env_steps", 0)))
    seconds = lookup(result, "time_this_iter_s")
    if isinstance(seconds, (int, float)) and seconds > 0:
        out["sps"] = (out["env_steps"] - previous.get("env_steps", 0)) / seconds
    return out


def finite(value: Any) -> bool:
    """A reported number that can be compared: an int or float (not a bool), neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
