"""DQN's replay memory: a preallocated numpy ring buffer, and n-step returns built per env."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tune_runner.algos.common import Step


class ReplayBuffer:
    """A ring buffer of transitions; each field is one preallocated array of `capacity` rows."""

    def __init__(self, capacity: int, *, fields: Mapping[str, tuple[tuple[int, ...], Any]]) -> None:
        self.capacity = int(capacity)
        self.fields = dict(fields)
        self.data = {name: np.zeros((self.capacity, *shape), dtype) for name, (shape, dtype) in self.fields.items()}
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


class NStepAccumulator:
    """Turns one-step experience into n-step transitions, vectorized over envs.

    Slot k of the [n, env] arrays holds a transition started at a vector step s with
    s = k (mod n); each valid step adds its discounted reward to every live start of its env.
    A start is emitted when it has n rewards or its episode ends, then the slot is free
    again by the time step s + n reuses it.
    """

    def __init__(self, *, n: int, gamma: float, num_envs: int, obs_dim: int) -> None:
        self.n, self.gamma = n, gamma
        self.obs = np.zeros((n, num_envs, obs_dim), np.float32)
        self.actions = np.zeros((n, num_envs), np.int64)
        self.returns = np.zeros((n, num_envs), np.float64)
        self.ages = np.zeros((n, num_envs), np.int64)
        self.live = np.zeros((n, num_envs), bool)
        self.slot = 0

    def push(self, *, obs: np.ndarray, actions: np.ndarray, step: Step, next_obs: np.ndarray,
             next_mask: np.ndarray | None) -> dict[str, np.ndarray]:
        """Add one vector step; returns the transitions it completed (rows of a replay batch)."""
        k, self.slot = self.slot, (self.slot + 1) % self.n
        self.obs[k], self.actions[k], self.returns[k], self.ages[k] = obs, actions, 0.0, 0
        self.live[k] = step.valid
        self.returns += np.where(self.live, self.gamma ** self.ages * step.rewards, 0.0)
        self.ages += self.live
        done = step.terminated | step.truncated
        j, i = np.nonzero(self.live & ((self.ages >= self.n) | done))
        self.live[j, i] = False
        out = {"obs": self.obs[j, i], "actions": self.actions[j, i],
               "rewards": self.returns[j, i].astype(np.float32), "next_obs": next_obs[i],
               "terminated": step.terminated[i], "discount": (self.gamma ** self.ages[j, i]).astype(np.float32)}
        if next_mask is not None:
            out["next_mask"] = next_mask[i]
        return out

    def clear(self) -> None:
        """Drop the transitions in progress (after the envs were reset under them)."""
        self.live[:] = False

    def get_state(self) -> dict[str, Any]:
        return {"n": self.n, "slot": self.slot, **{name: getattr(self, name).copy()
                                                   for name in ("obs", "actions", "returns", "ages", "live")}}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.slot = state["slot"]
        for name in ("obs", "actions", "returns", "ages", "live"):
            getattr(self, name)[:] = state[name]
