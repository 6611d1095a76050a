"""Our own PyTorch learners (PPO, DQN) for discrete-action gymnasium envs; no Ray inside.

Each learner owns a NEXT_STEP-autoreset vector env and its training loop, `train_iteration()`
(our metric names), which samples from its own envs or from a source of rollout workers
(`tune_runner.algos.learner`). It offers `collect`/`absorb` (a worker's side and the trainer's
side of remote rollouts), `get_state`/`set_state` (exact restore) and `get_weights`/`set_weights`.
A Ray Tune trainable wraps them elsewhere.
"""

from tune_runner.algos.common import EpisodeStats, make_vec_env, masked_logits
from tune_runner.algos.dqn import DQN, DQNConfig
from tune_runner.algos.learner import Learner, OwnLearner, Replay, Sampler
from tune_runner.algos.ppo import PPO, PPOConfig, compute_gae
from tune_runner.algos.replay import ReplayBuffer

__all__ = ["DQN", "PPO", "DQNConfig", "EpisodeStats", "Learner", "OwnLearner", "PPOConfig", "Replay", "ReplayBuffer",
           "Sampler", "compute_gae", "make_vec_env", "masked_logits"]
