"""Our numpy-vectorized Pendulum-v1 against gymnasium's own envs stepped by SyncVectorEnv (issue 18): the same
seed gives the same starts, observations, truncations and (to float64 rounding) rewards, and our PPO trains
bit for bit the same on either; it is picked by default, and an env_config it does not take falls back."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tests.test_algos import same, same_weights
from tune_runner.algos import PPO, PPOConfig
from tune_runner.algos.common import default_vectorize_mode, make_vec_env
from tune_runner.algos.vector_envs import PendulumVectorEnv

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def gymnasiums(num_envs: int, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec("Pendulum-v1", num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"g": 9.81, "max_episode_steps": 50}], ids=["default", "g-and-limit"])
def test_the_same_seed_gives_gymnasiums_numbers(kwargs):
    theirs, ours = gymnasiums(6, **kwargs), PendulumVectorEnv(6, **kwargs)
    obs_a, _ = theirs.reset(seed=7)
    obs_b, _ = ours.reset(seed=7)
    assert np.array_equal(obs_a, obs_b)
    rng = np.random.default_rng(0)
    truncations = 0
    for _ in range(450):  # several episodes: autoresets included
        actions = rng.uniform(-3, 3, (6, 1)).astype(np.float32)  # beyond the bounds too: both clip
        a, b = theirs.step(actions), ours.step(actions)
        assert np.array_equal(a[0], b[0])  # observations (float32)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-9, atol=1e-12)  # rewards (float64; the sum's rounding)
        assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])
        truncations += int(b[3].sum())
    assert truncations >= 6 * 2


def test_our_ppo_trains_bit_for_bit_the_same_on_either_backend():
    config = {"lr": 1e-3, "gamma": 0.9, "num_epochs": 2, "minibatch_size": 128, "train_batch_size": 1024,
              "num_envs_per_env_runner": 8, "vf_clip_param": None, "seed": 3}
    theirs = PPO(PPOConfig.from_dict({**config, "gym_env_vectorize_mode": "sync"}), env_id="Pendulum-v1")
    ours = PPO(PPOConfig.from_dict(config), env_id="Pendulum-v1")
    assert isinstance(ours.env.envs[0].env, PendulumVectorEnv)
    assert isinstance(theirs.env.envs[0].env, gym.vector.SyncVectorEnv)
    for _ in range(3):
        assert same(theirs.train_iteration(), ours.train_iteration())
    assert same_weights(theirs, ours)


def test_pendulum_takes_ours_by_default_and_gymnasiums_for_a_key_ours_lacks():
    assert default_vectorize_mode("Pendulum-v1") == "vector_entry_point"
    assert default_vectorize_mode("Acrobot-v1") == "sync"
    assert isinstance(make_vec_env("Pendulum-v1", env_config={"g": 5.0}, num_envs=2, seed=0).env, PendulumVectorEnv)
    fallback = make_vec_env("Pendulum-v1", env_config={"render_mode": "rgb_array"}, num_envs=2, seed=0)
    assert isinstance(fallback.env, gym.vector.SyncVectorEnv)
