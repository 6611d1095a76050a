"""gSDE on our PPO's Box actions (issue 18's Pendulum target): state-dependent exploration, Stable-Baselines3's rule.

The noise is the policy's last hidden features times a matrix E drawn per env from N(0, exp(log_std)^2), kept
for sde_sample_freq vector steps; the density the loss uses is the Gaussian of that noise given the features.
Checked against hand-computed values, on the noise matrices a rollout really used (with one feature, E is
noise / feature), on exact checkpoints and on refusals; K gSDE seeds training as they would alone is
tests/test_continuous.py's K-seed test, run with gSDE too.
"""

from __future__ import annotations

import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.test_algos import same, same_weights, small_ppo
from tests.test_continuous import PENDULUM, box2
from tune_runner.algos import PPO, PPOConfig
from tune_runner.algos.distributions import gaussian_entropy, gaussian_logp, sde_log_std

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_the_noise_variance_is_the_squared_features_times_the_squared_stds_by_hand():
    # Two features, two action numbers: var_a = sum_f feature_f^2 * std_fa^2 (+ SB3's 1e-6).
    features = torch.tensor([[1.0, 2.0]])
    log_std = torch.log(torch.tensor([[1.0, 2.0], [3.0, 1.0]]))
    variance = [1 * 1 + 4 * 9, 1 * 4 + 4 * 1]  # 37 and 8
    got = sde_log_std(features, log_std)
    assert got.tolist()[0] == pytest.approx([0.5 * math.log(v + 1e-6) for v in variance], rel=1e-6)
    # the density and entropy are those of N(mean, var) per action number, summed
    actions, mean = torch.tensor([[1.0, -1.0]]), torch.tensor([[0.0, 0.0]])
    by_hand = sum(-a ** 2 / (2 * v) - 0.5 * math.log(2 * math.pi * v)
                  for a, v in zip([1.0, -1.0], variance, strict=True))
    assert gaussian_logp(actions, mean, got).item() == pytest.approx(by_hand, rel=1e-5)
    assert gaussian_entropy(got).item() == pytest.approx(sum(0.5 * math.log(2 * math.pi * math.e * v)
                                                             for v in variance), rel=1e-5)
    # with the seed axis: [K, batch, F] @ [K, F, A]; seed 1 with zero features has only the epsilon
    both = sde_log_std(torch.stack([features, torch.zeros(1, 2)]), torch.stack([log_std, log_std]))
    assert both[0].tolist() == got.tolist() and both[1].tolist()[0] == pytest.approx([0.5 * math.log(1e-6)] * 2)
    # the features are not trained through the noise (SB3's learn_features off)
    features.requires_grad_(True)
    sde_log_std(features, log_std.requires_grad_(True)).sum().backward()
    assert features.grad is None and log_std.grad is not None


@pytest.mark.parametrize("every", [4, -1])
def test_a_rollout_keeps_each_envs_noise_matrix_for_sde_sample_freq_steps(every):
    # One hidden unit: the noise is feature * E per env, so E = (action - mean) / feature can be read back.
    learner = PPO(small_ppo(use_sde=True, sde_sample_freq=every, fcnet_hiddens=[1], log_std_init=0.5,
                            num_envs_per_env_runner=3), env_id=box2())
    batch = learner.collect(3 * 12)
    obs = torch.tensor(batch["obs"]).reshape(-1, 4)  # [time * env, 4]
    with torch.no_grad():
        features, mean = (x.reshape(12, 3, -1) for x in learner.pi.forward_features(obs))
    matrices = (torch.tensor(batch["actions"]) - mean) / features  # [time, env, A]: each env's E row
    assert matrices.shape == (12, 3, 2)
    windows = [matrices[t:t + 4] for t in range(0, 12, 4)] if every == 4 else [matrices]
    for window in windows:  # constant within a window, per env
        assert torch.allclose(window, window[:1].expand_as(window), rtol=1e-3, atol=1e-4)
    assert not torch.allclose(matrices[:, 0], matrices[:, 1], atol=1e-3)  # each env its own
    if every == 4:
        assert not torch.allclose(windows[0][0], windows[1][0], atol=1e-3)  # redrawn after 4 steps
    # the stored log-probability is the unclipped sample's under the state-dependent Gaussian
    log_std = sde_log_std(features, learner.log_std.weight.detach())
    logp = gaussian_logp(torch.tensor(batch["actions"]), mean, log_std)
    assert np.allclose(logp.numpy(), batch["logp"], atol=1e-5)


