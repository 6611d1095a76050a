"""Our own PyTorch learners (PPO: Discrete, MultiDiscrete, MultiBinary and Box actions; DQN: Discrete; SAC: Box)
for gymnasium envs; no Ray inside.

Each learner owns a NEXT_STEP-autoreset vector env and its training loop, `train_iteration()`
(our metric names), which samples from its own envs or from a source of rollout workers
(`tune_runner.algos.learner`). It offers `collect`/`absorb` (a worker's side and the trainer's
side of remote rollouts), `get_state`/`set_state` (exact restore) and `get_weights`/`set_weights`.
A Ray Tune trainable wraps them elsewhere. Each learner is one record in tune_runner.algos.records: what
the rest of tune-rl knows of it.

The names below are imported on first use, so `tune_runner.algos.config` (the settings, which
`tune-rl train --help` lists) loads without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tune_runner.algos.common import EpisodeStats
    from tune_runner.algos.config import DQNConfig, PPOConfig
    from tune_runner.algos.distributions import masked_logits
    from tune_runner.algos.dqn import DQN
    from tune_runner.algos.learner import Learner, OwnLearner, Replay, Sampler
    from tune_runner.algos.learner_envs import make_vec_env
    from tune_runner.algos.ppo import PPO
    from tune_runner.algos.replay import ReplayBuffer
    from tune_runner.algos.rollout import compute_gae

_HOMES = {"EpisodeStats": "common", "make_vec_env": "learner_envs", "masked_logits": "distributions",
          "Learner": "learner", "OwnLearner": "learner", "Replay": "learner", "Sampler": "learner",
          "compute_gae": "rollout", "ReplayBuffer": "replay"}

__all__ = ["DQN", "PPO", "DQNConfig", "EpisodeStats", "Learner", "OwnLearner", "PPOConfig", "Replay", "ReplayBuffer",
           "Sampler", "compute_gae", "make_vec_env", "masked_logits"]


def __getattr__(name: str) -> Any:
    """A helper by its home module, or a learner's class or config class by its record (tune_runner.algos.records):
    `from tune_runner.algos import PPO` works for every learner registered, with no list of them here."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    from tune_runner.algos.records import LEARNERS

    for learner in LEARNERS.in_order():
        record = LEARNERS.get(learner)
        for path, load in ((record.learner, record.learner_class), (record.config, record.config_class)):
            if path.rpartition(":")[2] == name:
                return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
