"""A searched env_config key in real short searches: the sampled value reaches the env each trial builds,
for our PPO and RLlib's, and the exported bundle names it. The env's episodes last exactly `length`
steps, so each trial's reported episode_len_mean says which env it trained on."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

PLUGIN = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np

    from tune_runner.plugins import register_env


    @register_env("fixed_length")
    class FixedLength(gym.Env):
        """Every episode lasts exactly env_config["length"] steps, whatever the actions."""

        def __init__(self, env_config=None):
            self.length = int((env_config or {})["length"])
            self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.array([self.t / self.length], np.float32), float(action), self.t >= self.length, False, {}
''')

SMALL = {  # a few hundred env steps per trial
    "ppo": {"num_envs_per_env_runner": 2, "train_batch_size_per_learner": 128, "minibatch_size": 64,
            "num_epochs": 1},
    "rllib/PPO": {"num_envs_per_env_runner": 1, "num_env_runners": 0, "train_batch_size_per_learner": 128,
                  "minibatch_size": 64, "num_epochs": 1},
}


@pytest.fixture(scope="module")
def plugin_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plugin file for the module: the same name registered from two files would be refused (rightly)."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "plugins").mkdir()
    (folder / "plugins" / "fixed_length.py").write_text(PLUGIN)
    return folder


def results(folder: Path) -> list[dict]:
    rows = []
    for path in folder.glob("*/result.json"):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


@pytest.mark.parametrize("trainable", ["ppo", "rllib/PPO"])
def test_a_searched_env_config_key_reaches_every_trials_env(trainable, ray_session, cli, _isolated_home,
                                                            plugin_folder):
    raw = {"trainable": trainable, "env": "fixed_length", "budget": {"env_steps": 256}, "reevaluate": False,
           "plugins": ["plugins"], "fixed": SMALL[trainable], "metric": "episode_len_mean",
           "space": {"env_config.length": {"grid": [3, 7]}}}
    space = plugin_folder / f"{trainable.replace('/', '-')}.yaml"
    space.write_text(yaml.safe_dump(raw))
    name = "len-" + trainable.replace("/", "-")
    result = cli("search", "--space", str(space), "--name", name)
    assert result.status == 0, result.out + result.err
    rows = [r for r in results(_isolated_home / "results" / name) if r.get("episode_len_mean") is not None]
    lengths = {(r["config"]["env_config.length"], r["episode_len_mean"]) for r in rows}
    assert lengths == {(3, 3.0), (7, 7.0)}, lengths
    bundle = yaml.safe_load(next((_isolated_home / "results" / name).glob("**/best.yaml")).read_text())
    assert bundle["env_config"] == {"length": 7} and "env_config.length" not in bundle["config"]
