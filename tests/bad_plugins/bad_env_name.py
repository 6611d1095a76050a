"""A plug-in whose env name is not a gymnasium id (line 8)."""

import gymnasium as gym

from tune_runner.plugins import register_env


@register_env("my env")
class Spaced(gym.Env):
    pass
