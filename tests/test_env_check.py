"""The env built before launch (tune_runner.trainables.env_check): each distinct env_config once, its spaces
against what the trainable trains, a searched `env_config.NAME` at every corner and in the trial's env_config. No Ray.

The refusals' one-line texts through the CLI are in the corpus (tests/bad_inputs/*env*.yaml).
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from ray.tune.registry import ENV_CREATOR, _global_registry

from tune_runner.errors import UserError
from tune_runner.plugins import AGENTS, load_plugins, register_agent
from tune_runner.spec.experiment import build_spec, load_spec
from tune_runner.trainables import agents as _agents  # noqa: F401 - ppo and dqn registered before the fixture saves AGENTS
from tune_runner.trainables import env_check
from tune_runner.trainables.catalog import backend
from tune_runner.tuning.preflight import prepare

_ids = itertools.count()


class Counted(gym.Env):
    """A small discrete-action env that records every construction (its keywords) and every close."""

    built: ClassVar[list[dict[str, Any]]] = []
    closed: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, size: int = 5, **kwargs: Any) -> None:
        if size <= 0:
            raise ValueError(f"size must be > 0, got {size}")
        if kwargs.get("boom"):
            raise KeyError("boom")
        self.kwargs = {"size": size, **kwargs}
        Counted.built.append(self.kwargs)
        self.size = size
        self.observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= self.size, False, {}

    def close(self) -> None:
        Counted.closed.append(self.kwargs)


@pytest.fixture(autouse=True)
def _clean_registries(forbid_ray):
    """Each test's envs and agents are unregistered after it; nothing here may start Ray (forbid_ray)."""
    Counted.built.clear()
    Counted.closed.clear()
    load_plugins()  # the shipped envs first, so that they are in the snapshot and stay registered for later files
    agents, gym_ids, ray_keys = dict(AGENTS._entries), set(gym.envs.registry), set(_global_registry._to_flush)
    yield
    AGENTS._entries = agents
    for name in set(gym.envs.registry) - gym_ids:
        del gym.envs.registry[name]
    for key in set(_global_registry._to_flush) - ray_keys:
        del _global_registry._to_flush[key]


def counted_env() -> str:
    """A fresh gymnasium id for Counted (a new id per test: the built-env memory is per process)."""
    name = f"Counted{next(_ids)}-v0"
    gym.register(name, entry_point=Counted)
    return name


def spec(trainable: str, env: str, **raw: Any):
    return build_spec({"trainable": trainable, "env": env, "budget": {"env_steps": 1000}, **raw},
                      name="t", source="space.yaml")


def check(spec: Any) -> None:
    """The env check as prepare runs it: with the spec's trainable resolved to its record."""
    env_check.check_env(spec, backend(spec.trainable))


@pytest.mark.parametrize("trainable", ["ppo", "rllib/PPO"])
def test_each_distinct_env_config_is_built_once_and_closed(trainable):
    env = counted_env()
    searched = spec(trainable, env, env_config={"x": 1}, fixed={"env_config.y": 2},
                    space={"env_config.size": {"choice": [3, 4, 3]}, "lr": {"loguniform": [1.0e-4, 1.0e-3]},
                           "gamma": {"choice": [0.9, 0.99]}})
    prepare(searched)  # RLlib's own config check builds the env too (masking): it shares the memory
    assert sorted(Counted.built, key=lambda k: k["size"]) == [{"size": 3, "x": 1, "y": 2}, {"size": 4, "x": 1, "y": 2}]
    assert Counted.closed == Counted.built


def test_a_good_searched_env_config_reaches_the_trials_env_config_for_both_backends():
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.rllib import rllib_config

    env = counted_env()
    searched = spec("ppo", env, env_config={"x": 1}, fixed={"num_envs_per_env_runner": 1},
                    space={"env_config.size": {"randint": [3, 9]}})
    prepare(searched)
    assert [k["size"] for k in Counted.built] == [3, 9]  # both ends of the range, nothing in between
    space = searched.param_space()
    assert space["env_config"] == {"x": 1} and "env_config.size" in space  # searched like any key
    trial = {**space, "env_config.size": 7}  # one sample, as Tune hands it to the trial
    learner = build_learner("ppo", trial)
    learner.close()
    assert Counted.built[-1] == {"size": 7, "x": 1}
    algo_config = rllib_config("PPO", trial)
    assert algo_config.env_config == {"x": 1, "size": 7}
    assert not hasattr(algo_config, "env_config.size") and "size" not in vars(algo_config)


def test_the_export_names_the_env_config_the_best_trial_ran_with():
    from tune_runner.results import export
    from tune_runner.results.analysis import Best

    env = counted_env()
    searched = spec("ppo", env, env_config={"x": 1}, space={"env_config.size": {"choice": [3, 4]}})
    best = Best(trial_id="t_1", config={**searched.param_space(), "env_config.size": 4, "lr": 0.001}, value=1.0,
                metric="episode_return_mean", mode="max", scope="last", last_result={}, trial_path="/x")
    data = export.bundle(searched, best, record=backend(searched.trainable), experiment="e")
    assert data.env_config == {"x": 1, "size": 4} and data.config == {"lr": 0.001}


