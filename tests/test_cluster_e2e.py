"""`tune-rl search --address` on a real two-node Ray cluster: two raylets started with `ray start` on loopback."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tune_runner.reaper import MARK, reap

pytestmark = pytest.mark.e2e
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def two_nodes():
    """A head and a worker node (1 CPU each); every process carries a mark so the teardown ends exactly them."""
    mark = random.randrange(10**9, 2 * 10**9)
    env = {**os.environ, MARK: str(mark), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    port = free_port()
    common = ["--num-cpus=1", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    temp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    try:
        subprocess.run([RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
                        f"--temp-dir={temp}", *common], env=env, check=True, capture_output=True, timeout=120)
        subprocess.run([RAY, "start", f"--address=127.0.0.1:{port}", *common], env=env, check=True,
                       capture_output=True, timeout=120)
        yield f"127.0.0.1:{port}"
    finally:
        reap(mark)
        shutil.rmtree(temp, ignore_errors=True)


def test_search_with_address_runs_trials_on_both_nodes(two_nodes, _isolated_home, tmp_path):
    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 6000}, "searcher": "random",
           "scheduler": "fifo", "num_samples": 4, "reevaluate": False,
           "fixed": {"optimum": {"x": 0.5}, "sleep_s": 0.3}, "space": {"x": {"uniform": [0.0, 1.0]}}}
    space = tmp_path / "c.yaml"
    space.write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if k != MARK}
    env.update(TUNE_RL_HOME=str(_isolated_home), RAY_AUTH_MODE="disabled")
    proc = subprocess.run([sys.executable, "-m", "tune_runner", "search", "--space", str(space), "--name", "two",
                           "--address", two_nodes], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)  # not the checkout: the workers get tune_runner from the runtime env
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 nodes; --storage" in proc.stdout  # the local-storage note
    nodes = set()
    for result_file in (_isolated_home / "results" / "two").glob("*/result.json"):
        rows = [json.loads(line) for line in result_file.read_text().splitlines() if line.strip()]
        nodes.update(r["node_id"] for r in rows)
    assert len(nodes) == 2, nodes


def test_a_wrong_address_is_one_line_and_nothing_starts(_isolated_home, cli):
    result = cli("search", "--space", "oracle", "--address", "127.0.0.1:1", "--num-cpus", "2")
    assert result.status == 2 and "--num-cpus: sizes a local Ray" in result.err
