"""The `tune-rl` command line (main), `tune-rl train`'s seed command line (train) and tab completion."""

from tune_runner._moved import forward

__getattr__ = forward(__name__)  # tune_runner.cli.main in 0.1.0, now cli.main
