"""What a trial runs: each kind of trainable as a record (backends) found by name (catalog), our own PPO/DQN
in a trial (own, rollouts, agents), RLlib (rllib, rllib_episodes, masking), the oracle, curricula, and the env
checked against them (env_check)."""

from tune_runner._moved import forward

__getattr__ = forward(__name__)  # tune_runner.trainables.catalog in 0.1.0, now trainables.catalog