def test_set_pins_a_searched_env_config_key(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("trainable: ppo\nenv: CartPole-v1\nbudget: {env_steps: 1000}\n"
                    "space: {env_config.sutton_barto_reward: {choice: [true, false]}, lr: {choice: [0.001]}}\n")
    assert load_spec(str(path)).searched == ("env_config.sutton_barto_reward", "lr")
    pinned = load_spec(str(path), overrides=["env_config.sutton_barto_reward=true"])
    assert pinned.searched == ("lr",) and pinned.env_config == {"sutton_barto_reward": True}


def test_envs_registered_with_ray_tune_are_built_with_the_env_config_dict():
    from ray.tune.registry import register_env

    def creator(env_config: dict) -> gym.Env:
        return Counted(size=env_config.get("size", 5), **{k: v for k, v in env_config.items() if k != "size"})

    name = f"tune_counted_{next(_ids)}"
    register_env(name, creator)
    assert _global_registry.contains(ENV_CREATOR, name)
    check(spec("dqn", name, env_config={"size": 2}))
    assert Counted.built == [{"size": 2}]
    with pytest.raises(UserError, match=r"^space.yaml: env_config: size must be > 0, got 0$"):
        check(spec("dqn", name, env_config={"size": 0}))


def test_the_envs_own_error_is_named_with_its_type_when_its_message_alone_says_little():
    env = counted_env()
    with pytest.raises(UserError, match=r"^space.yaml: env_config: KeyError: 'boom'$"):
        check(spec("ppo", env, env_config={"boom": True}))
    def refuse() -> gym.Env:
        raise RuntimeError("no")

    gym.register(broken := f"Broken{next(_ids)}-v0", entry_point=refuse)
    with pytest.raises(UserError, match=rf"^space.yaml: env: {broken} cannot be built: RuntimeError: no$"):
        check(spec("ppo", broken))


@pytest.mark.parametrize("trainable, env", [
    ("ppo", "Acrobot-v1"), ("dqn", "MountainCar-v0"), ("ppo", "masked_choice"), ("dqn", "curriculum_corridor"),
    ("rllib/PPO", "Pendulum-v1"), ("rllib/SAC", "Pendulum-v1"), ("rllib/SAC", "CartPole-v1"),
    ("rllib/DQN", "Acrobot-v1"), ("ppo", "LunarLanderContinuous-v3"), ("dqn", "LunarLander-v3"),
])
def test_envs_we_did_not_tune_for_pass_when_the_trainable_takes_their_spaces(trainable, env):
    check(spec(trainable, env))


@pytest.mark.parametrize(("env", "package", "what", "extra"), [
    ("LunarLanderContinuous-v3", "Box2D", "Box2D", "box2d"), ("HalfCheetah-v5", "mujoco", "MuJoCo", "mujoco")])
def test_an_env_whose_package_is_missing_is_refused_with_the_extra_that_installs_it(env, package, what, extra,
                                                                                    uninstalled, monkeypatch):
    """gymnasium's own message asks for swig and a source build (Box2D); ours names the extra with the wheel."""
    from tune_runner.trainables import trial

    family = f"gymnasium.envs.{extra}"
    for name in [m for m in sys.modules if m.split(".")[0] == package or m == family or m.startswith(family + ".")]:
        monkeypatch.delitem(sys.modules, name)  # imported again, under `uninstalled`
    monkeypatch.setattr(trial, "_BUILT", {})
    uninstalled(package)
    with pytest.raises(UserError, match=rf"^space.yaml: env: {env} needs {what}, which is not installed: "
                                        rf"pip install 'tune-rl\[{extra}\]'$"):
        check(spec("ppo", env))


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.bool_, np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
def test_rllib_is_refused_observations_its_models_cannot_take_and_ours_are_not(dtype, masked):
    """RLlib's default models take float observations: an int64 or uint8 Box failed every trial's first forward
    pass ("mat1 and mat2 must have the same dtype"), MinAtar's bool images their first convolution. Our learners
    read any Box as floats."""
    from tune_runner.trainables.trial import Spaces

    box = gym.spaces.Box(0, 1, (4,), dtype)
    observation = gym.spaces.Dict({"observations": box, "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)}) \
        if masked else box
    spaces = Spaces(observation=observation, action=gym.spaces.Discrete(2))
    refused = env_check.space_problem("rllib/PPO", "Ints-v0", backend("rllib/PPO").trains, spaces)
    if np.issubdtype(dtype, np.floating):
        assert refused is None
    else:
        assert refused == (f"rllib/PPO feeds observations to RLlib's models as they come, and those take floats; "
                           f"Ints-v0 has {np.dtype(dtype)} observations of shape (4,); use ppo or dqn (ours read "
                           f"them as floats), or register a wrapped env that gives float32 ones "
                           f"(gymnasium.wrappers.DtypeObservation)")
    assert env_check.space_problem("ppo", "Ints-v0", backend("ppo").trains, spaces) is None


def test_an_agent_declares_what_it_trains_and_an_undeclared_one_takes_any_env():
    @register_agent("box_only")
    class BoxOnly:
        action_spaces = ("Box",)

    @register_agent("anything")
    class Anything:
        pass

    with pytest.raises(UserError, match=r"^space.yaml: box_only needs a Box action space; CartPole-v1 has "
                                        r"Discrete\(2\); use a trainable for discrete actions such as ppo or dqn$"):
        check(spec("box_only", "CartPole-v1"))
    check(spec("box_only", "Pendulum-v1"))
    check(spec("anything", "Pendulum-v1"))


def test_the_oracle_builds_no_env():
    env = counted_env()
    check(spec("oracle", env, env_config={"boom": True}))
    assert Counted.built == []
