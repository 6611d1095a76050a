"""RLlib's result keys map to our metric names in one place."""

from __future__ import annotations

import math

from tune_runner.trainables.metrics import RLLIB_METRICS, from_rllib, lookup

RLLIB_RESULT = {
    "tune_rl": {"episode_return_mean": 187.5, "episode_len_mean": 187.5, "episodes": 40,
                "episode_return_max": 500.0, "episode_return_min": 9.0},  # trainables.rllib_episodes' window
    "env_runners": {"episode_return_mean": 480.0, "episode_len_mean": 480.0, "num_episodes_lifetime": 41.0},
    "learners": {"default_policy": {"policy_loss": -0.02, "vf_loss": 3.1, "entropy": 0.55,
                                    "mean_kl_loss": 0.01, "default_optimizer_learning_rate": 3e-4},
                 "__all_modules__": {"num_env_steps_trained": 4000}},
    "num_env_steps_sampled_lifetime": 12000.0,
    "time_this_iter_s": 2.0,
    "config": {"lr": 3e-4},
}


def test_maps_rllib_names_to_ours():
    out = from_rllib(RLLIB_RESULT, previous={"env_steps": 8000})
    assert out["episode_return_mean"] == 187.5 and out["env_steps"] == 12000 and out["episodes"] == 40
    assert out["rllib_episode_return_mean"] == 480.0  # RLlib's own figure, not the one we decide on
    assert isinstance(out["env_steps"], int)
    assert out["policy_loss"] == -0.02 and out["kl"] == 0.01 and out["lr"] == 3e-4
    assert out["sps"] == 2000.0  # 4000 new env steps in 2 s
    assert "config" not in out and "qf_loss" not in out  # nothing of RLlib's own dump, nothing missing


def test_return_carries_over_in_a_result_without_our_window():
    result = {"num_env_steps_sampled_lifetime": 100.0, "env_runners": {"episode_return_mean": 9.0}}
    assert math.isnan(from_rllib(result)["episode_return_mean"])
    assert from_rllib(result, previous={"episode_return_mean": 42.0})["episode_return_mean"] == 42.0


def test_every_mapped_path_is_a_slash_path():
    assert all(lookup(RLLIB_RESULT, path) is not None for name, path in RLLIB_METRICS.items()
               if name in ("episode_return_mean", "env_steps", "entropy", "vf_loss"))
