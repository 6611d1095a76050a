"""Our SAC (issue 45): the squashed Gaussian's log-probability against a hand computation, each of K seeds trains as
it would alone (a population too), checkpoints continue exactly, a discrete env is refused naming ppo and dqn, and
the exported policy (load_policy, the MLflow model's data) acts as the learner: tanh of the mean, scaled."""

from __future__ import annotations

import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.test_seeds_dqn import same_state
from tune_runner.algos.sac import SAC
from tune_runner.algos.sac_config import SACConfig
from tune_runner.algos.sac_networks import squashed_sample

PENDULUM = "Pendulum-v1"
# Small and quick with every part at work within one iteration of 1000 env steps a seed: random actions to 200,
# then a gradient step every 4 env steps per seed on minibatches of 32, the buffer (capacity 600) wrapping.
SMALL = {"fcnet_hiddens": [16, 16], "train_batch_size": 32, "num_steps_sampled_before_learning_starts": 200,
         "replay_buffer_config": {"capacity": 600}, "training_intensity": 8, "num_envs_per_env_runner": 2,
         "lr": [[0, 1e-3], [1500, 3e-4]], "tau": 0.02}

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def config(**overrides) -> SACConfig:
    return SACConfig.from_dict({**SMALL, **overrides})


def test_the_squashed_gaussians_log_probability_is_the_hand_computed_one():
    out = torch.tensor([[0.3, -1.2, math.log(0.5), math.log(2.0)]])  # two numbers' means, then their log stds
    noise = torch.tensor([[0.7, -0.4]])
    actions, logp = squashed_sample(out, noise)
    expected = 0.0
    for mean, std, eps, a in ((0.3, 0.5, 0.7, actions[0, 0]), (-1.2, 2.0, -0.4, actions[0, 1])):
        u = mean + std * eps
        assert float(a) == pytest.approx(math.tanh(u))
        expected += -0.5 * eps ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(u) ** 2)
    assert float(logp[0]) == pytest.approx(expected, rel=1e-5)


def close(together: SAC, seed: int, alone: SAC, *, atol: float = 0.0) -> None:
    """Seed `seed`'s networks (policy, both Q networks, their targets, the temperature) in `together` equal
    `alone`'s: bit for bit on a CPU by default (the one-seed policy runs K seeds' ops)."""
    ours, theirs = together.get_state()["seeds"][seed], alone.get_state()
    for net in SAC.networks:
        worst = max(float((ours[net][key] - theirs[net][key]).abs().max()) for key in theirs[net])
        assert worst <= atol, f"seed {seed}'s {net} differs from its run alone by {worst}"


@pytest.mark.parametrize("overrides", [{}, {"observation_filter": "MeanStdFilter", "training_intensity": 16}],
                         ids=["plain", "normalized"])
def test_each_of_three_seeds_trains_as_it_would_alone(overrides):
    together = SAC(config(seed=11, num_seeds=3, **overrides), env_id=PENDULUM)
    alone = [SAC(config(seed=s, **overrides), env_id=PENDULUM) for s in together.seeds]
    result = together.train_iteration()
    for i, learner in enumerate(alone):
        own = learner.train_iteration()
        for key in ("env_steps", "episodes", "lr"):
            assert result[f"seed_{i}/{key}"] == own[key], key
        for key in ("qf_loss", "policy_loss", "alpha"):
            assert result[f"seed_{i}/{key}"] == own[key], key
        close(together, i, learner)
        assert together.optimizer.steps[i] == learner.optimizer.steps[0] > 100
        ours, theirs = together.get_state()["seeds"][i]["buffer"], learner.get_state()["buffer"]
        assert ours["added"] == theirs["added"] > 600  # wrapped
        assert all(np.array_equal(ours["data"][k], theirs["data"][k]) for k in theirs["data"])
    w = together.get_weights()["pi"]["0.weight"]
    assert not np.allclose(w[0], w[1])  # independent runs, not copies


def test_a_population_of_three_configs_trains_each_as_its_own_config_would_alone():
    population = {"lr": [1e-3, 3e-3, 5e-4], "gamma": [0.99, 0.9, 0.95], "tau": [0.005, 0.05, 0.02],
                  "alpha_lr": [1e-3, 1e-2, 1e-4]}
    together = SAC(config(seed=7, num_seeds=3, population=population), env_id=PENDULUM)
    alone = [SAC(together.config.member(i), env_id=PENDULUM) for i in range(3)]
    result = together.train_iteration()
    for i, learner in enumerate(alone):
        own = learner.train_iteration()
        assert result[f"seed_{i}/lr"] == own["lr"] == population["lr"][i]
        assert result[f"seed_{i}/alpha"] == pytest.approx(own["alpha"], rel=1e-4)
        close(together, i, learner)
    alphas = [result[f"seed_{i}/alpha"] for i in range(3)]
    assert len(set(alphas)) == 3  # the temperatures' own lrs took


