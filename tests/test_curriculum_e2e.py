"""End to end: a curriculum (env_task_fn) raises the task of a real search's envs, on `ppo` and `rllib/PPO`.

The task-settable env lives in a plugin file written to tmp_path and registered with gymnasium
(for this process) and Ray Tune (whose registry reaches every Ray worker; the file itself is
pickled by value, since trial processes cannot import it): a user's own env, not one we ship.
The shipped envs/curriculum.py runs as shipped in tests/test_shipped_e2e.py.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

ENV_ID = "TuneRlE2ELevel-v0"
PLUGIN = '''
"""A task-settable env: the task is a level; every step pays the level, so returns follow the task."""
import sys

import gymnasium as gym
import numpy as np
from ray import cloudpickle
from ray.tune.registry import register_env

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # trial processes cannot import this file


class LevelEnv(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None, **kwargs):
        self.level, self.t = int({**(config or {}), **kwargs}.get("level", 0)), 0

    def get_task(self):
        return self.level

    def set_task(self, task):
        self.level = int(task)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.level], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.level], np.float32), float(self.level), self.t >= 5, False, {}


gym.register("TuneRlE2ELevel-v0", entry_point=LevelEnv)
register_env("TuneRlE2ELevel-v0", lambda config: LevelEnv(config))
'''
TASK_FN = '''
def by_steps(train_results, task_settable_env, env_ctx):
    """One level more per 200 env steps (RLlib's old-stack key, which tune-rl provides on both backends)."""
    return int(train_results["timesteps_total"]) // 200
'''


def load_plugin(path: Path) -> None:
    """Import a plugin file once per test session (what tune_runner/plugins/__init__.py will do)."""
    name = f"tune_rl_e2e_plugin_{path.stem}"
    if name in sys.modules:
        return
    path_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(path_spec)
    sys.modules[name] = module
    path_spec.loader.exec_module(module)


def space_file(tmp_path: Path, *, trainable: str, runners: int) -> Path:
    plugin = tmp_path / "level_env.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    load_plugin(plugin)
    task_fn = tmp_path / "levels.py"
    task_fn.write_text(textwrap.dedent(TASK_FN))
    raw = {"description": "curriculum e2e", "trainable": trainable, "env": ENV_ID, "metric": "episode_return_mean",
           "mode": "max", "budget": {"env_steps": 800}, "searcher": "random", "scheduler": "fifo", "num_samples": 1,
           "fixed": {"env_task_fn": f"{task_fn}:by_steps", "num_env_runners": runners, "num_envs_per_env_runner": 2,
                     "train_batch_size_per_learner": 200, "minibatch_size": 50, "num_epochs": 1,
                     "metrics_num_episodes_for_smoothing": 4}}
    path = tmp_path / "curriculum.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# RLlib with a remote env runner and ours with a rollout worker (the task crosses processes); ours in the trial's
# process and RLlib's local runner take the same code paths as these (unit tests in test_curriculum.py).
@pytest.mark.parametrize("trainable, runners", [("rllib/PPO", 1), ("ppo", 1)],
                         ids=["rllib-PPO-remote-env-runner", "ppo-rollout-worker"])
def test_the_logged_task_rises_and_the_envs_follow_it(trainable, runners, ray_session, cli, _isolated_home,
                                                      tmp_path):
    from mlflow.tracking import MlflowClient
    from ray.tune import ExperimentAnalysis

    name = f"curriculum-{trainable.replace('/', '-')}-{runners}"
    result = cli("search", "--space", str(space_file(tmp_path, trainable=trainable, runners=runners)),
                 "--name", name, "--no-reevaluate")
    assert result.status == 0, result.err

    (frame,) = ExperimentAnalysis(str(_isolated_home / "results" / name)).trial_dataframes.values()
    rows = frame.to_dict("records")
    tasks = [row["task"] for row in rows]
    assert len(tasks) >= 3 and tasks == sorted(tasks) and tasks[-1] > tasks[0], tasks
    # The envs really run the raised task: every step pays the level.
    assert rows[-1]["episode_return_mean"] > rows[0]["episode_return_mean"], [r["episode_return_mean"] for r in rows]

    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("curriculum")  # named after the space file
    (child,) = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    logged = [m.value for m in sorted(client.get_metric_history(child.info.run_id, "task"), key=lambda m: m.step)]
    assert logged == tasks
