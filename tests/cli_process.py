"""The `tune-rl` console script run in a fresh interpreter, reporting which heavy libraries it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = ("torch", "ray", "mlflow", "pandas", "matplotlib", "optuna", "gymnasium")

# Runs `tune-rl ARGV...` as its console script does (the entry point pyproject.toml names), then
# writes which heavy top-level packages are in sys.modules.
DRIVER = textwrap.dedent("""
    import json, os, sys
    from importlib.metadata import entry_points

    (target,) = {ep.value for ep in entry_points(group="console_scripts") if ep.name == "tune-rl"}
    module, _, attr = target.partition(":")
    sys.argv = ["tune-rl", *sys.argv[1:]]
    try:
        status = getattr(__import__(module, fromlist=[attr]), attr)()
    except SystemExit as exc:
        status = exc.code
    heavy = sorted({name.partition(".")[0] for name in sys.modules} & set(json.loads(os.environ["HEAVY"])))
    with open(os.environ["REPORT"], "w") as report:
        json.dump({"status": status, "heavy": heavy}, report)
""")


def run_entry_point(argv: list[str], tmp_path: Path, *, cwd: Path | None = None,
                    env: dict[str, str] | None = None) -> dict:
    """{"status", "heavy", "out", "err"} of `tune-rl ARGV...` run in `cwd` with `env` added."""
    report = tmp_path / "report.json"
    full_env = {**os.environ, "HEAVY": json.dumps(HEAVY), "REPORT": str(report), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", DRIVER, *argv], capture_output=True, text=True, cwd=cwd,
                          env=full_env, timeout=120)
    assert report.exists(), proc.stderr
    return {**json.loads(report.read_text()), "out": proc.stdout, "err": proc.stderr}
