"""K seeds of one config in one learner (issue 16): which seeds, their episode windows, and their metrics.

No torch here (numpy only), so the trainable layer can use `aggregate` and `seed_metrics` cheaply.

**Seeds.** Seed i of a learner whose config says `seed` is `seed + SEED_STRIDE * i` (`derived_seeds`):
seed 0 is the config's own seed, so one seed is the learner as it always was, and seed i of a K-seed
learner is exactly the one-seed learner with `seed` set to that value. A vector env seeds its env j
with `seed + j`, and rollout workers add 1000 * (w + 1) to the seed, so consecutive seeds would share
env streams; a stride of a million keeps every env of every seed (and every worker) on its own stream
while there are fewer than 1000 workers and a million envs per seed.

**Metrics.** A K-seed learner reports each seed's metrics as `seed_<i>/<name>` and, under the plain
name, their aggregate over the seeds (`aggregate`, `how` one of iqm, mean, min, median). The counters
`env_steps` and `episodes` aggregate as the minimum over the seeds (every seed has had at least that
many), so a budget in env steps means per seed what it means for one seed. A one-seed learner
reports the plain names only, as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tune_runner.algos.config import SEED_AGGREGATES as AGGREGATES
from tune_runner.errors import unknown_name
from tune_runner.spec.seed_keys import PREFIX, SEED_STRIDE, seed_key

COUNTERS = ("env_steps", "episodes")  # aggregated as the minimum over the seeds


def derived_seeds(seed: int, num_seeds: int) -> list[int]:
    """The seeds of a `num_seeds`-seed learner whose config says `seed`: seed + SEED_STRIDE * i."""
    return [int(seed) + SEED_STRIDE * i for i in range(num_seeds)]


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean: the mean of the middle 50% of the values, interpolated.

    Each of the n sorted values holds 1/n of the probability mass; the IQM is the mean over the
    mass between the 25% and 75% quantiles, a value counting with the part of its 1/n share that lies
    inside. With n a multiple of 4 it is the mean of the middle n/2 values (scipy's
    `trim_mean(x, 0.25)`); n = 1 and n = 2 give the mean; n = 3 gives (a + 4b + c) / 6 and n = 5
    (3b + 4c + 3d) / 10 for sorted a <= b <= ..., where trim_mean would take the plain mean for n = 3.
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    if len(x) == 0:
        raise ValueError("iqm of no values")
    return float(np.dot(iqm_weights(len(x)), x))


def iqm_weights(n: int) -> np.ndarray:
    """The weights of n sorted values in their IQM (they sum to 1): `iqm_weights(n) @ sorted(x)`, also for
    many rows of n at once (a bootstrap)."""
    lo, hi = np.arange(n) / n, np.arange(1, n + 1) / n  # the mass each sorted value holds
    return np.clip(np.minimum(hi, 0.75) - np.maximum(lo, 0.25), 0.0, None) / 0.5


def aggregate(values: Sequence[float], how: str = "iqm") -> float:
    """One number for the seeds' values: iqm (see `iqm`), mean, min or median. NaN if any value is NaN
    (a seed without a finished episode has no return yet; a diverged seed must not hide)."""
    if how not in AGGREGATES:
        raise ValueError(unknown_name("seed aggregate", how, AGGREGATES))
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        raise ValueError("aggregate of no values")
    if np.isnan(x).any():
        return float("nan")
    if how == "iqm":
        return iqm(x)
    return float({"mean": np.mean, "min": np.min, "median": np.median}[how](x))


def seed_metrics(per_seed: Sequence[Mapping[str, Any]], *, how: str = "iqm") -> dict[str, Any]:
    """One result of K seeds' results: `seed_<i>/<name>` for each, and the aggregates under the plain names.

    A name that only some seeds report (a loss, when a seed took no gradient step) aggregates over
    those that do. One seed's result is returned as it is.
    """
    if len(per_seed) == 1:
        return dict(per_seed[0])
    out: dict[str, Any] = {}
    for i, result in enumerate(per_seed):
        out.update({seed_key(i, name): value for name, value in result.items()})
    names = dict.fromkeys(name for result in per_seed for name in result)
    for name in names:
        values = [result[name] for result in per_seed if name in result]
        if name in COUNTERS:
            out[name] = min(values) if len(values) == len(per_seed) else 0
        else:
            out[name] = aggregate(values, how)
    return out


def with_aggregates(result: Mapping[str, Any], how: str = "iqm") -> dict[str, Any]:
    """A flat K-seed result (`seed_<i>/<name>` keys, a user agent's or ours) with every numeric name's
    aggregate under the plain name, as `seed_metrics` computes it (the counters: the minimum); a result
    without seed keys is returned as it is. The trial applies it to every result, so one rule holds."""
    seeds = split_seeds(result)
    if len(seeds) < 2 or sorted(seeds) != list(range(len(seeds))):
        return dict(result)
    aggregates = seed_metrics([seeds[i] for i in range(len(seeds))], how=how)
    return {**result, **{k: v for k, v in aggregates.items() if not k.startswith(PREFIX)}}


def split_seeds(result: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """The numbers a K-seed result holds per seed (`seed_<i>/<name>`), as {i: {name: value}}."""
    seeds: dict[int, dict[str, Any]] = {}
    for key, value in result.items():
        head, slash, name = key.partition("/")
        if slash and head.startswith(PREFIX) and head[len(PREFIX):].isdigit() and _number(value):
            seeds.setdefault(int(head[len(PREFIX):]), {})[name] = value
    return seeds


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


class SeedStats:
    """The episode bookkeeping of K seeds' envs side by side (seed i owns envs i*n .. i*n + n - 1).

    The running returns and lengths of all envs move in one numpy op per vector step; each seed keeps
    its own window of finished episodes and its own count, as a one-seed learner's EpisodeStats does.
    """

    def __init__(self, num_seeds: int, envs_per_seed: int, *, window: int = 100) -> None:
        self.num_seeds, self.envs_per_seed = num_seeds, envs_per_seed
        self.returns = np.zeros(num_seeds * envs_per_seed, dtype=np.float64)
        self.lengths = np.zeros(num_seeds * envs_per_seed, dtype=np.int64)
        self.recent_returns: list[deque[float]] = [deque(maxlen=window) for _ in range(num_seeds)]
        self.recent_lengths: list[deque[int]] = [deque(maxlen=window) for _ in range(num_seeds)]
        self.seed_episodes = np.zeros(num_seeds, dtype=np.int64)

    @property
    def episodes(self) -> int:
        """Episodes finished, all seeds together."""
        return int(self.seed_episodes.sum())

    def update(self, step: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Add one vector step (a learner_envs.Step); the (returns, lengths, seeds) of the episodes it finished."""
        self.returns += np.where(step.valid, step.rewards, 0.0)
        self.lengths += step.valid
        done = np.flatnonzero((step.terminated | step.truncated) & step.valid)
        finished = self.returns[done].copy(), self.lengths[done].copy(), done // self.envs_per_seed
        self.add_finished(*finished)
        self.returns[done], self.lengths[done] = 0.0, 0
        return finished

    def add_finished(self, returns: np.ndarray, lengths: np.ndarray, seeds: np.ndarray) -> None:
        """Count episodes that finished elsewhere (a rollout worker's envs) into their seeds' windows."""
        returns = np.asarray(returns, np.float64).tolist()
        lengths = np.asarray(lengths, np.int64).tolist()
        if self.num_seeds == 1:
            self.recent_returns[0].extend(returns)
            self.recent_lengths[0].extend(lengths)
            self.seed_episodes[0] += len(returns)
            return
        for r, n, seed in zip(returns, lengths, np.asarray(seeds).tolist(), strict=True):  # a few per vector step
            self.recent_returns[seed].append(r)
            self.recent_lengths[seed].append(n)
            self.seed_episodes[seed] += 1

    def _envs(self, seed: int) -> slice:
        return slice(seed * self.envs_per_seed, (seed + 1) * self.envs_per_seed)

    def drop_running(self, seed: int) -> None:
        """Forget seed `seed`'s episodes in progress (after its envs were reset under them)."""
        self.returns[self._envs(seed)], self.lengths[self._envs(seed)] = 0.0, 0

    def return_mean(self, seed: int) -> float:
        window = self.recent_returns[seed]
        return float(np.mean(window)) if window else float("nan")

    def len_mean(self, seed: int) -> float:
        window = self.recent_lengths[seed]
        return float(np.mean(window)) if window else float("nan")

    def get_state(self, seed: int) -> dict[str, Any]:
        """Seed `seed`'s part, in the format of a one-seed learner's EpisodeStats.get_state."""
        envs = self._envs(seed)
        return {"returns": self.returns[envs].copy(), "lengths": self.lengths[envs].copy(),
                "episodes": int(self.seed_episodes[seed]), "recent_returns": list(self.recent_returns[seed]),
                "recent_lengths": list(self.recent_lengths[seed])}

    def set_state(self, seed: int, state: Mapping[str, Any]) -> None:
        """Restore `get_state(seed)` (or a one-seed EpisodeStats state); a different window keeps the newest."""
        if len(state["returns"]) == self.envs_per_seed:
            self.returns[self._envs(seed)], self.lengths[self._envs(seed)] = state["returns"], state["lengths"]
        else:
            self.drop_running(seed)
        for window, values in ((self.recent_returns[seed], state["recent_returns"]),
                               (self.recent_lengths[seed], state["recent_lengths"])):
            window.clear()
            window.extend(values)
        self.seed_episodes[seed] = int(state["episodes"])


def by_seed(array: np.ndarray, num_seeds: int) -> np.ndarray:
    """A [time, K * n, ...] array (seed i's envs the i-th block of columns) as [K, time, n, ...] (a view)."""
    time, width = array.shape[:2]
    return array.reshape(time, num_seeds, width // num_seeds, *array.shape[2:]).swapaxes(0, 1)


def join_by_seed(arrays: Sequence[np.ndarray], *, axis: int, num_seeds: int) -> np.ndarray:
    """Arrays whose `axis` holds K seeds' blocks of envs, joined along it: seed 0's envs of every array,
    then seed 1's, ... (several rollout workers' batches as one)."""
    split = [a.reshape(*a.shape[:axis], num_seeds, -1, *a.shape[axis + 1:]) for a in arrays]
    joined = np.concatenate(split, axis=axis + 1)
    return joined.reshape(*joined.shape[:axis], -1, *joined.shape[axis + 2:])


def standardized(values: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """Consecutive runs of values, counts[i] for seed i, each scaled to mean 0 and std 1 over itself alone."""
    out, start = np.empty_like(values), 0
    for count in counts:
        own = values[start:start + count]
        if count:
            out[start:start + count] = (own - own.mean()) / (own.std() + 1e-8)
        start += count
    return out
