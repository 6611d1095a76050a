"""The shipped environments (envs/): gymnasium's checker, seeding, curriculum tasks, action masks. No Ray."""

from __future__ import annotations

import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from tune_runner import paths
from tune_runner.plugins import ENVS, SHIPPED_PACKAGE, load_plugins

MODULES = sorted(p.stem for p in paths.shipped("envs").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module", autouse=True)
def _shipped(tmp_path_factory: pytest.TempPathFactory) -> None:
    load_plugins(cwd=tmp_path_factory.mktemp("empty"))


@pytest.fixture
def one_thread():
    """Training tests take one core, as the learners are meant to."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def names_in(module: str) -> list[str]:
    return [n for n in ENVS.names() if ENVS.peek(n).module == f"{SHIPPED_PACKAGE}.{module}"]


def all_names() -> list[str]:
    return [name for module in MODULES for name in names_in(module)]


def module(name: str):
    return sys.modules[f"{SHIPPED_PACKAGE}.{name}"]


def rollout(env: gym.Env, *, seed: int, steps: int) -> list:
    """Observations, rewards and ends of `steps` steps with seeded random actions, resetting at episode ends."""
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    trace = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        trace += [obs, reward, terminated, truncated]
        if terminated or truncated:
            obs, _ = env.reset()
            trace.append(obs)
    return trace


@pytest.mark.parametrize("stem", MODULES)
def test_every_env_module_registers_envs_that_pass_gymnasiums_checker(stem):
    assert names_in(stem), f"envs/{stem}.py registers no env"
    for name in names_in(stem):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the checker's warnings count as failures
            check_env(gym.make(name).unwrapped, skip_render_check=False)
        env = gym.make(name, render_mode="rgb_array")
        env.reset(seed=0)
        image = env.render()
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3, name
        assert image.shape[0] % 2 == 0 and image.shape[1] % 2 == 0  # video encoders want even sizes


def test_the_same_seed_replays_the_same_episodes():
    for name in all_names():
        a, b = rollout(gym.make(name), seed=3, steps=60), rollout(gym.make(name), seed=3, steps=60)
        assert gym.utils.env_checker.data_equivalence(a, b, exact=True), name


def test_randomised_envs_differ_between_seeds():
    for name in ("custom_env", "masked_choice"):
        a, b = rollout(gym.make(name), seed=3, steps=60), rollout(gym.make(name), seed=4, steps=60)
        assert not gym.utils.env_checker.data_equivalence(a, b), name


@pytest.mark.parametrize(("name", "env_config", "says"), [
    ("custom_env", {"lenght": 5}, r"custom_env: unknown env_config keys \['lenght'\]"),
    ("custom_env", {"length": 2}, "length >= 3"),
    ("curriculum_corridor", {"max_task": -1}, r"env_config.max_task must be an integer >= 0, got -1"),
    ("curriculum_corridor", {"steps_per_task": 0.5}, r"env_config.steps_per_task must be an integer >= 1"),
    ("masked_choice", {"num_actions": 1}, "num_actions >= 2"),
])
def test_a_bad_env_config_names_the_key_and_value(name, env_config, says):
    with pytest.raises(ValueError, match=says):
        ENVS.get(name).make(env_config)


def test_the_template_is_solved_by_our_ppo_in_a_few_thousand_steps(one_thread):
    from tune_runner.algos import PPO, PPOConfig

    config = PPOConfig.from_dict({"train_batch_size": 512, "minibatch_size": 128, "num_epochs": 4, "lr": 3e-3,
                                  "num_envs_per_env_runner": 4, "fcnet_hiddens": [32, 32], "seed": 0})
    for name in ("custom_env", "custom_env_actor"):
        learner = PPO(config, env_id=name)
        result = {}
        while learner.env_steps < 3000:  # above 0.9 from about 2,300 env steps on (seeds 0-2)
            result = learner.train_iteration()
        assert result["episode_return_mean"] > 0.9, (name, result)  # optimal is about 0.97


# ---- curriculum_corridor ----------------------------------------------------------------------------


def test_set_task_clamps_and_takes_effect_at_the_next_reset():
    env = gym.make("curriculum_corridor", task=1, max_task=3).unwrapped
    assert env.get_task() == 1
    _, info = env.reset(seed=0)
    assert info["task"] == 1
    env.set_task(2)
    assert env.step(1)[4]["task"] == 1  # this episode keeps its task
    assert env.reset()[1]["task"] == 2
    env.set_task(99)
    assert env.get_task() == 3
    env.set_task(-4)
    assert env.get_task() == 0


def test_a_harder_task_puts_the_goal_further_away():
    env = gym.make("curriculum_corridor").unwrapped
    lengths = []
    for task in range(3):
        env.set_task(task)
        env.reset(seed=0)
        steps, terminated = 0, False
        while not terminated:
            _, reward, terminated, truncated, _ = env.step(1)  # always right: the shortest way
            steps += 1
            assert not truncated
        lengths.append(steps)
        assert reward == 1.0
    assert lengths == [module("curriculum").goal_distance(t) for t in range(3)] and lengths[0] < lengths[2]


def test_the_task_function_rises_with_env_steps_from_ours_or_rllibs_results():
    raise_with_env_steps = module("curriculum").raise_with_env_steps
    env = gym.make("curriculum_corridor", task=1, max_task=4, steps_per_task=1000)
    assert raise_with_env_steps({"env_steps": 0}, env, None) == 1
    assert raise_with_env_steps({"env_steps": 999}, env, None) == 1
    assert raise_with_env_steps({"env_steps": 2500}, env, None) == 3
    assert raise_with_env_steps({"env_runners": {"num_env_steps_sampled_lifetime": 1000}}, env, None) == 2
    assert raise_with_env_steps({"num_env_steps_sampled_lifetime": 2000}, env, None) == 3
    assert raise_with_env_steps({"timesteps_total": 10**6}, env, None) == 4  # capped at max_task
    with pytest.raises(ValueError, match="results hold none of env_steps, .*; keys present: episode_return_mean"):
        raise_with_env_steps({"episode_return_mean": 1.0}, env, None)


def test_a_vector_env_sets_every_copys_task():
    vec = gym.make_vec("curriculum_corridor", num_envs=3, vectorization_mode="sync", max_task=2)
    vec.call("set_task", 2)
    assert vec.call("get_task") == (2, 2, 2)
    _, info = vec.reset(seed=0)
    assert list(info["task"]) == [2, 2, 2]


# ---- masked_choice ----------------------------------------------------------------------------------


def test_the_observation_is_exactly_observations_and_an_int8_action_mask():
    space = gym.make("masked_choice", num_actions=5).observation_space
    assert set(space.spaces) == {"observations", "action_mask"}
    assert isinstance(space["observations"], gym.spaces.Box) and space["observations"].dtype == np.float32
    assert space["action_mask"] == gym.spaces.Box(0, 1, (5,), np.int8)


def test_masked_actions_are_tempting_and_a_forced_one_is_counted_and_pays_nothing():
    env = gym.make("masked_choice").unwrapped
    obs, info = env.reset(seed=1)
    assert info["masked_actions_taken"] == 0
    for step in range(1, 4):
        mask, payoffs = obs["action_mask"].astype(bool), obs["observations"]
        assert mask.any() and not mask.all()
        assert payoffs[~mask].min() > payoffs[mask].max()  # ignoring the mask, the best looks forbidden
        obs, reward, _, _, info = env.step(int(np.flatnonzero(~mask)[0]))
        assert reward == 0.0 and info["masked_action"] is True
        assert info["masked_actions_taken"] == step == env.masked_actions_taken
    allowed = int(np.flatnonzero(obs["action_mask"])[0])
    _, reward, _, _, info = env.step(allowed)
    assert reward == pytest.approx(obs["observations"][allowed]) and info["masked_action"] is False
    env.reset()
    assert env.masked_actions_taken == 3  # over the env's life; info counts the episode


def test_a_random_policy_takes_masked_actions_and_ours_never_does(one_thread):
    from tune_runner.algos import PPO, PPOConfig

    random_env = gym.make("masked_choice").unwrapped
    rollout(random_env, seed=0, steps=100)
    assert random_env.masked_actions_taken > 0  # the counter can fail this test

    config = PPOConfig.from_dict({"train_batch_size": 256, "minibatch_size": 64, "num_epochs": 2,
                                  "num_envs_per_env_runner": 4, "fcnet_hiddens": [16, 16]})
    learner = PPO(config, env_id="masked_choice")
    for _ in range(4):
        result = learner.train_iteration()
    assert np.isfinite(result["policy_loss"]), result
    assert learner.env.env.get_attr("masked_actions_taken") == (0, 0, 0, 0)
