"""EnvPool's C++ envs as one of our learners' vector envs (issue 18): `EnvPoolVectorEnv`, and whether EnvPool can
step an env here (`envpool_refusal`).

`EnvPoolVectorEnv` steps EnvPool's envs (pip install envpool) in its own threads, one per CPU of the trial; it is
picked for an id EnvPool has where neither gymnasium nor we vectorize it with numpy. Its envs are EnvPool's own
implementations, seeded its own way: the same seed does not give gymnasium's numbers, only the same dynamics
(tests/test_vector_envs.py compares their episodes statistically).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space


def envpool_refusal(env_id: str | None, env_config: Mapping[str, Any]) -> str | None:
    """Why EnvPool cannot step `env_id` with `env_config` here, with the fix; None when it can. With env_id None,
    only whether EnvPool is installed."""
    import importlib.util

    leave = "leave gym_env_vectorize_mode unset"
    if importlib.util.find_spec("envpool") is None:
        return f"EnvPool is not installed; pip install envpool, or {leave}"
    if env_config:  # EnvPool takes its own keys, not gymnasium's
        return f"EnvPool takes no env_config here (got {sorted(env_config)}); {leave}"
    if env_id is None:
        return None
    import envpool

    if env_id not in envpool.list_all_envs():
        return f"EnvPool has no env {env_id!r} (envpool.list_all_envs()); {leave}"
    return None


def envpool_has(env_id: str, env_config: Mapping[str, Any]) -> bool:
    """Whether EnvPool is installed and has `env_id`, for an env without env_config."""
    return envpool_refusal(env_id, env_config) is None


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """EnvPool's `num_envs` envs of `env_id` as a NEXT_STEP vector env, stepped by `threads` C++ threads.

    EnvPool resets an env on the step after its episode ended (that step's reward 0, its action ignored): the
    NEXT_STEP contract. Its seeds are fixed when it is built (it ignores reset's seed), so a reset with a seed
    builds it again with that seed.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, env_id: str, *, num_envs: int, threads: int = 1) -> None:
        import envpool

        self.env_id, self.num_envs, self.threads, self.closed = env_id, num_envs, threads, False
        self._make = lambda seed: envpool.make_gymnasium(env_id, num_envs=num_envs, num_threads=threads, seed=seed)
        self.pool = self._make(0)
        self.single_observation_space, self.single_action_space = self.pool.observation_space, self.pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            self.pool.close()
            self.pool = self._make(seed)
        return self.pool.reset()[0], {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if isinstance(self.single_action_space, gym.spaces.Discrete):
            actions = np.asarray(actions, dtype=np.int32)
        obs, rewards, terminated, truncated, _ = self.pool.step(actions)
        return obs, rewards, terminated, truncated, {}

    def close(self, **kwargs: Any) -> None:
        if not self.closed:
            self.closed = True
            self.pool.close()
