"""Shared fixtures. One local Ray session serves every end-to-end test (ray.init costs ~10 s here)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from tune_runner.cli import main

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never write to the real ~/.tune-rl from a test."""
    home = tmp_path_factory.mktemp("tune-rl-home")
    monkeypatch.setenv("TUNE_RL_HOME", str(home))
    return home


class Cli:
    """The CLI run in-process with captured output."""

    def __init__(self, status: int, out: str, err: str) -> None:
        self.status, self.out, self.err = status, out, err


def run_cli(*argv: str) -> Cli:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err)
    return Cli(status, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for all end-to-end tests, 2 CPUs like CI."""
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from tune_runner.runner import ensure_ray

    ensure_ray(num_cpus=2, verbose=False)
    yield ray
    ray.shutdown()
