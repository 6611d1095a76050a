"""Custom environments shipped with tune-rl, registered by decorator.

Ships inside the wheel as `tune_runner.envs`.
"""
