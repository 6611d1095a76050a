"""tune-rl: hyperparameter search for reinforcement learning on Ray Tune."""

from tune_runner import _moved

__version__ = "0.1.0"
_moved.install()  # the modules' paths before the subpackages (searches started by 0.1.0 pickled them)
