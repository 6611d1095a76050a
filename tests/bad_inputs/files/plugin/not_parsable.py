from tune_runner.plugins import register_env


def broken(:
    pass
