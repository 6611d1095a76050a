"""The experiment spec: space files and flags → one validated, frozen `ExperimentSpec` (experiment), and
the space grammar (search_space)."""

from tune_runner._moved import forward

__getattr__ = forward(__name__)  # tune_runner.spec.experiment in 0.1.0, now spec.experiment
