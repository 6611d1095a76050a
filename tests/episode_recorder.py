"""A CartPole that writes down every episode it finishes: the independent count our RLlib episode window
(tune_runner.trainables.rllib_episodes) is checked against. Registered with gymnasium and, for RLlib's remote
EnvRunners, Ray Tune (pickled by value: Ray's workers cannot import the tests)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
from ray import cloudpickle

RECORDED_ENV = "TuneRlRecordedCartPole-v0"

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Recorded(gym.Wrapper):
    """CartPole-v1 that appends each finished episode's [return, length] to `record_to`, one JSON line each."""

    metadata = {"render_modes": []}

    def __init__(self, record_to: str) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.record_to, self.episode_return, self.length = record_to, 0.0, 0

    def reset(self, **kwargs):
        self.episode_return, self.length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return, self.length = self.episode_return + float(reward), self.length + 1
        if terminated or truncated:
            with open(self.record_to, "a") as out:
                out.write(json.dumps([self.episode_return, self.length]) + "\n")
        return obs, reward, terminated, truncated, info


def recorded(path: Path) -> list[tuple[float, int]]:
    """The (return, length) of every episode written to `path` so far, in the order they finished."""
    return [tuple(json.loads(line)) for line in path.read_text().splitlines()] if path.exists() else []


def register() -> None:
    """Make RECORDED_ENV known to gymnasium here and to Ray Tune's registry (which reaches Ray's workers)."""
    from ray.tune.registry import register_env

    if RECORDED_ENV not in gym.registry:
        gym.register(RECORDED_ENV, entry_point=Recorded)
    register_env(RECORDED_ENV, lambda env_config: Recorded(**env_config))
