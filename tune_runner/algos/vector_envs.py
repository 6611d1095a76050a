"""Numpy-vectorized versions of gymnasium envs that ship none, for our learners' vector envs (issue 18).

gymnasium vectorizes CartPole itself (`vector_entry_point`); for Pendulum-v1 its SyncVectorEnv steps
n Python envs one by one, which cost our PPO about a third of its time there. `PendulumVectorEnv`
steps them as arrays, with gymnasium's dynamics and dtypes op for op, NEXT_STEP autoreset and the
200-step limit. Each env keeps its own generator, seeded as SyncVectorEnv seeds its envs (seed + i),
so both draw the same starting states; tests/test_vector_envs.py holds the two to the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

MAX_SPEED, MAX_TORQUE, DT, MASS, LENGTH = 8.0, 2.0, 0.05, 1.0, 1.0
START = np.array([np.pi, 1.0])  # gymnasium's DEFAULT_X, DEFAULT_Y: uniform in [-START, START]


class PendulumVectorEnv(gym.vector.VectorEnv):
    """`num_envs` Pendulum-v1 envs as arrays; `g` and `max_episode_steps` as gymnasium.make takes them."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int, *, g: float = 10.0, max_episode_steps: int = 200) -> None:
        self.num_envs, self.g, self.max_episode_steps = num_envs, g, max_episode_steps
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low=-high, high=high, dtype=np.float32)
        self.single_action_space = gym.spaces.Box(low=-MAX_TORQUE, high=MAX_TORQUE, shape=(1,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.state = np.zeros((num_envs, 2))
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.ending = np.zeros(num_envs, dtype=bool)  # ended on the last step: the next one resets it
        self.generators = [seeding.np_random(None)[0] for _ in range(num_envs)]

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self.generators = [seeding.np_random(seed + i)[0] for i in range(self.num_envs)]
        for i in range(self.num_envs):
            self._start(i)
        self.ending[:] = False
        return self._obs(), {}

    def _start(self, i: int) -> None:
        self.state[i] = self.generators[i].uniform(low=-START, high=START)
        self.elapsed[i] = 0

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        resetting, stepping = self.ending.copy(), ~self.ending
        th, thdot = self.state[:, 0], self.state[:, 1]
        u = np.clip(np.asarray(actions).reshape(self.num_envs, -1)[:, 0], -MAX_TORQUE, MAX_TORQUE)
        costs = _angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        newthdot = thdot + (3 * self.g / (2 * LENGTH) * np.sin(th) + 3.0 / (MASS * LENGTH**2) * u) * DT
        newthdot = np.clip(newthdot, -MAX_SPEED, MAX_SPEED)
        newth = th + newthdot * DT
        rewards = np.where(stepping, -costs, 0.0)
        self.state[stepping] = np.stack([newth, newthdot], axis=1)[stepping]
        self.elapsed += stepping
        truncated = stepping & (self.elapsed >= self.max_episode_steps)
        for i in np.flatnonzero(resetting):
            self._start(i)
        self.ending = truncated.copy()
        return self._obs(), rewards, np.zeros(self.num_envs, dtype=bool), truncated, {}

    def _obs(self) -> np.ndarray:
        th, thdot = self.state[:, 0], self.state[:, 1]
        return np.stack([np.cos(th), np.sin(th), thdot], axis=1).astype(np.float32)


def _angle_normalize(x: np.ndarray) -> np.ndarray:
    return ((x + np.pi) % (2 * np.pi)) - np.pi


# Env ids with a class here, and the env_config keys it takes; any other key leaves the env to gymnasium.
NUMPY_VECTOR_ENVS: dict[str, tuple[type[gym.vector.VectorEnv], tuple[str, ...]]] = {
    "Pendulum-v1": (PendulumVectorEnv, ("g", "max_episode_steps")),
}


def numpy_vector_env(env_id: str, env_config: Mapping[str, Any], num_envs: int) -> gym.vector.VectorEnv | None:
    """Our numpy-vectorized `env_id` with `env_config`, or None when there is none for it (or for those keys)."""
    entry = NUMPY_VECTOR_ENVS.get(env_id)
    if entry is None or not set(env_config) <= set(entry[1]):
        return None
    return entry[0](num_envs, **env_config)
