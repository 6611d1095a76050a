"""DQN's replay memory: a preallocated numpy ring buffer (one per seed, side by side in `SeedReplay`), and
n-step returns built per env."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # an annotation only: DQNConfig reads Prioritized from here in the driver, without torch
    from tune_runner.algos.learner_envs import Step


class ReplayBuffer:
    """A ring buffer of transitions; each field is one preallocated array of `capacity` rows."""

    def __init__(self, capacity: int, *, fields: Mapping[str, tuple[tuple[int, ...], Any]],
                 data: Mapping[str, np.ndarray] | None = None) -> None:
        """`data`: arrays of `capacity` rows to hold the fields in (a SeedReplay's rows of one seed); new ones
        by default."""
        self.capacity = int(capacity)
        self.fields = dict(fields)
        self.data = dict(data) if data is not None else {
            name: np.zeros((self.capacity, *shape), dtype) for name, (shape, dtype) in self.fields.items()}
        self.pos = 0  # the row the next transition goes to
        self.size = 0
        self.added = 0  # lifetime count

    def __len__(self) -> int:
        return self.size

    def add_batch(self, batch: Mapping[str, np.ndarray]) -> None:
        """Append rows (one per transition), overwriting the oldest once full."""
        n = len(next(iter(batch.values())))
        skip = max(0, n - self.capacity)  # a batch bigger than the buffer keeps its newest rows
        rows = (self.pos + skip + np.arange(n - skip)) % self.capacity
        for name, array in self.data.items():
            array[rows] = batch[name][skip:]
        self.advance(n)

    def advance(self, n: int) -> None:
        """Count `n` rows written at the write position and after it (by `add_batch`, or by SeedReplay)."""
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.added += n

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """`n` rows drawn uniformly with replacement."""
        rows = rng.integers(0, self.size, size=n)
        return {name: array[rows] for name, array in self.data.items()}

    def chronological(self) -> dict[str, np.ndarray]:
        """The stored rows, oldest first."""
        order = np.arange(self.size) if self.size < self.capacity else np.roll(np.arange(self.capacity), -self.pos)
        return {name: array[order] for name, array in self.data.items()}

    def get_state(self) -> dict[str, Any]:
        """A copy of the filled rows in ring order, with the write position."""
        return {"capacity": self.capacity, "pos": self.pos, "size": self.size, "added": self.added,
                "data": {name: array[:self.size].copy() for name, array in self.data.items()}}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore `get_state`. The same capacity restores exactly; another keeps the newest rows."""
        if state["capacity"] == self.capacity:
            for name, array in self.data.items():
                array[:state["size"]] = state["data"][name]
            self.pos, self.size, self.added = state["pos"], state["size"], state["added"]
            return
        saved = ReplayBuffer(state["capacity"], fields=self.fields)
        saved.set_state(state)
        self.pos = self.size = 0
        self.add_batch(saved.chronological())
        self.added = state["added"]


@dataclass(frozen=True)
class Prioritized:
    """Proportional prioritized replay (Schaul et al., 2016): a row is drawn with probability p^alpha / sum(p^alpha),
    its priority p = |TD error| + epsilon from its last gradient step (a new row: the largest p so far), and its
    loss weighted by (N * P(row))^-beta over the largest such weight in the buffer (RLlib's normalization)."""

    alpha: float = 0.6
    beta: float = 0.4
    epsilon: float = 1e-6


class SeedReplay:
    """K seeds' replay buffers in one set of arrays [K, capacity, ...]: a seed only adds and draws its own rows.

    Seed i's rows are a ReplayBuffer of their own (`buffers[i]`, views of row i), so each seed fills, wraps,
    draws and saves exactly as a one-seed learner's buffer; adding rows of all seeds and gathering all seeds'
    minibatches are one numpy op per field. With `prioritized`, every seed draws by its own rows' priorities
    and each minibatch also holds the `rows` drawn and their loss `weights` ([K, batch] each); the learner
    hands the rows' new TD errors back through `update_priorities`.
    """

    def __init__(self, num_seeds: int, capacity: int, *, fields: Mapping[str, tuple[tuple[int, ...], Any]],
                 prioritized: Prioritized | None = None) -> None:
        self.fields, self.capacity = dict(fields), int(capacity)
        self.prioritized = prioritized
        self.priorities = np.zeros((num_seeds, self.capacity)) if prioritized else None  # p^alpha of each row
        self.max_priority = np.ones(num_seeds)  # each seed's largest p so far: a new row's
        self.data = {name: np.zeros((num_seeds, self.capacity, *shape), dtype)
                     for name, (shape, dtype) in self.fields.items()}
        self.buffers = [ReplayBuffer(capacity, fields=fields, data={name: rows[i] for name, rows in self.data.items()})
                        for i in range(num_seeds)]
        # The same arrays as [K * capacity, ...]: a minibatch of every seed is one `take` (faster than indexing).
        self._flat = {name: array.reshape(-1, *array.shape[2:]) for name, array in self.data.items()}

    def __len__(self) -> int:
        """Rows held, all seeds together."""
        return sum(len(buffer) for buffer in self.buffers)

    def sizes(self) -> np.ndarray:
        """Rows each seed holds, [K]."""
        return np.array([buffer.size for buffer in self.buffers], dtype=np.int64)

    def add(self, batch: Mapping[str, np.ndarray]) -> None:
        """Append rows of any seeds, `batch["seed"]` naming each row's; each seed's rows go in in their order."""
        before = [buffer.added for buffer in self.buffers]
        self._add(batch)
        if self.priorities is not None:  # the rows just written get their seed's largest priority
            for i, buffer in enumerate(self.buffers):
                written = min(buffer.added - before[i], self.capacity)
                rows = (buffer.pos - written + np.arange(written)) % self.capacity
                self.priorities[i, rows] = self.max_priority[i] ** self.prioritized.alpha

    def _add(self, batch: Mapping[str, np.ndarray]) -> None:
        if len(self.buffers) == 1:
            self.buffers[0].add_batch(batch)
            return
        seeds = np.asarray(batch["seed"], dtype=np.int64)
        counts = np.bincount(seeds, minlength=len(self.buffers))
        if counts.max(initial=0) > self.capacity:  # a seed's rows would overwrite each other: one seed at a time
            for i, buffer in enumerate(self.buffers):
                buffer.add_batch({name: values[seeds == i] for name, values in batch.items()})
            return
        order = np.argsort(seeds, kind="stable")
        owners = seeds[order]
        first = np.cumsum(counts) - counts  # where each seed's rows start in `order`
        positions = np.array([buffer.pos for buffer in self.buffers])
        rows = (positions[owners] + np.arange(len(order)) - first[owners]) % self.capacity
        for name, array in self.data.items():
            array[owners, rows] = batch[name][order]
        for buffer, count in zip(self.buffers, counts.tolist(), strict=True):
            buffer.advance(count)

    def minibatches(self, counts: Sequence[int], batch_size: int,
                    rngs: Sequence[np.random.Generator]) -> list[dict[str, np.ndarray]]:
        """max(counts) minibatches, each field [K, batch_size, ...]. Seed i's first counts[i] are drawn as its
        buffer alone draws them (`ReplayBuffer.sample` with rngs[i], in turn); in the others its place holds
        its row 0 again, a filler to train nothing on."""
        rows = np.zeros((max(counts, default=0), len(self.buffers), batch_size), dtype=np.int64)
        weights = np.ones(rows.shape, dtype=np.float32) if self.priorities is not None else None
        for i, (buffer, count, rng) in enumerate(zip(self.buffers, counts, rngs, strict=True)):
            if weights is not None and count:
                self._draw_prioritized(i, buffer.size, rows[:count, i], weights[:count, i], rng)
                continue
            for u in range(count):
                rows[u, i] = rng.integers(0, buffer.size, size=batch_size)
        extra = {"rows": rows.copy(), "weights": weights} if weights is not None else {}  # each seed's own rows
        if len(self.buffers) > 1:
            rows += (np.arange(len(self.buffers)) * self.capacity)[:, None]  # seed i's rows in the flat arrays
        gathered = {name: array.take(rows, axis=0) for name, array in self._flat.items()} | extra
        return [{name: values[u] for name, values in gathered.items()} for u in range(len(rows))]

    def _draw_prioritized(self, seed: int, size: int, rows: np.ndarray, weights: np.ndarray,
                          rng: np.random.Generator) -> None:
        """Fill `rows` ([count, batch]) with seed `seed`'s draws by priority and `weights` with their loss weights."""
        priorities = self.priorities[seed, :size]
        cumulative = np.cumsum(priorities)
        total = cumulative[-1]
        drawn = np.searchsorted(cumulative, rng.random(rows.shape) * total, side="right")
        rows[:] = np.minimum(drawn, size - 1)  # a draw of exactly `total` (float rounding) is the last row
        beta = self.prioritized.beta
        largest = (size * priorities.min() / total) ** -beta
        weights[:] = (size * priorities[rows] / total) ** -beta / largest

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None:
        """New priorities |TD error| + epsilon for the `rows` ([K, batch], each seed's own) of the active seeds."""
        if self.priorities is None:
            return
        config = self.prioritized
        for i in np.flatnonzero(active):
            p = np.abs(td_errors[i]) + config.epsilon
            self.priorities[i, rows[i]] = p ** config.alpha
            self.max_priority[i] = max(self.max_priority[i], float(p.max()))

    def get_state(self, seed: int) -> dict[str, Any]:
        """Seed `seed`'s rows in a one-seed learner's ReplayBuffer.get_state format (with their priorities)."""
        state = self.buffers[seed].get_state()
        if self.priorities is not None:
            size = self.buffers[seed].size
            state.update(priorities=self.priorities[seed, :size].copy(), max_priority=float(self.max_priority[seed]))
        return state

    def set_state(self, seed: int, state: Mapping[str, Any]) -> None:
        """Restore `get_state(seed)` (or a ReplayBuffer's) into seed `seed`'s rows. Priorities restore exactly with
        the same capacity; otherwise (or from a uniform buffer's state) every row gets the largest one."""
        self.buffers[seed].set_state(state)
        if self.priorities is None:
            return
        size = self.buffers[seed].size
        self.max_priority[seed] = state.get("max_priority", 1.0)
        if "priorities" in state and state["capacity"] == self.capacity:
            self.priorities[seed, :size] = state["priorities"]
        else:
            self.priorities[seed, :size] = self.max_priority[seed] ** self.prioritized.alpha


class NStepAccumulator:
    """Turns one-step experience into n-step transitions, vectorized over envs.

    Slot k of an env's column of the [n, env] arrays holds a transition started at a vector step s with
    s = k (mod n), s counted from the env's seed's start; each valid step adds its discounted reward to every
    live start of its env. A start is emitted when it has n rewards or its episode ends, then the slot is free
    again by the time step s + n reuses it. Envs never mix, so K seeds' envs side by side (seed i
    owning envs i * envs_per_seed ...) are K accumulators in one; each row out names its `seed`. Each env keeps
    its own slot counter, so a seed restored alone (a population's refill) keeps its slots, and the order its
    rows come out in, as its own accumulator would, and leaves the other seeds' pending starts alone.
    """

    def __init__(self, *, n: int, gamma: float | np.ndarray, num_envs: int, obs_dim: int,
                 envs_per_seed: int | None = None) -> None:
        self.n, self.gamma = n, gamma  # a number, or one per env (seeds of a population)
        self.envs_per_seed = envs_per_seed or num_envs
        self.obs = np.zeros((n, num_envs, obs_dim), np.float32)
        self.actions = np.zeros((n, num_envs), np.int64)
        self.returns = np.zeros((n, num_envs), np.float64)
        self.ages = np.zeros((n, num_envs), np.int64)
        self.live = np.zeros((n, num_envs), bool)
        self.slot = 0  # every env's next slot, while they all agree (always so with n = 1)
        self.slots: np.ndarray | None = None  # each env's, once a seed restored alone left its envs at another
        self._columns = np.arange(num_envs)

    def push(self, *, obs: np.ndarray, actions: np.ndarray, step: Step, next_obs: np.ndarray,
             next_mask: np.ndarray | None) -> dict[str, np.ndarray]:
        """Add one vector step; returns the transitions it completed (rows of a replay batch)."""
        if self.slots is None:
            k, self.slot = self.slot, (self.slot + 1) % self.n
        else:
            k, self.slots = (self.slots, self._columns), (self.slots + 1) % self.n
        self.obs[k], self.actions[k], self.returns[k], self.ages[k] = obs, actions, 0.0, 0
        self.live[k] = step.valid
        self.returns += np.where(self.live, self.gamma ** self.ages * step.rewards, 0.0)
        self.ages += self.live
        done = step.terminated | step.truncated
        j, i = np.nonzero(self.live & ((self.ages >= self.n) | done))
        self.live[j, i] = False
        gamma = self.gamma[i] if isinstance(self.gamma, np.ndarray) else self.gamma
        out = {"obs": self.obs[j, i], "actions": self.actions[j, i],
               "rewards": self.returns[j, i].astype(np.float32), "next_obs": next_obs[i],
               "terminated": step.terminated[i], "discount": (gamma ** self.ages[j, i]).astype(np.float32),
               "seed": i // self.envs_per_seed}
        if next_mask is not None:
            out["next_mask"] = next_mask[i]
        return out

    def clear(self, envs: slice = slice(None)) -> None:
        """Drop the transitions in progress of `envs` (after those envs were reset under them)."""
        self.live[:, envs] = False

    def get_state(self, envs: slice = slice(None)) -> dict[str, Any]:
        """The state of `envs` (a seed's, which share their slot), as an accumulator of those envs alone would
        save it."""
        return {"n": self.n, "slot": self.slot if self.slots is None else int(self.slots[envs][0]),
                **{name: getattr(self, name)[:, envs].copy() for name in _PENDING}}

    def set_state(self, state: Mapping[str, Any], envs: slice = slice(None)) -> None:
        """Restore `get_state(envs)` into `envs`, their slot included; the other envs' are left as they are."""
        slots = np.full(len(self._columns), self.slot) if self.slots is None else self.slots.copy()
        slots[envs] = state["slot"]
        self.slot, self.slots = (int(slots[0]), None) if (slots == slots[0]).all() else (self.slot, slots)
        for name in _PENDING:
            getattr(self, name)[:, envs] = state[name]


_PENDING = ("obs", "actions", "returns", "ages", "live")  # NStepAccumulator's arrays of transitions in progress