def test_a_refilled_member_trains_as_a_fresh_one_seed_learner_of_its_values():
    """A population trial's refill (replace_member): seed 1 starts over with new values, as a one-seed learner of
    them would start, while the others go on."""
    population = {"lr": [1e-3, 3e-3, 5e-4], "tau": [0.005, 0.05, 0.02]}
    together = SAC(config(seed=7, num_seeds=3, population=population), env_id=PENDULUM)
    together.train_iteration()
    before = together.get_state()["seeds"][0]
    together.replace_member(1, {"lr": 2e-3, "tau": 0.01})
    assert same_state(together.get_state()["seeds"][0], before)  # the others untouched
    fresh = SAC(together.config.member(1), env_id=PENDULUM)
    assert (fresh.config.lr, fresh.config.tau) == (2e-3, 0.01)
    result, own = together.train_iteration(), fresh.train_iteration()
    assert result["seed_1/env_steps"] == own["env_steps"] and result["seed_1/qf_loss"] == own["qf_loss"]
    close(together, 1, fresh)


@pytest.mark.parametrize("overrides", [{}, {"observation_filter": "MeanStdFilter"}], ids=["plain", "normalized"])
def test_a_checkpoint_mid_training_continues_exactly(overrides):
    original = SAC(config(num_seeds=2, **overrides), env_id=PENDULUM)
    original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    restored = SAC(config(num_seeds=2, **overrides), env_id=PENDULUM)
    restored.set_state(state)
    lone = SAC(config(seed=original.seeds[1], **overrides), env_id=PENDULUM)
    lone.set_state(state["seeds"][1])  # seed 1's part, in the one-seed format
    first, second = original.train_iteration(), restored.train_iteration()
    assert {k: v for k, v in first.items() if k != "sps"} == {k: v for k, v in second.items() if k != "sps"}
    assert same_state(original.get_state(), restored.get_state())  # bit for bit, buffers and optimizers too
    lone.train_iteration()
    close(original, 1, lone)


def test_a_discrete_env_is_refused_naming_ppo_and_dqn():
    with pytest.raises(ValueError, match=r"CartPole-v1: SAC needs a Box action space.*Discrete.*use ppo or dqn"):
        SAC(config(), env_id="CartPole-v1")


def test_the_env_check_refuses_sac_on_discrete_actions_naming_the_learners_that_take_them():
    from tune_runner.trainables.catalog import backend
    from tune_runner.trainables.env_check import space_problem
    from tune_runner.trainables.trial import Spaces

    box = Spaces(observation=gym.spaces.Box(-1, 1, (3,)), action=gym.spaces.Box(-2, 2, (1,)))
    assert space_problem("sac", PENDULUM, backend("sac").trains, box) is None
    discrete = Spaces(observation=gym.spaces.Box(-1, 1, (4,)), action=gym.spaces.Discrete(2))
    problem = space_problem("sac", "CartPole-v1", backend("sac").trains, discrete)
    assert problem is not None and "sac needs a Box action space" in problem and "ppo or dqn" in problem, problem


@pytest.mark.parametrize("key", ["tau", "gamma"])
def test_a_bad_setting_is_refused_naming_it(key):
    with pytest.raises(ValueError, match=key):
        config(**{key: 1.5})


# ---- the trained policy outside the trial ---------------------------------------------------------------------

SAC_CONFIG = {"env": PENDULUM, "env_config": {}, **SMALL, "seed": 2, "observation_filter": "MeanStdFilter",
              "num_env_processes": 1}


@pytest.fixture(scope="module")
def sac_checkpoint(tmp_path_factory):
    from tests.test_policy import write_trial
    from tune_runner.trainables.agents import build_learner

    learner = build_learner("sac", SAC_CONFIG)
    learner.train_iteration()
    trial = tmp_path_factory.mktemp("sac") / "exp" / "OwnSAC_Pendulum-v1_00000"
    checkpoint = write_trial(trial, learner, SAC_CONFIG)
    yield learner, checkpoint
    learner.close()


def pendulum_observations(n: int = 200) -> np.ndarray:
    angle = np.random.default_rng(1).uniform(-np.pi, np.pi, n)
    speed = np.random.default_rng(2).uniform(-8, 8, n)
    return np.stack([np.cos(angle), np.sin(angle), speed], axis=1).astype(np.float32)


def test_load_policy_and_the_mlflow_model_act_as_the_learner_with_the_scaled_tanh_of_the_mean(sac_checkpoint,
                                                                                                 tmp_path):
    from tune_runner import tune_rl_policy
    from tune_runner.results import pyfunc_model as model
    from tune_runner.results.policy import OwnPolicy, load_policy

    learner, checkpoint = sac_checkpoint
    obs = pendulum_observations()
    expected = learner.compute_actions(obs)
    assert expected.shape == (200, 1) and expected.dtype == np.float32
    assert np.abs(expected).max() < 2.0 and len(np.unique(expected)) > 100  # squashed, not clipped, and varied
    policy = load_policy(checkpoint)
    assert isinstance(policy, OwnPolicy) and policy.kind == "sac"
    actions = policy.compute_actions(obs)
    # The learner's policy runs baddbmm (its seed axis kept), the loaded one nn.Linear's op: an ulp apart at most
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-6)
    data = model.save_policy(checkpoint, learner="sac", config=SAC_CONFIG, folder=tmp_path / "policy")
    loaded = tune_rl_policy.Policy(data)  # the pyfunc loader: torch and numpy only
    assert loaded.spec["action_squash"] is True and "obs_mean" in loaded.spec
    np.testing.assert_array_equal(loaded.predict(obs), actions)  # the MLflow model and load_policy: alike
