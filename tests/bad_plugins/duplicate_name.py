"""A plug-in that takes the name of a shipped env for a different class (line 9)."""

import gymnasium as gym

from tune_runner.plugins import register_env


@register_env("custom_env")
class AnotherCustomEnv(gym.Env):
    pass
