"""What our learners need of an env's action space (`ActionSpace`): its size, its kind, and the actions a
gymnasium vector env's step takes. No torch here."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class ActionSpace:
    """What our learners need of an env's action space: `Discrete(n)` from 0 (choose one of `size`); a
    `MultiDiscrete` or `MultiBinary` one (`nvec`: one choice of nvec[i] per number, `size` = sum(nvec) logits,
    `shape` the space's own); or a bounded or unbounded `Box` (`size` numbers per action, flat; `low`/`high` as
    float32 [size])."""

    size: int
    shape: tuple[int, ...] = ()
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    nvec: tuple[int, ...] = ()
    dtype: str = "int64"
    kind: str = "Discrete"
    """The gymnasium space's class name: Discrete, MultiDiscrete, MultiBinary or Box."""

    @classmethod
    def of(cls, space: gym.Space) -> ActionSpace:
        """ValueError naming the space when our learners cannot act in it."""
        if isinstance(space, gym.spaces.Discrete) and space.start == 0:
            return cls(size=int(space.n))
        if isinstance(space, gym.spaces.MultiBinary):
            return cls.multi((2,) * int(np.prod(space.shape)), shape=tuple(space.shape), dtype=str(space.dtype),
                             kind="MultiBinary")
        if isinstance(space, gym.spaces.MultiDiscrete) and not np.any(space.start):
            return cls.multi(tuple(int(n) for n in np.ravel(space.nvec)), shape=tuple(space.shape),
                             dtype=str(space.dtype))
        if isinstance(space, gym.spaces.Box) and space.shape and np.issubdtype(space.dtype, np.floating):
            low = np.asarray(space.low, dtype=np.float32).reshape(-1)
            high = np.asarray(space.high, dtype=np.float32).reshape(-1)
            return cls(size=int(np.prod(space.shape)), shape=tuple(space.shape), low=low, high=high, kind="Box")
        raise ValueError(f"our learners need a Discrete or MultiDiscrete action space starting at 0, a MultiBinary "
                         f"one or a float Box, got {space}")

    @classmethod
    def multi(cls, nvec: tuple[int, ...], *, shape: tuple[int, ...], dtype: str = "int64",
              kind: str = "MultiDiscrete") -> ActionSpace:
        """A MultiDiscrete (or MultiBinary: every nvec 2) space of `shape`; ValueError for an empty one."""
        if not nvec or min(nvec) < 1:
            raise ValueError(f"a {kind} action space needs at least one number of at least 1 choice, "
                             f"got nvec {list(nvec)}")
        return cls(size=sum(nvec), shape=shape, nvec=nvec, dtype=dtype, kind=kind)

    @property
    def continuous(self) -> bool:
        """A Box: a Gaussian policy's numbers, not choices."""
        return self.kind == "Box"

    def clip(self, actions: np.ndarray) -> np.ndarray:
        """Box actions [batch, size] clipped to the bounds (float32); discrete ones as they are."""
        if not self.continuous:
            return actions
        return np.clip(actions, self.low, self.high).astype(np.float32, copy=False)

    def from_unit(self, unit: np.ndarray) -> np.ndarray:
        """Box actions in [-1, 1] (a tanh-squashed policy's, SAC's) scaled to the bounds, as the env takes them."""
        scaled = self.low + (unit + 1.0) * 0.5 * (self.high - self.low)
        return self.clip(scaled).reshape(len(unit), *self.shape)

    def greedy(self, mean: np.ndarray, *, squashed: bool) -> np.ndarray:
        """A Gaussian policy's deterministic Box action from its mean [batch, size]: tanh(mean) scaled to the
        bounds where the policy squashes (SAC), else the mean clipped (PPO); in the space's shape. The exported
        policy (tune_runner/tune_rl_policy.py) computes the same."""
        if squashed:
            return self.from_unit(np.tanh(mean))
        return self.clip(mean).reshape(len(mean), *self.shape)

    def for_env(self, actions: np.ndarray) -> np.ndarray:
        """What a gymnasium vector env's step takes: Box actions clipped, MultiDiscrete ones in the space's own
        shape and dtype; Discrete ones as they are."""
        if self.nvec:
            return actions.reshape(len(actions), *self.shape).astype(self.dtype, copy=False)
        if not self.continuous:
            return actions
        return self.clip(actions).reshape(len(actions), *self.shape)
