from tune_runner.cli.main import entry_point

entry_point()
