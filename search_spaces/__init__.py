"""Shipped search spaces (YAML); ships inside the wheel as `tune_runner.search_spaces`."""
