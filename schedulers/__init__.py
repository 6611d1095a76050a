"""Shipped scheduler presets (YAML); ships inside the wheel as `tune_runner.scheduler_presets`."""
