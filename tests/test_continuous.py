"""Our PPO on Box action spaces (issue 18): a diagonal Gaussian policy with a state-independent log-std.

Checked against hand-computed densities, on what the env receives against what the loss uses, on exact
checkpoints, on K seeds training as they would alone, and on refusals (DQN, bad settings). The learning test
on Pendulum is in tests/test_continuous_e2e.py (it trains for longer than a unit test may).
"""

from __future__ import annotations

import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.test_algos import same, same_weights, small_dqn, small_ppo
from tests.test_seeds_ppo import weights_close
from tune_runner.algos import DQN, PPO, PPOConfig
from tune_runner.algos.distributions import gaussian_entropy, gaussian_logp

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
PENDULUM = "Pendulum-v1"  # Box(-2, 2, (1,)) actions, 3 features: not an env any of our spaces was tuned on
BOX2 = "TuneRlBox2Test-v0"


class TwoNumberEnv(gym.Env):
    """Actions are Box(low=[-1, 0], high=[1, 3]) of shape (2,); it records every action it is given."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))

    def __init__(self) -> None:
        self.received: list[np.ndarray] = []
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        self.received.append(np.array(action, copy=True))
        self.t += 1
        reward = -float(np.sum((np.asarray(action) - np.array([0.5, 1.0])) ** 2))
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), reward, False, self.t >= 20, {}


def box2() -> str:
    if BOX2 not in gym.registry:
        gym.register(BOX2, entry_point=TwoNumberEnv)
    return BOX2


def test_gaussian_log_probability_and_entropy_match_hand_computed_values():
    # N(a; mu, sigma) per number: -(a - mu)^2 / (2 sigma^2) - log sigma - log sqrt(2 pi); summed over the numbers.
    actions, mean = torch.tensor([[0.5, -1.0]]), torch.tensor([[0.0, 1.0]])
    log_std = torch.tensor([math.log(2.0), 0.0])
    first = -(0.5 ** 2) / (2 * 2.0 ** 2) - math.log(2.0) - 0.5 * math.log(2 * math.pi)  # a 0.5, mu 0, sigma 2
    second = -(2.0 ** 2) / 2 - 0.5 * math.log(2 * math.pi)  # a -1, mu 1, sigma 1
    by_hand = first + second
    assert gaussian_logp(actions, mean, log_std).item() == pytest.approx(by_hand, rel=1e-6)
    # H = sum(log sigma + (1 + log 2 pi) / 2)
    assert gaussian_entropy(log_std).item() == pytest.approx(math.log(2.0) + 1 + math.log(2 * math.pi), rel=1e-6)
    # and with the seed axis: [K, batch, size] against [K, 1, size]
    k_log_std = torch.stack([log_std, torch.zeros(2)]).unsqueeze(1)
    both = gaussian_logp(actions.expand(2, 1, 2), mean.expand(2, 1, 2), k_log_std)
    assert both.shape == (2, 1) and both[0, 0].item() == pytest.approx(by_hand, rel=1e-6)


def test_the_env_gets_the_clipped_action_and_the_loss_the_unclipped_sample():
    learner = PPO(small_ppo(log_std_init=1.5, num_envs_per_env_runner=2), env_id=box2())  # std 4.5: many clip
    batch = learner.collect(40)
    envs = learner.env.envs[0].env.envs
    sent = np.stack([np.stack(env.unwrapped.received) for env in envs], axis=1)  # [time, env, 2]
    stored = batch["actions"][:len(sent)]
    low, high = TwoNumberEnv.action_space.low, TwoNumberEnv.action_space.high
    assert ((stored < low) | (stored > high)).mean() > 0.3, "the test needs samples outside the bounds"
    assert np.array_equal(sent, np.clip(stored, low, high))  # the env got exactly the clipped sample
    assert (sent >= low).all() and (sent <= high).all()
    # The stored log-probability is that of the unclipped sample under the policy that drew it.
    obs = torch.tensor(batch["obs"][:len(sent)].reshape(-1, 4))
    with torch.no_grad():
        logp = gaussian_logp(torch.tensor(stored.reshape(-1, 2)), learner.pi(obs), learner.log_std(2))
    assert np.allclose(logp.numpy(), batch["logp"][:len(sent)].reshape(-1), atol=1e-5)


def test_greedy_actions_are_the_clipped_mean_and_exploring_ones_stay_in_bounds():
    learner = PPO(small_ppo(log_std_init=1.0), env_id=box2())
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    with torch.no_grad():
        mean = learner.pi(torch.tensor(obs)).numpy()
    greedy = learner.compute_actions(obs)
    assert greedy.shape == (64, 2) and np.array_equal(greedy, np.clip(mean, [-1, 0], [1, 3]))
    explored = learner.compute_actions(obs, explore=True)
    assert not np.array_equal(explored, greedy)
    assert (explored >= [-1, 0]).all() and (explored <= [1, 3]).all()


@pytest.mark.parametrize("env_id", [PENDULUM, "box2"])
def test_a_box_action_checkpoint_continues_exactly(env_id, noise_source):
    env_id = box2() if env_id == "box2" else env_id
    config = small_ppo(log_std_init=-0.5)
    original = PPO(config, env_id=env_id)
    assert original.noise.source == noise_source
    for _ in range(2):
        original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    assert set(state["log_std"]) == {"weight"}
    assert state["action_space"]["shape"] == ((1,) if env_id == PENDULUM else (2,))
    restored = PPO(config, env_id=env_id)
    restored.set_state(state)
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
    assert same_weights(original, restored)
    assert not np.allclose(original.get_weights()["log_std"]["weight"], -0.5)  # the log-std is learned


def test_ppo_trains_on_a_box2d_env_and_its_checkpoint_restarts_the_envs_from_the_seed():
    """LunarLanderContinuous-v3 (tune-rl[box2d], in the test extra), an env we did not tune for: 2 actions in
    [-1, 1], 8 features. Box2D envs cannot be snapshotted (EzPickle builds them afresh), so a restored learner
    has the networks and optimizer exactly and resets its envs with a seed from its restored generator: two
    restores of one checkpoint go on alike."""
    config = small_ppo()
    original = PPO(config, env_id="LunarLanderContinuous-v3")
    results = [original.train_iteration() for _ in range(2)]
    assert all(np.isfinite(r[key]) for r in results for key in ("policy_loss", "vf_loss", "entropy"))
    assert original.env.envs[0].get_state()["snapshot"] is None
    state = pickle.loads(pickle.dumps(original.get_state()))
    restored = []
    for moved in (0, 1):
        learner = PPO(config, env_id="LunarLanderContinuous-v3")
        for _ in range(moved):
            learner.train_iteration()
        learner.set_state(state)
        assert same_weights(original, learner)
        restored.append(learner)
    np.testing.assert_array_equal(restored[0].env.obs, restored[1].env.obs)
    assert same(restored[0].train_iteration(), restored[1].train_iteration())


@pytest.mark.parametrize("exploration", [{}, {"use_sde": True, "sde_sample_freq": 2}], ids=["gaussian", "gsde"])
def test_three_box_action_seeds_train_as_they_would_alone(exploration, noise_source):
    config = {**vars(small_ppo(seed=5, minibatch_size=100, entropy_coeff=0.01, **exploration)),
              "num_envs_per_env_runner": 2}
    del config["num_seeds"]
    together = PPO(PPOConfig.from_dict({**config, "num_seeds": 3}), env_id=PENDULUM)
    alone = [PPO(PPOConfig.from_dict({**config, "seed": s}), env_id=PENDULUM) for s in together.seeds]
    assert {learner.noise.source for learner in (together, *alone)} == {noise_source}
    for _ in range(3):
        result = together.train_iteration()
        for i, learner in enumerate(alone):
            own = learner.train_iteration()
            assert result[f"seed_{i}/policy_loss"] == pytest.approx(own["policy_loss"], rel=1e-3, abs=1e-6)
            assert result[f"seed_{i}/entropy"] == pytest.approx(own["entropy"], rel=1e-4)
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)  # tests/test_seeds_ppo.py: at most 1e-5 apart
    log_std = together.get_weights()["log_std"]["weight"]
    assert not np.allclose(log_std[0], log_std[1])


def test_dqn_refuses_a_box_action_space_naming_it_and_ppo():
    with pytest.raises(ValueError, match=r"Pendulum-v1: DQN needs a Discrete action space.*use ppo"):
        DQN(small_dqn(), env_id=PENDULUM)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "wide", True])
def test_log_std_init_must_be_a_finite_number(value):
    with pytest.raises(ValueError, match="log_std_init"):
        small_ppo(log_std_init=value)


def test_the_env_check_lets_ppo_train_box_actions_and_points_dqn_there():
    from tune_runner.trainables.catalog import backend
    from tune_runner.trainables.env_check import space_problem
    from tune_runner.trainables.trial import Spaces

    spaces = Spaces(observation=gym.spaces.Box(-1, 1, (3,)), action=gym.spaces.Box(-2, 2, (1,)))
    assert space_problem("ppo", PENDULUM, backend("ppo").trains, spaces) is None
    problem = space_problem("dqn", PENDULUM, backend("dqn").trains, spaces)
    assert problem is not None and "dqn needs a Discrete action space" in problem and "ppo" in problem


# ---- the trained policy outside the trial: load_policy, evaluate, the MLflow model's data -----------------------

PENDULUM_CONFIG = {"env": PENDULUM, "env_config": {}, "num_envs_per_env_runner": 4, "train_batch_size_per_learner": 256,
                   "minibatch_size": 64, "num_epochs": 2, "fcnet_hiddens": [16, 16], "seed": 2}


@pytest.fixture(scope="module")
def pendulum_checkpoint(tmp_path_factory):
    """A Pendulum checkpoint whose greedy mean often lies outside [-2, 2], so clipping shows."""
    from tests.test_policy import write_trial
    from tune_runner.trainables.agents import build_learner

    learner = build_learner("ppo", PENDULUM_CONFIG)
    learner.train_iteration()
    with torch.no_grad():
        last = [p for p in learner.pi.parameters()][-1]  # the mean head's bias
        last.fill_(1.5)
        [p for p in learner.pi.parameters()][-2].mul_(300.0)  # and a steep weight: means spread over +-5
    trial = tmp_path_factory.mktemp("pendulum") / "exp" / "OwnPPO_Pendulum-v1_00000"
    checkpoint = write_trial(trial, learner, PENDULUM_CONFIG)
    yield learner, trial, checkpoint
    learner.close()


def pendulum_observations(n: int = 200) -> np.ndarray:
    angle = np.random.default_rng(1).uniform(-np.pi, np.pi, n)
    speed = np.random.default_rng(2).uniform(-8, 8, n)
    return np.stack([np.cos(angle), np.sin(angle), speed], axis=1).astype(np.float32)


def test_a_loaded_box_policy_acts_as_the_learner_with_the_clipped_mean(pendulum_checkpoint):
    from tune_runner.results.policy import OwnPolicy, load_policy

    learner, _, checkpoint = pendulum_checkpoint
    policy = load_policy(checkpoint)
    assert isinstance(policy, OwnPolicy) and policy.box is not None
    obs = pendulum_observations()
    expected = learner.compute_actions(obs)
    assert expected.shape == (200, 1) and (np.abs(expected) == 2.0).mean() > 0.2  # clipped ones occur
    assert 0 < (np.abs(expected) < 2.0).mean()
    np.testing.assert_array_equal(policy.compute_actions(obs), expected)
    single = policy.compute_single_action(obs[0])
    assert isinstance(single, np.ndarray) and single.shape == (1,) and single.dtype == np.float32


def test_evaluate_runs_a_box_policy_as_a_hand_run_episode(pendulum_checkpoint):
    from tune_runner.results import evaluate as evaluation
    from tune_runner.results.policy import load_policy

    learner, _, checkpoint = pendulum_checkpoint
    result = evaluation.evaluate(load_policy(checkpoint), episodes=2, seed=4)
    assert result.lengths == (200, 200)
    env = gym.make(PENDULUM)
    obs, _ = env.reset(seed=5)  # episode 1 of seed 4
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(learner.compute_actions(obs[None])[0])
        total, done = total + reward, terminated or truncated
    assert result.returns[1] == pytest.approx(total, rel=1e-6)


def test_cli_evaluate_and_video_on_a_box_policy(pendulum_checkpoint, cli, tmp_path):
    _, trial, checkpoint = pendulum_checkpoint
    result = cli("evaluate", str(trial), "--episodes", "1", "--render", "rgb_array", "--video", str(tmp_path / "p.mp4"))
    assert result.status == 0 and result.err == "", result.err
    assert f"policy     ppo  {checkpoint}" in result.out and "Pendulum-v1  1 episode (seed 0)" in result.out
    assert "(201 frames)" in result.out and (tmp_path / "p.mp4").stat().st_size > 1000


def test_the_mlflow_model_data_of_a_box_policy_gives_the_learners_actions(pendulum_checkpoint, tmp_path):
    from tune_runner import tune_rl_policy
    from tune_runner.results import pyfunc_model as model

    learner, _, checkpoint = pendulum_checkpoint
    data = model.save_policy(checkpoint, learner="ppo", config=PENDULUM_CONFIG, folder=tmp_path / "policy")
    loaded = tune_rl_policy.Policy(data)  # the pyfunc loader: torch and numpy only
    obs = pendulum_observations()
    actions = loaded.predict(obs)
    assert actions.dtype == np.float32 and actions.shape == (200, 1)
    np.testing.assert_array_equal(actions, learner.compute_actions(obs))
    signature = model.signature(loaded.spec).to_dict()
    assert '"float32"' in signature["outputs"] and "[-1, 1]" in signature["outputs"]
