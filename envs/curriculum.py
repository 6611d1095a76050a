"""curriculum_corridor: a sparse-reward corridor whose length grows with a settable task.

Curriculum learning starts on an easy task and raises it as training goes. The env offers
the task-settable interface of RLlib's old `TaskSettableEnv` (`get_task()` / `set_task(task)`;
RLlib 2.x's new API stack dropped that class and `env_task_fn`, and changes tasks from an
`on_train_result` callback instead), and `raise_with_env_steps` is a ready task function with
the old `env_task_fn` signature.

Task t puts the goal 2 + 2 t cells from the start, with 2 * distance + 4 steps to reach it;
the only reward is 1 at the goal, so a random walk finds far goals almost never.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from tune_runner.plugins import register_env

# What raise_with_env_steps reads, first present wins: our learners' results, RLlib's new API
# stack, RLlib's old one.
ENV_STEP_KEYS = ("env_steps", "num_env_steps_sampled_lifetime", "timesteps_total")
CELL = 8  # pixels per cell in the rendered image


def goal_distance(task: int) -> int:
    """Cells from the start to the goal at `task`."""
    return 2 + 2 * task


def _setting(config: Mapping[str, Any], key: str, default: int, *, minimum: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"curriculum_corridor: env_config.{key} must be an integer >= {minimum}, got {value!r}")
    return int(value)


@register_env("curriculum_corridor")
class CurriculumCorridor(gym.Env):
    """Walk right to a goal that gets further away as the task rises.

    env_config keys:
        task: the first task (default 0).
        max_task: the hardest task (default 5); set_task clamps to [0, max_task].
        steps_per_task: env steps per task for raise_with_env_steps (default 20000).
    Observation: [position, goal position], scaled by the hardest goal's distance.
    Actions: 0 = left, 1 = right. info["task"] is the episode's task.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, env_config: Mapping[str, Any] | None = None, render_mode: str | None = None) -> None:
        config = dict(env_config or {})
        unknown = set(config) - {"task", "max_task", "steps_per_task"}
        if unknown:
            raise ValueError(f"curriculum_corridor: unknown env_config keys {sorted(unknown)}; "
                             f"known: task, max_task, steps_per_task")
        self.max_task = _setting(config, "max_task", 5, minimum=0)
        self.start_task = min(_setting(config, "task", 0, minimum=0), self.max_task)
        self.steps_per_task = _setting(config, "steps_per_task", 20_000, minimum=1)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"curriculum_corridor: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.task = self._episode_task = self.start_task
        self.position = self.steps = 0

    def get_task(self) -> int:
        """The current task (the next reset uses it)."""
        return self.task

    def set_task(self, task: int) -> None:
        """Set the task, clamped to [0, max_task]; it takes effect at the next reset."""
        self.task = min(max(int(task), 0), self.max_task)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._episode_task = self.task
        self.position = self.steps = 0
        return self._obs(), {"task": self._episode_task}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        goal = goal_distance(self._episode_task)
        self.position = min(max(self.position + (1 if int(action) == 1 else -1), 0), goal)
        self.steps += 1
        terminated = self.position == goal
        truncated = not terminated and self.steps >= 2 * goal + 4
        return self._obs(), float(terminated), bool(terminated), bool(truncated), {"task": self._episode_task}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        cells = goal_distance(self.max_task) + 1
        image = np.full((CELL, CELL * cells, 3), 200, dtype=np.uint8)
        goal = goal_distance(self._episode_task)
        image[:, goal * CELL:(goal + 1) * CELL] = (40, 180, 60)
        image[2:-2, self.position * CELL + 2:(self.position + 1) * CELL - 2] = (220, 50, 40)
        return image

    def _obs(self) -> np.ndarray:
        scale = goal_distance(self.max_task)
        return np.array([self.position / scale, goal_distance(self._episode_task) / scale], dtype=np.float32)


def env_steps_of(train_results: Mapping[str, Any]) -> int:
    """The env steps sampled so far, from our results or RLlib's (see ENV_STEP_KEYS)."""
    runners = train_results.get("env_runners")
    for key in ENV_STEP_KEYS:
        for source in (train_results, runners if isinstance(runners, Mapping) else {}):
            if source.get(key) is not None:
                return int(source[key])
    raise ValueError(f"raise_with_env_steps: the results hold none of {', '.join(ENV_STEP_KEYS)}; "
                     f"keys present: {', '.join(sorted(train_results))}")


def raise_with_env_steps(train_results: Mapping[str, Any], task_settable_env: Any, env_ctx: Any = None) -> int:
    """The task for the env after `train_results`: one more every `steps_per_task` env steps.

    RLlib's `env_task_fn(train_results, task_settable_env, env_ctx) -> task` signature. Reads
    the env steps from `train_results` (`env_steps`, else `num_env_steps_sampled_lifetime`,
    top level or under `env_runners`, else `timesteps_total`) and `start_task`,
    `steps_per_task` and `max_task` from the env (its env_config), so a space file can tune
    `env_config.steps_per_task`. `env_ctx` is not used.
    """
    env = getattr(task_settable_env, "unwrapped", task_settable_env)
    task = env.start_task + env_steps_of(train_results) // env.steps_per_task
    return min(task, env.max_task)