def test_the_drawn_noise_has_the_variance_the_loss_assumes():
    # E's entries are N(0, exp(log_std)^2): over 1,600 draws per action number their std is exp(0.5) within 5%.
    learner = PPO(small_ppo(use_sde=True, sde_sample_freq=1, fcnet_hiddens=[1], log_std_init=0.5,
                            num_envs_per_env_runner=400, train_batch_size=1600, minibatch_size=64), env_id=box2())
    batch = learner.collect(1600)
    with torch.no_grad():
        features, mean = learner.pi.forward_features(torch.tensor(batch["obs"]).reshape(-1, 4))
    matrices = (torch.tensor(batch["actions"]).reshape(-1, 2) - mean) / features
    assert matrices.std(dim=0).tolist() == pytest.approx([math.exp(0.5)] * 2, rel=0.05)
    assert matrices.mean(dim=0).abs().max() < 0.15


def test_the_std_follows_the_observation_and_greedy_actions_stay_the_clipped_mean():
    learner = PPO(small_ppo(use_sde=True, log_std_init=0.0), env_id=box2())
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    with torch.no_grad():
        features, mean = learner.pi.forward_features(torch.tensor(obs))
        stds = sde_log_std(features, learner.log_std.weight).exp()
    assert learner.log_std.weight.shape == (16, 2)  # a log std per (last hidden unit, action number)
    assert stds.std(dim=0).min() > 1e-3  # state-dependent: not the same std at every observation
    assert np.array_equal(learner.compute_actions(obs), np.clip(mean.numpy(), [-1, 0], [1, 3]))
    explored = learner.compute_actions(obs, explore=True)
    assert not np.array_equal(explored, learner.compute_actions(obs))
    assert (explored >= [-1, 0]).all() and (explored <= [1, 3]).all()


def test_a_gsde_checkpoint_continues_exactly():
    config = small_ppo(use_sde=True, sde_sample_freq=3, log_std_init=-0.5)
    original = PPO(config, env_id=PENDULUM)
    for _ in range(2):
        original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    assert state["log_std"]["weight"].shape == (16, 1)
    restored = PPO(config, env_id=PENDULUM)
    restored.set_state(state)
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
    assert same_weights(original, restored)
    assert not np.allclose(original.get_weights()["log_std"]["weight"], -0.5)  # the matrix is learned


def test_discrete_actions_ignore_use_sde_as_they_ignore_log_std_init():
    plain = PPO(small_ppo(), env_id="CartPole-v1")
    sde = PPO(small_ppo(use_sde=True), env_id="CartPole-v1")
    assert not sde.sde and same(plain.train_iteration(), sde.train_iteration())


@pytest.mark.parametrize(("values", "message"), [
    ({"use_sde": "yes"}, r"use_sde must be true or false, got use_sde='yes'"),
    ({"use_sde": True, "sde_sample_freq": 0}, r"sde_sample_freq must be -1 \(once per rollout\) or a whole number "
                                              r">= 1 of vector steps, got sde_sample_freq=0"),
    ({"sde_sample_freq": 2.5}, r"got sde_sample_freq=2.5"),
    ({"use_sde": True, "model": "cnn"}, r"use_sde needs the built-in model 'mlp'.*got model='cnn'"),
])
def test_bad_gsde_settings_are_one_line_naming_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        PPOConfig.from_dict(values)


class ImageBoxEnv(gym.Env):
    """10x10x2 image observations, one Box action number: our learners build a CNN for it."""

    observation_space = gym.spaces.Box(0.0, 1.0, (10, 10, 2), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((10, 10, 2), np.float32), {}

    def step(self, action):
        return np.zeros((10, 10, 2), np.float32), 0.0, False, True, {}


def test_gsde_on_image_observations_is_refused_naming_the_env():
    if "TuneRlImageBoxTest-v0" not in gym.registry:
        gym.register("TuneRlImageBoxTest-v0", entry_point=ImageBoxEnv)
    with pytest.raises(ValueError, match=r"use_sde needs the built-in mlp on flat observations; "
                                         r"TuneRlImageBoxTest-v0's observations \(10, 10, 2\) get a CNN"):
        PPO(small_ppo(use_sde=True), env_id="TuneRlImageBoxTest-v0")
