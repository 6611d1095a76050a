"""Running observation normalization and reward scaling for K seeds, each from its own data alone.

`RunningMeanStd` keeps each seed's running mean and variance of vectors (Chan et al.'s parallel
update), so a rollout worker's statistics of its own batch can be merged into the learner's as if
the learner had seen those observations: the learner sends its statistics with the weights, the
worker normalizes with them (and moves its copy on as it steps), and ships the moments of the raw
data it saw (`Moments`) back beside its batch.

`ObsFilter` is RLlib's `observation_filter: MeanStdFilter`: (obs - mean) / std, clipped to +-10.
`RewardScaler` is Stable-Baselines3's `VecNormalize(norm_reward=True)`: each reward divided by the
running std of its env's discounted return, clipped to +-10; the episode returns we report stay raw.
Both are part of a learner's state, and a loaded policy normalizes with the statistics it was saved with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

CLIP = 10.0
EPSILON = 1e-8


class Moments(NamedTuple):
    """Per-seed mean and variance [K, size] of `count` [K] samples."""

    mean: np.ndarray
    var: np.ndarray
    count: np.ndarray


def moments(samples: np.ndarray) -> Moments:
    """The moments of [K, n, size] samples, each seed's over its own n."""
    return Moments(samples.mean(axis=1), samples.var(axis=1), np.full(len(samples), samples.shape[1], np.float64))


class RunningMeanStd:
    """Each of K seeds' running mean and variance of `size`-long vectors (float64)."""

    def __init__(self, num_seeds: int, size: int) -> None:
        self.mean = np.zeros((num_seeds, size))
        self.var = np.ones((num_seeds, size))
        self.count = np.full(num_seeds, 1e-4)  # SB3's start: the first batch all but sets the statistics

    def update(self, samples: np.ndarray) -> Moments:
        """Add [K, n, size] samples (seed i's in row i); their moments."""
        batch = moments(samples)
        self.merge(batch)
        return batch

    def merge(self, batch: Moments) -> None:
        """Add samples seen elsewhere, given as their moments."""
        count = batch.count[:, None]
        total = self.count[:, None] + count
        delta = batch.mean - self.mean
        m2 = self.var * self.count[:, None] + batch.var * count + delta ** 2 * self.count[:, None] * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total[:, 0]

    def std(self) -> np.ndarray:
        return np.sqrt(self.var + EPSILON)

    def get_state(self, seed: int) -> dict[str, Any]:
        return {"mean": self.mean[seed].copy(), "var": self.var[seed].copy(), "count": float(self.count[seed])}

    def set_state(self, seed: int, state: Mapping[str, Any]) -> None:
        mean, var = np.asarray(state["mean"], np.float64), np.asarray(state["var"], np.float64)
        if mean.shape != self.mean[seed].shape or var.shape != mean.shape:
            raise ValueError(f"normalization statistics of shape {mean.shape} do not fit {self.mean[seed].shape}")
        self.mean[seed], self.var[seed], self.count[seed] = mean, var, float(state["count"])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every seed's statistics, as the weights a rollout worker gets."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count.copy()}

    def load_arrays(self, arrays: Mapping[str, Any]) -> None:
        self.mean, self.var = np.array(arrays["mean"], np.float64), np.array(arrays["var"], np.float64)
        self.count = np.array(arrays["count"], np.float64)


def combined(batches: list[Moments]) -> Moments | None:
    """Several batches' moments as those of all their samples together; None for no batch."""
    if not batches:
        return None
    total = RunningMeanStd(*batches[0].mean.shape)
    total.count[:], total.var[:] = 0.0, 0.0
    for batch in batches:
        total.merge(batch)
    return Moments(total.mean, total.var, total.count)


def normalized(obs: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """(obs - mean) / sqrt(var + 1e-8), clipped to +-10, as float32; obs [..., size] against [size] statistics."""
    return np.clip((obs - mean) / np.sqrt(var + EPSILON), -CLIP, CLIP).astype(np.float32)


class Tracked:
    """Running statistics a learner keeps, saves under `key` (its state and weights), turns on with the config
    setting `setting`, and gets from a rollout worker's batch under `moments`."""

    key: str
    setting: str
    moments: str

    def __init__(self, stats: RunningMeanStd) -> None:
        self.stats = stats
        self._seen: list[Moments] = []

    def take(self) -> Moments | None:
        """The moments of every sample added since the last call, as one batch (None if none)."""
        seen, self._seen = self._seen, []
        return combined(seen)


class ObsFilter(Tracked):
    """MeanStdFilter for K seeds: `__call__` normalizes [K * n, size] observations (seed-major rows), updating
    the statistics first when asked; `take` gives the moments of the raw observations added since its last call."""

    key, setting, moments = "obs_filter", "observation_filter", "obs_moments"

    def __init__(self, num_seeds: int, size: int) -> None:
        super().__init__(RunningMeanStd(num_seeds, size))
        self.num_seeds = num_seeds

    def __call__(self, obs: np.ndarray, *, update: bool) -> np.ndarray:
        by_seed = obs.reshape(self.num_seeds, -1, obs.shape[-1])
        if update:
            self._seen.append(self.stats.update(by_seed))
        out = normalized(by_seed, self.stats.mean[:, None], self.stats.var[:, None])
        return out.reshape(obs.shape)


class RewardScaler(Tracked):
    """VecNormalize's reward scaling for K seeds of n envs each: rewards / std(discounted return), clipped; `take`
    gives the moments of the discounted returns added since its last call."""

    key, setting, moments = "reward_scaler", "normalize_rewards", "reward_moments"

    def __init__(self, num_seeds: int, envs_per_seed: int, *, gamma: float) -> None:
        super().__init__(RunningMeanStd(num_seeds, 1))
        self.returns = np.zeros((num_seeds, envs_per_seed))
        self.gamma, self.num_seeds = gamma, num_seeds

    def __call__(self, rewards: np.ndarray, *, valid: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Scaled [K * n] rewards of one vector step; the autoreset steps (not `valid`) add nothing."""
        shape = (self.num_seeds, -1)
        rewards_k, valid_k = rewards.reshape(shape), valid.reshape(shape)
        self.returns = np.where(valid_k, self.returns * self.gamma + rewards_k, self.returns)
        self._seen.append(self.stats.update(self.returns[..., None]))
        scaled = np.clip(rewards_k / self.stats.std()[:, :1], -CLIP, CLIP)
        self.returns[done.reshape(shape) & valid_k] = 0.0
        return scaled.reshape(rewards.shape).astype(np.float32)
