from tune_runner.cli import entry_point

entry_point()
