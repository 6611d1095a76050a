"""Our PPO learns a continuous-action task (issue 18): Pendulum-v1's return rises well above what its untrained
Gaussian policy gets, within a small budget (about 10 s on one thread; e2e: longer than a unit test may train)."""

from __future__ import annotations

import pytest

from tune_runner.algos import PPO, PPOConfig

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("one_torch_thread")]


def test_pendulum_return_rises_from_the_random_policys_level():
    settings = {"observation_filter": "MeanStdFilter", "normalize_rewards": True}  # both on: their learning too
    config = PPOConfig.from_dict({"lr": 1e-3, "gamma": 0.9, "lambda_": 0.95, "num_epochs": 10, "minibatch_size": 256,
                                  "train_batch_size": 4096, "num_envs_per_env_runner": 16, "vf_clip_param": None,
                                  "metrics_num_episodes_for_smoothing": 32, "seed": 21, **settings})
    learner = PPO(config, env_id="Pendulum-v1")
    untrained = learner.train_iteration()["episode_return_mean"]  # 16 episodes of the initial policy
    assert untrained < -900  # a random torque swings nowhere near upright
    while learner.env_steps < 70_000:
        result = learner.train_iteration()
    assert result["episode_return_mean"] > untrained + 400, (untrained, result["episode_return_mean"])
    learner.close()
