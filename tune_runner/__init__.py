"""tune-rl: hyperparameter search for reinforcement learning on Ray Tune."""

__version__ = "0.1.0"
