"""User plugins (written to a temp folder, never inside our package) registered and used in real short searches."""

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
    import torch
    from torch import nn

    from tune_runner.algos.networks import Model, build_model
    from tune_runner.plugins import register_agent, register_env, register_model


    @register_env("plugin_corridor")
    class Corridor(gym.Env):
        """Walk right to the goal; each step costs a little."""

        def __init__(self, env_config=None):
            self.length = int((env_config or {}).get("length", 5))
            self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.pos, self.t = 0, 0
            return np.array([0.0], np.float32), {}

        def step(self, action):
            self.pos = max(0, self.pos + (1 if action == 1 else -1))
            self.t += 1
            done = self.pos >= self.length
            obs = np.array([self.pos / self.length], np.float32)
            return obs, (1.0 if done else -0.01), done, self.t >= 50, {}


    @register_env("plugin_dials")
    class Dials(gym.Env):
        """Set two dials (3 and 4 positions) to the targets shown, one-hot: MultiDiscrete actions."""

        def __init__(self, env_config=None):
            self.observation_space = gym.spaces.Box(0.0, 1.0, (7,), np.float32)
            self.action_space = gym.spaces.MultiDiscrete([3, 4])

        def _show(self):
            self.target = np.array([self.np_random.integers(3), self.np_random.integers(4)])
            return np.concatenate([np.eye(3, dtype=np.float32)[self.target[0]],
                                   np.eye(4, dtype=np.float32)[self.target[1]]])

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._show(), {}

        def step(self, action):
            assert self.action_space.contains(np.asarray(action)), action
            reward = float(np.mean(np.asarray(action) == self.target))
            self.t += 1
            return self._show(), reward, False, self.t >= 8, {}


    @register_model("plugin_wide")
    class Wide(Model):
        @staticmethod
        def add_args(parser):
            parser.add_argument("--width", type=int, default=16, help="hidden units")

        def __init__(self, num_inputs, num_outputs, args):
            super().__init__(num_inputs, num_outputs, args)
            self.net = nn.Sequential(nn.Linear(num_inputs, args.width), nn.Tanh(), nn.Linear(args.width, num_outputs))

        def forward(self, obs):
            return self.net(obs)


    @register_agent("plugin_reinforce")
    class Reinforce:
        """Vanilla policy gradient over whole episodes: a learning rule of the user's own."""

        reports = ("episode_return_mean", "env_steps", "width_seen")

        @staticmethod
        def add_args(parser):
            parser.add_argument("--lr", type=float, default=0.02)
            parser.add_argument("--episodes_per_iteration", type=int, default=8)

        def __init__(self, args):
            self.args, self.env = args, gym.make(args.env, **args.env_config)
            self.env.reset(seed=args.seed)
            torch.manual_seed(args.seed)
            self.pi = build_model(args.model, num_inputs=1, num_outputs=2, model_config=args.model_config)
            self.opt = torch.optim.SGD(self.pi.parameters(), lr=args.lr)
            self.env_steps, self.returns = 0, []

        def compute_actions(self, obs, explore=False):
            logits = self.pi(torch.as_tensor(np.asarray(obs, np.float32)))
            return (torch.distributions.Categorical(logits=logits).sample() if explore else logits.argmax(-1)).numpy()

        def train_iteration(self):
            loss = 0.0
            for _ in range(self.args.episodes_per_iteration):
                obs, _ = self.env.reset()
                logps, total, done = [], 0.0, False
                while not done:
                    dist = torch.distributions.Categorical(logits=self.pi(torch.as_tensor(obs)[None]))
                    action = dist.sample()
                    logps.append(dist.log_prob(action))
                    obs, reward, terminated, truncated, _ = self.env.step(int(action))
                    total, done = total + reward, terminated or truncated
                    self.env_steps += 1
                loss = loss - torch.stack(logps).sum() * total
                self.returns.append(total)
            self.opt.zero_grad()
            (loss / self.args.episodes_per_iteration).backward()
            self.opt.step()
            width = getattr(getattr(self.pi, "args", None), "width", 0)
            return {"episode_return_mean": float(np.mean(self.returns[-20:])), "env_steps": self.env_steps,
                    "width_seen": width}
