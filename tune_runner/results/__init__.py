"""A search's results read back: trials from Tune's files, the best trial (analysis), the exported
bundle (export), seeds' statistics (robust), the report pages, the trained policy and what its MLflow
model holds (tune_runner.tracking.log_model logs it)."""

from tune_runner._moved import forward

__getattr__ = forward(__name__)  # tune_runner.results.trials in 0.1.0, now results.trials
