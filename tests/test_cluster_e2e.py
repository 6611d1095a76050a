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
import time
from pathlib import Path

import pytest
import yaml

from tune_runner.cluster.reaper import MARK, marked, reap

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


USER_ENV = """
import time

import gymnasium as gym
import numpy as np

from tune_runner.plugins import register_env


@register_env("cluster_walk")
class Walk(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None):
        self.length = int((env_config or {}).get("length", 4))
        self.pause = float((env_config or {}).get("pause", 0.0))  # slow steps keep both nodes busy at once

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        time.sleep(self.pause)
        self.pos, self.t = max(0, self.pos + (1 if action else -1)), self.t + 1
        done = self.pos >= self.length
        return np.array([self.pos / self.length], np.float32), float(done), done, self.t >= 30, {}
"""


def test_search_with_address_runs_trials_on_both_nodes(two_nodes, _isolated_home, tmp_path):
    """A user env from the working folder's envs/ runs on both nodes: it reaches the workers through the
    runtime env (the trials import tune_rl_user_plugins, a package that exists nowhere else)."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "walk.py").write_text(USER_ENV)
    raw = {"trainable": "ppo", "env": "cluster_walk", "env_config": {"pause": 0.004},
           "budget": {"env_steps": 600}, "searcher": "random",
           "scheduler": "fifo", "num_samples": 4, "reevaluate": False,
           "fixed": {"num_envs_per_env_runner": 2, "train_batch_size": 200, "minibatch_size": 50, "num_epochs": 1},
           "space": {"lr": {"loguniform": [1.0e-3, 1.0e-2]}}}
    space = tmp_path / "c.yaml"
    space.write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if k != MARK}
    env.update(TUNE_RL_HOME=str(_isolated_home), RAY_AUTH_MODE="disabled")
    proc = subprocess.run([sys.executable, "-m", "tune_runner", "search", "--space", str(space), "--name", "two",
                           "--address", two_nodes, "--no-export"], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # not the checkout: workers get tune_runner from the runtime env
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 nodes; --storage" in proc.stdout  # the local-storage note
    nodes, plugins = set(), set()
    for result_file in (_isolated_home / "results" / "two").glob("*/result.json"):
        rows = [json.loads(line) for line in result_file.read_text().splitlines() if line.strip()]
        nodes.update(r["node_id"] for r in rows)
        plugins.update(p for r in rows for p in r["config"]["tune_rl_plugins"])
        assert rows[-1]["env_steps"] >= 600
    assert len(nodes) == 2, nodes
    assert plugins == {"module:tune_rl_user_plugins.p0_walk"}, plugins


def test_a_wrong_address_is_one_line_and_nothing_starts(_isolated_home, tmp_path):
    """An address where nothing listens, contacted by a fresh driver (in this process the suite's
    shared Ray would be reused and the address never tried): one line within seconds, exit 2."""
    port = free_port()  # closed again: nothing listens there
    env = {**os.environ, "TUNE_RL_HOME": str(_isolated_home), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tune_runner", "search", "--space", "oracle", "--name", "nowhere",
                             "--address", f"127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, out[-2000:] + err[-2000:]
    assert err.strip().splitlines() == [
        f"tune-rl: --address 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} (Connection refused); check "
        f"the address (the head's GCS port, 6379 by default, or ray://host:10001), or drop --address for a local Ray"]
    assert time.monotonic() - started < 60  # ray.init alone retries for a quarter of an hour
    assert not (_isolated_home / "results" / "nowhere").exists() and not (_isolated_home / "mlflow.db").exists()
    assert marked(proc.pid) == []  # no local Ray left behind in its place


def test_num_cpus_with_an_address_is_refused_before_anything_is_contacted(_isolated_home, cli):
    result = cli("search", "--space", "oracle", "--address", "127.0.0.1:1", "--num-cpus", "2")
    assert result.status == 2 and "--num-cpus: sizes a local Ray" in result.err
