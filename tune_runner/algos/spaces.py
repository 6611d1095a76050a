"""What our learners train on, as gymnasium space class names, and the masked Dict observation (a Box of
observations beside an action mask). No torch or gymnasium at import: the env check reads them before Ray and torch
load (tune_runner.trainables.backends: `trains`)."""

from __future__ import annotations

from typing import Any

MASKED = "masked Dict"  # the kind of a Dict of exactly `observations` and `action_mask` (trainables.masking)
MASK_KEYS = frozenset({"observations", "action_mask"})
# What our PPO and DQN train on (learner_envs.VecEnv and their networks).
ACTION_SPACES = ("Discrete",)  # DQN's
PPO_ACTION_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary", "Box")  # a Box: a diagonal Gaussian policy
OBSERVATION_SPACES = ("Box", MASKED)
MASKABLE_ACTIONS = ("Discrete",)  # an action_mask in the observations masks one Discrete choice


def is_masked(space: Any) -> bool:
    """Whether observations are a Dict of exactly 'observations' and 'action_mask' (MASKED)."""
    import gymnasium as gym

    return isinstance(space, gym.spaces.Dict) and set(space.spaces) == MASK_KEYS


def inner_space(space: Any) -> Any:
    """The 'observations' part of a masked space (what a model reads); any other space as it is."""
    return space["observations"] if is_masked(space) else space
