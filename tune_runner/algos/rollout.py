"""PPO's rollouts: the [time, env] arrays `collect` fills (`rollout_arrays`), several workers' rollouts as one
(`merge_rollouts`), and the advantages GAE computes over them (`compute_gae`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tune_runner.algos.learner_envs import SeedEnvs
from tune_runner.algos.seeds import join_by_seed

# Rollout arrays indexed [time, env]; the rest of a batch is merged differently.
NOT_TIME_MAJOR = ("last_obs", "env_steps", "seed_env_steps", "episode_returns", "episode_lens", "episode_seeds",
                  "obs_moments", "reward_moments")


def rollout_arrays(env: SeedEnvs, length: int) -> dict[str, np.ndarray]:
    """Zeroed [length, num_envs] arrays of everything a rollout step records: observations, actions (Box: their
    numbers; MultiDiscrete: one choice per number), their log-probabilities, rewards, the episode flags, `valid`
    (not an autoreset step) and, for masked actions, the mask."""
    shape = (length, env.num_envs)
    actions = np.zeros((*shape, env.num_actions), np.float32) if env.continuous \
        else np.zeros((*shape, len(env.nvec)), np.int64) if env.nvec else np.zeros(shape, np.int64)
    arrays = {"obs": np.zeros((*shape, env.obs_dim), np.float32),
              "actions": actions, "logp": np.zeros(shape, np.float32),
              "rewards": np.zeros(shape, np.float32), "terminated": np.zeros(shape, bool),
              "truncated": np.zeros(shape, bool), "valid": np.zeros(shape, bool)}
    if env.masked:
        arrays["mask"] = np.zeros((*shape, env.num_actions), bool)
    return arrays


def merge_rollouts(batches: Sequence[Mapping[str, Any]], *, num_seeds: int) -> dict[str, Any]:
    """Rollouts of several workers as one: each seed's envs of every worker side by side, seeds in order."""
    k = num_seeds
    merged = {key: join_by_seed([b[key] for b in batches], axis=1, num_seeds=k)
              for key in batches[0] if key not in NOT_TIME_MAJOR}
    merged["last_obs"] = join_by_seed([b["last_obs"] for b in batches], axis=0, num_seeds=k)
    merged["seed_env_steps"] = np.sum([b["seed_env_steps"] for b in batches], axis=0)
    merged["episode_seeds"] = np.concatenate([b["episode_seeds"] for b in batches])
    return merged


def compute_gae(*, rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                last_values: np.ndarray, gamma: float | np.ndarray,
                lambda_: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, value targets) of a [time, env] rollout; `gamma` and `lambda_` a number, or one per env.

    `values[t + 1]` (`last_values` after the last step) must be the value of the observation
    that step t returned: the episode's final observation when step t ended it, which is what
    NEXT_STEP autoreset hands over. A truncated episode thus bootstraps from its final state,
    a terminated one from nothing, and neither carries advantage across the episode boundary.
    """
    next_values = np.concatenate([values[1:], last_values[None]])
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    carry = gamma * lambda_ * (1.0 - (terminated | truncated))
    advantages = np.zeros_like(deltas)
    running = np.zeros_like(deltas[0])
    for t in reversed(range(len(deltas))):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages, advantages + values
