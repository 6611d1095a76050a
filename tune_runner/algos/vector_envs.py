"""Numpy-vectorized envs of our own, for our learners (issue 18): versions of gymnasium envs that ship none, and
K seeds' envs of one class stepped as one (`JointStep`). EnvPool's envs are tune_runner.algos.envpool_envs', envs
stepped in worker processes tune_runner.algos.process_envs'.

gymnasium vectorizes CartPole itself (`vector_entry_point`); for Pendulum-v1 its SyncVectorEnv steps
n Python envs one by one, which cost our PPO about a third of its time there. `PendulumVectorEnv`
steps them as arrays, with gymnasium's dynamics and dtypes op for op, NEXT_STEP autoreset and the
200-step limit. Each env keeps its own generator, seeded as SyncVectorEnv seeds its envs (seed + i),
so both draw the same starting states; tests/test_vector_envs.py holds the two to the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
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


class JointStep:
    """K seeds' numpy-vectorized envs of one class and the same settings, stepped as one env of all their envs
    (issue 16: at K = 8 stepping CartPole's vector env once per seed was 15% of a DQN iteration).

    The envs stay the record: each step joins their arrays into one env of the class, steps it with the
    class's own code, and hands each env back its share (views), so a seed's env is checkpointed, restored
    or stepped alone as before. A seed's resets come from its own generator, drawn as that env alone draws
    them, so every seed gets bit for bit the numbers it gets alone (tests/test_vector_envs.py).
    `joint_step(envs)` gives one for envs it can join, else None.
    """

    settings: tuple[str, ...] = ()  # attributes that must be equal across the envs; the joint env takes them
    arrays: tuple[tuple[str, int], ...] = ()  # per-env arrays and the axis the envs lie along

    def __init__(self, envs: list[gym.vector.VectorEnv]) -> None:
        self.bounds = np.cumsum([0, *(env.num_envs for env in envs)])  # seed i's envs: bounds[i] to bounds[i + 1]
        self.joint = self.build(envs[0], int(self.bounds[-1]))
        self._key = attrgetter(*self.settings)
        self._applied: tuple = ()

    @classmethod
    def fits(cls, envs: list[gym.vector.VectorEnv]) -> bool:
        raise NotImplementedError

    def build(self, env: gym.vector.VectorEnv, num_envs: int) -> gym.vector.VectorEnv:
        raise NotImplementedError

    def same_settings(self, envs: list[gym.vector.VectorEnv]) -> bool:
        first = self._key(envs[0])
        return all(self._key(env) == first for env in envs[1:])

    def step(self, envs: list[gym.vector.VectorEnv], actions: np.ndarray) -> tuple[Any, ...]:
        joint, key = self.joint, self._key(envs[0])
        if key != self._applied:  # a curriculum may have changed them (on every env alike: same_settings)
            for name, value in zip(self.settings, key, strict=True):
                setattr(joint, name, value)
            self._applied = key
        for name, axis in self.arrays:
            setattr(joint, name, np.concatenate([getattr(env, name) for env in envs], axis=axis))
        self.before(joint, envs)
        out = joint.step(actions)
        for env, start, stop in zip(envs, self.bounds[:-1], self.bounds[1:], strict=True):
            for name, axis in self.arrays:
                part = getattr(joint, name)
                setattr(env, name, part[:, start:stop] if axis else part[start:stop])
        self.after(joint)
        return out

    def before(self, joint: gym.vector.VectorEnv, envs: list[gym.vector.VectorEnv]) -> None:
        """Give the joint env the seeds' generators."""

    def after(self, joint: gym.vector.VectorEnv) -> None:
        """Take them back: the joint env holds no seed's generator between steps."""


class JointCartPole(JointStep):
    """gymnasium's CartPoleVectorEnv: its step draws the resets of the envs that ended on the last step from
    its one generator, `np_random.uniform(low, high, size=(4, ended))`; here that call is answered from each
    seed's generator for that seed's ended envs, in env order."""

    settings = ("gravity", "masscart", "masspole", "total_mass", "length", "polemass_length", "force_mag", "tau",
                "kinematics_integrator", "theta_threshold_radians", "x_threshold", "low", "high",
                "max_episode_steps", "_sutton_barto_reward", "render_mode")
    arrays = (("state", 1), ("steps", 0), ("prev_done", 0))

    @classmethod
    def fits(cls, envs: list[gym.vector.VectorEnv]) -> bool:
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        return all(type(env) is CartPoleVectorEnv and env.state is not None for env in envs)

    def build(self, env: gym.vector.VectorEnv, num_envs: int) -> gym.vector.VectorEnv:
        return type(env)(num_envs=num_envs)

    def before(self, joint: gym.vector.VectorEnv, envs: list[gym.vector.VectorEnv]) -> None:
        joint._np_random = _SeedDraws(envs, np.add.reduceat(joint.prev_done, self.bounds[:-1]))

    def after(self, joint: gym.vector.VectorEnv) -> None:
        joint._np_random = None


class _SeedDraws:
    """CartPoleVectorEnv's `np_random` for one joint step: its reset draw, made by each seed's generator."""

    def __init__(self, envs: list[gym.vector.VectorEnv], ended: np.ndarray) -> None:
        self.envs, self.ended = envs, ended  # per seed, its envs that ended on the last step

    def uniform(self, low: float, high: float, size: tuple[int, int]) -> np.ndarray:
        parts = [self.envs[i].np_random.uniform(low=low, high=high, size=(size[0], int(self.ended[i])))
                 for i in np.flatnonzero(self.ended)]
        out = np.concatenate(parts, axis=1) if parts else np.empty((size[0], 0))
        if out.shape != tuple(size):
            raise RuntimeError(f"CartPoleVectorEnv asked for {size} reset numbers where its seeds' envs had "
                               f"{out.shape}: a gymnasium whose CartPole draws its resets otherwise")
        return out


class JointPendulum(JointStep):
    """Our PendulumVectorEnv: each env already has its own generator; the joint env takes them all."""

    settings = ("g", "max_episode_steps")
    arrays = (("state", 0), ("elapsed", 0), ("ending", 0))

    @classmethod
    def fits(cls, envs: list[gym.vector.VectorEnv]) -> bool:
        return all(type(env) is PendulumVectorEnv for env in envs)

    def build(self, env: gym.vector.VectorEnv, num_envs: int) -> gym.vector.VectorEnv:
        return PendulumVectorEnv(num_envs)

    def before(self, joint: gym.vector.VectorEnv, envs: list[gym.vector.VectorEnv]) -> None:
        joint.generators = [generator for env in envs for generator in env.generators]

    def after(self, joint: gym.vector.VectorEnv) -> None:
        joint.generators = []


def joint_step(envs: list[gym.vector.VectorEnv]) -> JointStep | None:
    """A JointStep for these envs (2 or more, of one class we can join), or None: step them one by one."""
    if len(envs) < 2:
        return None
    kind = next((kind for kind in (JointCartPole, JointPendulum) if kind.fits(envs)), None)
    return kind(envs) if kind is not None else None


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
