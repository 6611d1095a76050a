"""A trial given 2 CPUs steps a user's slow env (a plugin file, 2 ms a step) in 2 worker processes (issue 18), on a
real local Ray: they run beside the trial's actor, they know the user's env (forked), and the trial reports the
backend it used. (That no worker outlives its learner is tests/test_vector_envs.py's: Ray also kills a dead
worker's children itself.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

PLUGIN = """
import time

import gymnasium as gym
import numpy as np

from tune_runner.plugins import register_env


@register_env("plugin_slow_arm")
class SlowArm(gym.Env):
    \"\"\"A simulator that takes 2 ms a step: push right to reach the end.\"\"\"

    def __init__(self, env_config=None):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        self.pos, self.t = self.pos + (1 if action == 1 else 0), self.t + 1
        return np.array([min(self.pos / 10, 1.0)], np.float32), float(action == 1), self.pos >= 10, self.t >= 20, {}
"""


def forked_ray_processes() -> list[tuple[int, str]]:
    """(pid, cmdline) of the processes that carry a Ray worker's title but no raylet started: forks of a trial."""
    processes = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            processes[int(entry.name)] = (parent, cmdline)
    raylets = {pid for pid, (_, cmdline) in processes.items() if "/raylet" in cmdline.split(" ", 1)[0]}
    return [(pid, cmdline) for pid, (parent, cmdline) in processes.items()
            if cmdline.startswith("ray::") and parent not in raylets]


def test_a_trial_with_two_cpus_steps_its_envs_in_two_worker_processes(ray_session, cli, _isolated_home, tmp_path):
    (tmp_path / "slow_arm.py").write_text(PLUGIN)
    space = tmp_path / "slow.yaml"
    space.write_text(yaml.safe_dump({
        "trainable": "ppo", "env": "plugin_slow_arm", "budget": {"env_steps": 1024}, "num_samples": 1,
        "reevaluate": False, "searcher": "random", "scheduler": "fifo", "plugins": ["slow_arm.py"],
        "fixed": {"num_envs_per_env_runner": 8, "train_batch_size_per_learner": 512, "minibatch_size": 256,
                  "num_epochs": 1}}))
    seen: set[int] = set()  # env workers seen while the search runs: the check below can see them
    searching = threading.Event()
    searching.set()

    def watch() -> None:
        while searching.is_set():
            seen.update(pid for pid, _ in forked_ray_processes())
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = cli("search", "--space", str(space), "--name", "slow", "--cpus-per-trial", "2")
    finally:
        searching.clear()
        watcher.join()
    assert result.status == 0, result.err
    assert len(seen) >= 2, seen
    from ray.tune import ExperimentAnalysis

    (trial,) = ExperimentAnalysis(str(_isolated_home / "results" / "slow")).trials
    assert trial.status == "TERMINATED" and trial.last_result["env_steps"] >= 1024
    assert trial.last_result["vector_env"] == "processes"
