"""A template for your own environment: copy this file into ./envs/ (or pass it with --plugins).

Rename the env, change the spaces and the dynamics, keep the shape:

  - `@register_env("name")` makes the env known to gymnasium.make, to our learners and to
    RLlib under that name; a search space file then says `env: name`.
  - `__init__(self, env_config)` gets the space file's `env_config:` mapping as one dict.
  - `reset(*, seed, options) -> (obs, info)` and `step(action) -> (obs, reward, terminated,
    truncated, info)` are gymnasium's API; all randomness comes from `self.np_random`, so a
    seed reproduces an episode.
  - `render()` returns an RGB image (an H x W x 3 uint8 array) when made with
    render_mode="rgb_array": `tune-rl evaluate` records its videos from it.

The env: a corridor of `length` cells. The agent starts somewhere inside it and the goal is at
one end (left or right, shown in the observation). Each step costs a little; reaching the goal
pays 1 and ends the episode. PPO solves it in a few thousand steps.

Two registrations follow: `custom_env` (a gymnasium.Env, the form to copy) and
`custom_env_actor`, the same env in the older `@register_env(...) @ray.remote class` style.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import ray

from tune_runner.plugins import register_env

LEFT, RIGHT = 0, 1
CELL = 16  # pixels per cell in the rendered image


@register_env("custom_env")
class CustomEnv(gym.Env):
    """Walk a corridor to the goal at one of its ends.

    env_config keys:
        length: cells in the corridor, >= 3 (default 8).
        max_steps: steps before the episode is truncated (default 4 * length).
        step_cost: reward per step that does not reach the goal (default -0.01).
    Observation: [agent position, goal position], each scaled to [0, 1].
    Actions: 0 = left, 1 = right (walking into a wall stays put).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, env_config: dict[str, Any] | None = None, render_mode: str | None = None) -> None:
        config = dict(env_config or {})
        self.length = int(config.pop("length", 8))
        self.max_steps = int(config.pop("max_steps", 4 * self.length))
        self.step_cost = float(config.pop("step_cost", -0.01))
        # Unknown keys are errors: a misspelled key in a space file should not be ignored.
        if config:
            raise ValueError(f"custom_env: unknown env_config keys {sorted(config)}; "
                             f"known: length, max_steps, step_cost")
        if self.length < 3 or self.max_steps < 1:
            raise ValueError(f"custom_env: env_config needs length >= 3 and max_steps >= 1, "
                             f"got length={self.length}, max_steps={self.max_steps}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"custom_env: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position, self.goal, self.steps = 1, 0, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)  # seeds self.np_random
        self.goal = 0 if self.np_random.random() < 0.5 else self.length - 1
        self.position = int(self.np_random.integers(1, self.length - 1))  # never on the goal
        self.steps = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = -1 if int(action) == LEFT else 1
        self.position = min(max(self.position + move, 0), self.length - 1)
        self.steps += 1
        terminated = self.position == self.goal
        reward = 1.0 if terminated else self.step_cost
        truncated = not terminated and self.steps >= self.max_steps
        # Python bools, not numpy ones: gymnasium's checker insists.
        return self._obs(), reward, bool(terminated), bool(truncated), {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        image = np.full((CELL, CELL * self.length, 3), 200, dtype=np.uint8)  # grey floor
        image[:, self.goal * CELL:(self.goal + 1) * CELL] = (40, 180, 60)  # green goal
        left = self.position * CELL
        image[3:-3, left + 3:left + CELL - 3] = (220, 50, 40)  # red agent
        return image

    def _obs(self) -> np.ndarray:
        scale = self.length - 1
        return np.array([self.position / scale, self.goal / scale], dtype=np.float32)


@register_env("custom_env_actor")
@ray.remote
class CustomEnvWrapper:
    """The older Ray-actor style, kept working: an object with the gymnasium API under @ray.remote.

    tune-rl does not start an actor per env here (that costs a process and a remote call per
    step); it unwraps the class and runs it in the sampling process. So the class must speak
    gymnasium: spaces as attributes, reset(*, seed, options) -> (obs, info) and a 5-value step.
    """

    metadata = CustomEnv.metadata  # read from the class: gymnasium.make checks render_mode against it

    def __init__(self, env_config: dict[str, Any] | None = None, render_mode: str | None = None) -> None:
        self.env = CustomEnv(env_config, render_mode=render_mode)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self.env.step(action)

    def render(self) -> np.ndarray | None:
        return self.env.render()
