"""Our learners on torch envs (issue 44): `env_backend` checked and picked, PPO and DQN trained on one torch env of
every seed's envs, each seed as it trains alone, checkpoints exact mid-episode, a population's refilled member
restarting its own block of the one torch env alone, and a user's env with a torch version of its own. The dynamics
themselves are tests/test_torch_envs.py's."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.test_algos import same, same_weights, small_dqn, small_ppo
from tests.test_seeds_dqn import weights_close as dqn_weights_close
from tests.test_seeds_ppo import vars_of
from tests.test_seeds_ppo import weights_close as ppo_weights_close
from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig
from tune_runner.algos.learner_envs import SeedEnvs, pick_env_backend
from tune_runner.algos.torch_envs import TorchSeedEnvs, TorchVectorEnv
from tune_runner.plugins import register_env

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.mark.parametrize(("values", "says"), [
    ({"env_backend": "jax"}, r"unknown PPOConfig.env_backend 'jax'.*choices: auto, gymnasium, torch"),
    ({"env_backend": "torch", "gym_env_vectorize_mode": "sync"}, r"env_backend torch .*gym_env_vectorize_mode='sync'"),
])
def test_the_setting_is_checked_in_one_line_naming_value_and_choices(values, says):
    with pytest.raises(ValueError, match=says) as error:
        PPOConfig.from_dict(values)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=says.replace("PPOConfig", "DQNConfig")):
        DQNConfig.from_dict(values)


def test_auto_picks_torch_on_a_gpu_for_an_env_with_a_torch_version_and_gymnasium_otherwise():
    assert pick_env_backend("CartPole-v1", backend="auto", device="cuda") == "torch"
    assert pick_env_backend("CartPole-v1", backend="auto", device="cuda:1") == "torch"
    assert pick_env_backend("CartPole-v1", backend="auto", device="cpu") == "gymnasium"
    assert pick_env_backend("LunarLander-v3", backend="auto", device="cuda") == "gymnasium"
    assert pick_env_backend("Pendulum-v1", backend="auto", device="cuda", env_config={"render_mode": "human"}) \
        == "gymnasium"
    assert pick_env_backend("CartPole-v1", backend="auto", device="cuda", vectorize_mode="sync") == "gymnasium"
    assert pick_env_backend("Pendulum-v1", backend="torch", device="cpu", env_config={"g": 9.0}) == "torch"
    assert pick_env_backend("CartPole-v1", backend="gymnasium", device="cuda") == "gymnasium"


def test_torch_for_an_env_without_one_is_refused_naming_the_envs_that_have_one():
    with pytest.raises(ValueError, match=r"env_backend torch: LunarLander-v3 has no torch version \(the envs with "
                                         r"one: Acrobot-v1, CartPole-v1, .*Pendulum-v1.*set env_backend: gymnasium"):
        PPO(small_ppo(env_backend="torch"), env_id="LunarLander-v3")
    with pytest.raises(ValueError, match=r"torch Pendulum-v1 takes the env_config keys .*'g'.*got \['render_mode'\]"):
        PPO(small_ppo(env_backend="torch"), env_id="Pendulum-v1", env_config={"render_mode": "rgb_array"})


def test_the_backend_builds_its_envs():
    torch_ppo = PPO(small_ppo(env_backend="torch", num_seeds=2), env_id="CartPole-v1")
    assert isinstance(torch_ppo.env, TorchSeedEnvs) and torch_ppo.env.backend == "torch"
    assert torch_ppo.env.num_envs == 8 and torch_ppo.env.obs.shape == (8, 4)
    assert isinstance(PPO(small_ppo(), env_id="CartPole-v1").env, SeedEnvs)  # auto on a CPU
    pendulum = PPO(small_ppo(env_backend="torch"), env_id="Pendulum-v1", env_config={"g": 5.0})
    assert pendulum.env.torch_env.g == 5.0 and pendulum.env.continuous


# Seed i of K = 3 against seed i alone, both on torch envs: the same env steps and episodes every iteration, with
# discrete actions the same observations bit for bit; the weights to the float rounding of a batched model (as on
# gymnasium's envs), which Box actions carry into the state.
@pytest.mark.parametrize(("env_id", "overrides"), [
    ("CartPole-v1", {"minibatch_size": 62, "lr": [[0, 3e-3], [2000, 1e-3]]}),
    ("Pendulum-v1", {"minibatch_size": 64, "vf_clip_param": None}),
], ids=["cartpole", "pendulum"])
def test_each_of_three_ppo_seeds_trains_on_torch_envs_as_it_would_alone(env_id, overrides, noise_source):
    config = vars_of(small_ppo(seed=11, env_backend="torch", **overrides))
    together = PPO(PPOConfig.from_dict({**config, "num_seeds": 3}), env_id=env_id)
    alone = [PPO(PPOConfig.from_dict({**config, "seed": s}), env_id=env_id) for s in together.seeds]
    assert {learner.noise.source for learner in (together, *alone)} == {noise_source}
    for _ in range(4):  # Pendulum: its 200-step episodes end in the 4th
        result = together.train_iteration()
        for i, learner in enumerate(alone):
            own = learner.train_iteration()
            assert (result[f"seed_{i}/env_steps"], result[f"seed_{i}/episodes"]) == (own["env_steps"], own["episodes"])
            exact = None if together.continuous else 0  # Box actions: the returns to float rounding
            assert result[f"seed_{i}/episode_return_mean"] == pytest.approx(own["episode_return_mean"], nan_ok=True,
                                                                            rel=exact, abs=exact)
    for i, learner in enumerate(alone):
        ppo_weights_close(together, i, learner)
        ours, theirs = together.env.obs[i * 4:(i + 1) * 4], learner.env.obs
        if together.continuous:  # the actions are the batched model's numbers, a rounding apart: so is the state
            np.testing.assert_allclose(ours, theirs, atol=1e-5)
        else:
            assert np.array_equal(ours, theirs)
    assert result["episodes"] > 0


def test_each_of_three_dqn_seeds_trains_on_torch_envs_as_it_would_alone():
    together = DQN(small_dqn(seed=11, num_seeds=3, env_backend="torch"), env_id="CartPole-v1")
    alone = [DQN(small_dqn(seed=s, env_backend="torch"), env_id="CartPole-v1") for s in together.seeds]
    result = together.train_iteration()
    for i, learner in enumerate(alone):
        own = learner.train_iteration()
        for key in ("env_steps", "episodes", "episode_return_mean", "epsilon"):
            assert result[f"seed_{i}/{key}"] == own[key], key
        dqn_weights_close(together, i, learner)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_checkpoint_on_torch_envs_restores_mid_episode_exactly(algo):
    def build():
        if algo == "ppo":
            return PPO(small_ppo(env_backend="torch", num_seeds=2), env_id="CartPole-v1")
        return DQN(small_dqn(env_backend="torch", num_seeds=2), env_id="CartPole-v1")

    original = build()
    original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    assert original.stats.lengths.any()  # mid-episode
    assert isinstance(state["seeds"][1]["env"]["torch"]["state"], torch.Tensor)
    restored = build()
    restored.set_state(state)
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
    assert same_weights(original, restored)
    assert np.array_equal(original.env.obs, restored.env.obs)


def torch_state(learner, seed: int) -> dict:
    """Seed `seed`'s block of the learner's one torch env, and its rows of the numpy observations and flags."""
    part = learner.env.envs[seed]
    return {**part.env.get_state(part.envs), "obs": torch.as_tensor(learner.env.obs[part.envs]),
            "resetting": torch.as_tensor(learner.env.resetting[part.envs])}


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


# A population trial's refill (replace_member) on torch envs: every seed's envs are one TorchVectorEnv, so the new
# member's block must restart as a fresh one-seed learner's envs, and the other blocks (their states, episode
# clocks, reset counts and noise keys) must not move; the other seeds then train on as if nothing had happened.
@pytest.mark.parametrize("cls", [PPO, DQN], ids=["ppo", "dqn"])
def test_a_refilled_member_restarts_its_own_torch_envs_and_no_others(cls):
    small = small_ppo if cls is PPO else small_dqn
    config = small(env_backend="torch", num_seeds=3, population={"lr": [1e-3, 2e-3, 3e-3]})
    together, untouched = cls(config, env_id="CartPole-v1"), cls(config, env_id="CartPole-v1")
    for _ in range(2):
        together.train_iteration()
        untouched.train_iteration()
    before = [torch_state(together, i) for i in range(3)]
    assert (before[1]["elapsed"] > 0).any() and (before[1]["resets"] > 0).any()  # mid-run: a restart shows
    together.replace_member(1, {"lr": 5e-4})
    fresh = cls(together.config.member(1), env_id="CartPole-v1")
    assert same_tensors(torch_state(together, 1), torch_state(fresh, 0))  # its envs: a fresh learner's, exactly
    assert (torch_state(together, 1)["elapsed"] == 0).all() and not torch_state(together, 1)["resetting"].any()
    for i in (0, 2):
        assert same_tensors(torch_state(together, i), before[i]), f"seed {i}'s envs moved"
    result, theirs, own = together.train_iteration(), untouched.train_iteration(), fresh.train_iteration()
    for i in (0, 2):
        for key in ("env_steps", "episodes", "episode_return_mean"):
            assert result[f"seed_{i}/{key}"] == pytest.approx(theirs[f"seed_{i}/{key}"], nan_ok=True), (i, key)
        assert same_tensors(torch_state(together, i), torch_state(untouched, i)), f"seed {i} went another way"
    assert (result["seed_1/env_steps"], result["seed_1/episodes"]) == (own["env_steps"], own["episodes"])
    if cls is PPO:  # DQN's refilled seed meets the iteration's rounds at another phase (tests/test_population.py)
        assert same_tensors(torch_state(together, 1), torch_state(fresh, 0))


class CorridorTorch(TorchVectorEnv):
    """A corridor of `length` cells as tensors: action 1 walks right, 0 left; the far end terminates with reward 1."""

    state_size, draws, max_episode_steps = 1, 1, 50
    settings = ("length",)
    length = 5
    single_observation_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
    single_action_space = gym.spaces.Discrete(2)

    def start(self, uniforms):
        return torch.floor(uniforms * 2)  # cell 0 or 1

    def dynamics(self, state, actions):
        cell = (state[:, 0] + torch.where(actions == 1, 1.0, -1.0)).clamp(min=0)
        done = cell >= self.length - 1
        return cell[:, None], done.double(), done

    def observe(self, state):
        return state.float()


class Corridor(gym.Env):
    def __init__(self, length: int = 5):
        self.length, self.cell = length, 0
        self.observation_space, self.action_space = CorridorTorch.single_observation_space, gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = int(self.np_random.integers(0, 2))
        return np.array([self.cell], np.float32), {}

    def step(self, action):
        self.cell = max(0, self.cell + (1 if action == 1 else -1))
        done = self.cell >= self.length - 1
        return np.array([self.cell], np.float32), float(done), done, False, {}


def test_a_users_env_registers_a_torch_version_that_our_learners_train_on():
    register_env("TuneRlTorchCorridor-v0", torch_env=CorridorTorch)(Corridor)
    learner = PPO(small_ppo(env_backend="torch", num_seeds=2, lr=1e-2), env_id="TuneRlTorchCorridor-v0",
                  env_config={"length": 4})
    assert isinstance(learner.env.torch_env, CorridorTorch) and learner.env.torch_env.length == 4
    results = [learner.train_iteration() for _ in range(4)]
    assert results[-1]["episodes"] > 0 and results[-1]["episode_len_mean"] < 50
    assert isinstance(PPO(small_ppo(), env_id="TuneRlTorchCorridor-v0").env, SeedEnvs)  # auto on a CPU: gymnasium's
    with pytest.raises(ValueError, match=r"torch_env=.*is a class .*TorchVectorEnv.*got a str"):
        register_env("TuneRlTorchCorridor-v0", torch_env="CorridorTorch")(Corridor)
    register_env("TuneRlTorchCorridor-v0")(Corridor)  # registered again without one: it has none
    with pytest.raises(ValueError, match="TuneRlTorchCorridor-v0 has no torch version"):
        PPO(small_ppo(env_backend="torch"), env_id="TuneRlTorchCorridor-v0")


def test_preflight_lets_a_users_torch_env_through_and_refuses_it_once_registered_without_one(tmp_path):
    """The refusal of env_backend torch before launch (tests/bad_inputs/env_backend_*) asks the registry, not a
    list of ours: a user's env with a torch version passes; auto never asks for one."""
    from tune_runner.errors import UserError
    from tune_runner.spec.experiment import load_spec
    from tune_runner.trainables import env_check
    from tune_runner.trainables.catalog import backend

    space = tmp_path / "corridor.yaml"
    space.write_text("trainable: ppo\nenv: TuneRlTorchCorridorCheck-v0\nenv_config: {length: 4}\n"
                     "budget: {env_steps: 1000}\nfixed: {env_backend: torch}\nspace:\n"
                     "  lr: {loguniform: [1.0e-4, 1.0e-2]}\n")
    register_env("TuneRlTorchCorridorCheck-v0", torch_env=CorridorTorch)(Corridor)
    env_check.check_env(load_spec(str(space)), backend("ppo"))
    register_env("TuneRlTorchCorridorCheck-v0")(Corridor)
    with pytest.raises(UserError, match=r"corridor.yaml: fixed.env_backend: torch: TuneRlTorchCorridorCheck-v0 has "
                                        r"no torch version .*register one with @register_env"):
        env_check.check_env(load_spec(str(space)), backend("ppo"))
    env_check.check_env(load_spec(str(space), overrides=["env_backend=auto"]), backend("ppo"))
