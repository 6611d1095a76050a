"""masked_choice: pick the best allowed payoff while the best-looking ones are forbidden.

An env with action masking: the observation is a Dict of exactly two keys, the layout our
learners and RLlib's action-masking RLModule example read:
    "observations": Box float32, what the policy sees;
    "action_mask":  Box(0, 1, (n,), int8), 1 = allowed (RLlib's `action_mask_key` default).
A learner that honours the mask never takes a forbidden action; one that ignores it will,
and this env counts each one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from tune_runner.plugins import register_env

BAR = 16  # pixels per action in the rendered image


@register_env("masked_choice")
class MaskedChoice(gym.Env):
    """Each step shows a payoff per action; choosing an allowed action pays its payoff.

    Every step masks between 1 and n // 2 actions, and they are the tempting ones: their
    payoffs lie in [1, 2), above every allowed payoff in [0, 1). A masked action is invalid:
    it pays 0 and is counted (`masked_actions_taken` over the env's life; in info the
    episode's count, and `masked_action` for this step); the episode goes on.
    An episode is `episode_length` choices (it terminates then).

    env_config keys: num_actions (default 6, >= 2), episode_length (default 20, >= 1).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, env_config: Mapping[str, Any] | None = None, render_mode: str | None = None) -> None:
        config = dict(env_config or {})
        self.num_actions = int(config.pop("num_actions", 6))
        self.episode_length = int(config.pop("episode_length", 20))
        if config:
            raise ValueError(f"masked_choice: unknown env_config keys {sorted(config)}; "
                             f"known: num_actions, episode_length")
        if self.num_actions < 2 or self.episode_length < 1:
            raise ValueError(f"masked_choice: env_config needs num_actions >= 2 and episode_length >= 1, got "
                             f"num_actions={self.num_actions}, episode_length={self.episode_length}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"masked_choice: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        n = self.num_actions
        self.observation_space = gym.spaces.Dict({
            "observations": gym.spaces.Box(0.0, 2.0, shape=(n,), dtype=np.float32),
            "action_mask": gym.spaces.Box(0, 1, shape=(n,), dtype=np.int8),
        })
        self.action_space = gym.spaces.Discrete(n)
        self.masked_actions_taken = 0
        self._episode_masked = self._steps = 0
        self._payoffs = np.zeros(n, dtype=np.float32)
        self._mask = np.ones(n, dtype=np.int8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._episode_masked = self._steps = 0
        self._draw()
        return self._obs(), {"masked_actions_taken": 0, "masked_action": False}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        action = int(action)
        masked = not self._mask[action]
        reward = 0.0 if masked else float(self._payoffs[action])
        if masked:
            self.masked_actions_taken += 1
            self._episode_masked += 1
        self._steps += 1
        self._draw()
        info = {"masked_actions_taken": self._episode_masked, "masked_action": masked}
        return self._obs(), reward, self._steps >= self.episode_length, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        height = 2 * BAR
        image = np.full((height, BAR * self.num_actions, 3), 230, dtype=np.uint8)
        for i, (payoff, allowed) in enumerate(zip(self._payoffs, self._mask, strict=True)):
            top = height - int(payoff / 2.0 * height)
            colour = (40, 180, 60) if allowed else (220, 50, 40)
            image[top:, i * BAR + 2:(i + 1) * BAR - 2] = colour
        return image

    def _draw(self) -> None:
        """New payoffs and mask: the masked actions get the highest payoffs."""
        n, rng = self.num_actions, self.np_random
        count = int(rng.integers(1, n // 2 + 1))
        draws = rng.random(2 * n)  # the payoffs, then one key per action: the `count` lowest keys are masked,
        masked = np.argpartition(draws[n:], count - 1)[:count]  # a uniform subset (rng.choice: 3x the time)
        self._mask = np.ones(n, dtype=np.int8)
        self._mask[masked] = 0
        self._payoffs = draws[:n].astype(np.float32)
        self._payoffs[masked] += 1.0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observations": self._payoffs.copy(), "action_mask": self._mask.copy()}
