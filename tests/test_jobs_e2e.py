"""`tune-rl submit` against a real Ray head whose dashboard listens on loopback: the search runs as a Ray job.

Its own cluster (`ray start --head`), not the session's local Ray: every process it starts carries a
reaper mark, and the teardown ends exactly those (never `ray stop`, which would end other sessions' Ray).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.test_cluster_e2e import free_port
from tune_runner.cluster import jobs
from tune_runner.cluster.reaper import MARK, reap
from tune_runner.results import export

pytestmark = pytest.mark.e2e
RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture
def dashboard(_isolated_home):
    """A 2-CPU head with the dashboard (and its job server) on 127.0.0.1; its URL."""
    mark = random.randrange(10**9, 2 * 10**9)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    # The job's command is `python -m tune_runner ...`: `python` must be this environment's, as on a cluster image.
    env.update({MARK: str(mark), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    port = free_port()
    ports = [f"--port={free_port()}", f"--dashboard-port={port}", f"--dashboard-agent-listen-port={free_port()}",
             f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
             f"--metrics-export-port={free_port()}", f"--ray-client-server-port={free_port()}"]
    temp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    try:
        started = subprocess.run([RAY, "start", "--head", "--node-ip-address=127.0.0.1", "--include-dashboard=true",
                                  "--dashboard-host=127.0.0.1", *ports, "--num-cpus=2", "--disable-usage-stats",
                                  f"--temp-dir={temp}"], env=env, capture_output=True, text=True, timeout=180)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        yield f"http://127.0.0.1:{port}"
    finally:
        reap(mark)
        shutil.rmtree(temp, ignore_errors=True)


def wait_for_end(address: str, job_id: str, *, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = jobs.status(address, job_id)
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(1)
    return "still " + jobs.status(address, job_id)


def test_submit_runs_the_search_as_a_ray_job(dashboard, cli, tmp_path):
    raw = {"description": "oracle, two trials", "trainable": "oracle", "env": "CartPole-v1",
           "budget": {"env_steps": 3000}, "searcher": {"name": "random", "seed": 0}, "scheduler": "fifo",
           "num_samples": 2, "fixed": {"optimum": {"x": 0.5}, "steps_per_iteration": 1000, "noise": 0.0},
           "space": {"x": {"uniform": [0.0, 1.0]}}}
    space = tmp_path / "laptop" / "tiny.yaml"  # a local file: it must travel in the job's runtime env
    space.parent.mkdir()
    space.write_text(yaml.safe_dump(raw))
    results, store = tmp_path / "results", f"sqlite:///{tmp_path / 'mlflow.db'}"
    job_id = f"tune-rl-e2e-{random.randrange(10**6)}"
    submitted = cli("submit", "--address", dashboard, "--space", str(space), "--name", "via-job",
                    "--storage", str(results), "--mlflow-uri", store, "--shared-fs", "--no-reevaluate",
                    "--job-id", job_id)
    assert submitted.status == 0, submitted.err
    assert submitted.out.splitlines()[0] == f"submitted  {job_id}  to {dashboard}"

    final = wait_for_end(dashboard, job_id)
    logs = cli("jobs", "logs", job_id, "--address", dashboard)
    assert final == "SUCCEEDED", logs.out[-4000:]
    assert logs.status == 0
    for line in ("trials     2: ", "best       ", "exported   "):
        assert line in logs.out, (line, logs.out[-3000:])

    best = results / "via-job" / "best.yaml"
    assert best.is_file(), sorted(p.name for p in (results / "via-job").iterdir())
    assert export.load(best).trainable == "oracle"
    assert (tmp_path / "mlflow.db").is_file()

    listed = cli("jobs", "list", "--address", dashboard)
    [row] = [line for line in listed.out.splitlines() if line.startswith(job_id)]
    assert row.split()[1] == "SUCCEEDED" and "search --space tiny.yaml" in row