''')


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plugin folder for the module: a name registered from two files would be refused (rightly)."""
    folder = tmp_path_factory.mktemp("user") / "my_plugins"
    folder.mkdir()
    (folder / "corridor.py").write_text(PLUGIN)
    return folder


def results(folder: Path) -> list[dict]:
    rows = []
    for path in folder.glob("*/result.json"):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def test_a_user_env_model_and_agent_from_a_temp_folder_run_a_real_search(ray_session, cli, _isolated_home, plugins):
    raw = {"trainable": "plugin_reinforce", "env": "plugin_corridor", "env_config": {"length": 3},
           "budget": {"env_steps": 600}, "searcher": {"name": "random", "seed": 1}, "num_samples": 2,
           "reevaluate": False, "plugins": ["my_plugins"],  # relative to the space file
           "fixed": {"model": "plugin_wide"},
           "space": {"model_config.width": {"choice": [8, 32]}, "lr": {"loguniform": [0.005, 0.05]}}}
    space = plugins.parent / "s.yaml"
    space.write_text(yaml.safe_dump(raw))
    result = cli("search", "--space", str(space), "--name", "plug", "--no-export")
    assert result.status == 0, result.out + result.err
    rows = results(_isolated_home / "results" / "plug")
    assert rows and max(r["env_steps"] for r in rows) >= 600
    # the searched model option reached the user's network inside the user's agent
    assert {r["width_seen"] for r in rows} == {r["config"]["model_config.width"] for r in rows}
    assert all(r["config"]["tune_rl_plugins"] == [str(plugins / "corridor.py")] for r in rows)


def test_our_ppo_trains_a_registered_model_and_bad_names_are_one_line(ray_session, cli, _isolated_home, plugins):
    result = cli("train", "--plugins", str(plugins / "corridor.py"), "--env_name", "plugin_corridor",
                 "--agent_name", "ppo", "--model_name", "plugin_wide", "--width", "24", "--num_envs_per_worker", "4",
                 "--num_workers", "1", "--num_cpus", "2",
                 "--batch_size", "256", "--budget", "512", "--minibatch_size", "64", "--num_epochs", "2",
                 "--name", "wide")
    assert result.status == 0, result.out + result.err
    rows = results(_isolated_home / "results" / "wide")
    config = rows[-1]["config"]
    assert config["model"] == "plugin_wide" and config["model_config.width"] == 24
    assert config["num_envs_per_env_runner"] == 4 and config["train_batch_size"] == 256
    assert rows[-1]["env_steps"] >= 512
    bad = cli("train", "--plugins", str(plugins / "corridor.py"), "--env_name", "plugin_corridr")
    assert bad.status == 2 and "did you mean 'plugin_corridor'" in bad.err and "\n" not in bad.err.strip()
    bad = cli("train", "--plugins", str(plugins / "corridor.py"), "--env_name", "plugin_corridor",
              "--model_name", "plugin_wde")
    assert bad.status == 2 and "did you mean 'plugin_wide'" in bad.err


def test_our_ppo_learns_a_users_multidiscrete_env_with_rollout_workers_and_exports_its_policy(
        ray_session, cli, _isolated_home, plugins):
    """A stranger's MultiDiscrete env: searched with our ppo and a rollout worker, then its exported policy and
    MLflow model act in the env's own space."""
    import mlflow
    import numpy as np

    from tune_runner.results.evaluate import evaluate
    from tune_runner.results.policy import load_policy

    raw = {"trainable": "ppo", "env": "plugin_dials", "budget": {"env_steps": 6000}, "num_samples": 1,
           "searcher": {"name": "random", "seed": 1}, "scheduler": "fifo", "plugins": ["my_plugins"],
           "fixed": {"num_env_runners": 1, "num_envs_per_env_runner": 4, "train_batch_size_per_learner": 500,
                     "minibatch_size": 100, "num_epochs": 4, "lr": 0.01, "metrics_num_episodes_for_smoothing": 20},
           "space": {"lambda_": {"uniform": [0.9, 0.95]}}}
    space = plugins.parent / "dials.yaml"
    space.write_text(yaml.safe_dump(raw))
    result = cli("search", "--space", str(space), "--name", "dials")
    assert result.status == 0, result.out + result.err
    rows = results(_isolated_home / "results" / "dials")
    # a random policy sets about 2.3 dials' worth of 8 right
    assert rows[0]["episode_return_mean"] < 3.5 < 6.0 < rows[-1]["episode_return_mean"], rows[-1]
    best = _isolated_home / "results" / "dials" / "best.yaml"
    policy = load_policy(best)
    assert policy.actions.nvec == (3, 4) and evaluate(policy, episodes=4, seed=3).mean > 6.0
    obs = np.eye(7, dtype=np.float32)[[0, 3, 1, 4, 2, 5]].reshape(3, 2, 7).sum(axis=1)  # targets (0,0) (1,1) (2,2)
    mlflow.set_tracking_uri(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    (parent,) = mlflow.search_runs(experiment_names=["dials"], filter_string="tags.tune_rl.status = 'finished'",
                                   output_format="list")
    logged = mlflow.pyfunc.load_model(f"runs:/{parent.info.run_id}/policy").predict(obs)
    np.testing.assert_array_equal(logged, policy.compute_actions(obs))
    assert logged.shape == (3, 2) and logged.dtype == np.int64
