"""End to end: a real search on an env with action masks never takes a masked action (ppo, rllib/PPO, rllib/DQN).

The env lives in a plugin file written to tmp_path, registered with gymnasium (this process) and
Ray Tune (every Ray worker; the file is pickled by value). Env instances live in trial and
EnvRunner processes, so each writes its running counts to a file in `env_config.log_dir`.
A user's own env, not one we ship: the shipped envs/action_masking.py runs as shipped (space
masked_choice) in tests/test_shipped_e2e.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests.test_curriculum_e2e import load_plugin

pytestmark = pytest.mark.e2e

ENV_ID = "TuneRlE2EMasked-v0"
PLUGIN = '''
"""Half the actions are forbidden at each step, and a forbidden action would pay the most: a learner that
ignored the mask would learn to take them."""
import os
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
from ray import cloudpickle
from ray.tune.registry import register_env

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # trial processes cannot import this file


class CountingMaskEnv(gym.Env):
    observation_space = gym.spaces.Dict({"observations": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
                                         "action_mask": gym.spaces.MultiBinary(4)})
    action_space = gym.spaces.Discrete(4)

    def __init__(self, config=None, **kwargs):
        config = {**(config or {}), **kwargs}
        self.log = Path(config["log_dir"]) / f"{os.getpid()}-{id(self)}.txt"
        self.steps = self.masked = self.t = 0

    def _obs(self):
        self.mask = self.np_random.random(4) < 0.5
        self.mask[self.np_random.integers(4)] = True
        return {"observations": self.mask.astype(np.float32) * 2 - 1, "action_mask": self.mask.astype(np.int8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        allowed = bool(self.mask[action])
        self.steps, self.masked, self.t = self.steps + 1, self.masked + (not allowed), self.t + 1
        done = self.t >= 10
        if done:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self.log.write_text(f"{self.steps} {self.masked}\\n")  # this instance's running totals
        return self._obs(), 0.1 if allowed else 1.0, done, False, {}


gym.register("TuneRlE2EMasked-v0", entry_point=CountingMaskEnv)
register_env("TuneRlE2EMasked-v0", lambda config: CountingMaskEnv(config))
'''
SETTINGS = {
    "ppo": {"num_envs_per_env_runner": 2, "train_batch_size_per_learner": 200, "minibatch_size": 50, "num_epochs": 2},
    "rllib/PPO": {"num_envs_per_env_runner": 2, "train_batch_size_per_learner": 200, "minibatch_size": 50,
                  "num_epochs": 2},
    "rllib/DQN": {"num_envs_per_env_runner": 2, "train_batch_size_per_learner": 32,
                  "num_steps_sampled_before_learning_starts": 100},
}


def space_file(tmp_path: Path, trainable: str, log_dir: Path) -> Path:
    plugin = tmp_path / "masked_env.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    load_plugin(plugin)
    raw = {"description": "masking e2e", "trainable": trainable, "env": ENV_ID, "env_config": {"log_dir": str(log_dir)},
           "metric": "episode_return_mean", "mode": "max", "budget": {"env_steps": 1000}, "searcher": "random",
           "scheduler": "fifo", "num_samples": 1, "fixed": {"num_env_runners": 0, **SETTINGS[trainable]}}
    path = tmp_path / "masked.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# rllib/DQN masks too (tests/test_masking.py runs its module through a real EnvRunner and Learner); its
# e2e run costs 40 s of RLlib DQN's ~80 env steps/s here, so the suite leaves it out.
@pytest.mark.parametrize("trainable", ["ppo", "rllib/PPO"])
def test_no_masked_action_is_ever_taken(trainable, ray_session, cli, _isolated_home, tmp_path):
    log_dir = tmp_path / "counts"
    name = f"masked-{trainable.replace('/', '-')}"
    result = cli("search", "--space", str(space_file(tmp_path, trainable, log_dir)), "--name", name,
                 "--no-reevaluate")
    assert result.status == 0, result.err
    counts = [tuple(map(int, f.read_text().split())) for f in log_dir.glob("*.txt")]
    steps, masked = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert steps >= 900, counts  # the envs really ran the trial's steps
    assert masked == 0, f"{masked} masked actions in {steps} steps"
