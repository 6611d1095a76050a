"""Curriculum learning (env_task_fn): references, task-settable vector envs, our trainables, RLlib's callback.

No Ray: RLlib's side is driven with a stand-in Algorithm whose EnvRunners hold real gymnasium vector envs.
"""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from tune_runner.algos.learner_envs import make_vec_env
from tune_runner.errors import UserError
from tune_runner.trainables import curriculum
from tune_runner.trainables.catalog import backend
from tune_runner.trainables.rllib import rllib_config

LEVEL_ENV = "TuneRlLevelTest-v0"


class LevelEnv(gym.Env):
    """Task-settable: the task is a level, which the observation shows."""

    observation_space = gym.spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, level: int = 0) -> None:
        self.level, self.t = level, 0

    def get_task(self) -> int:
        return self.level

    def set_task(self, task: int) -> None:
        self.level = task

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.level], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.level], np.float32), float(action), self.t >= 5, False, {}


@pytest.fixture(autouse=True, scope="module")
def _level_env():
    if LEVEL_ENV not in gym.registry:
        gym.register(LEVEL_ENV, entry_point=LevelEnv)


@pytest.fixture(autouse=True)
def _no_ray(forbid_ray):
    """These tests must never start Ray (asking Ray's runtime context would), whether or not the
    suite's shared Ray is up when they run."""


def write(path, source: str):
    path.write_text(textwrap.dedent(source))
    return path


RAISE_LEVEL = """
    KEYS = {"env_steps", "num_env_steps_sampled_lifetime", "timesteps_total", "training_iteration",
            "episode_return_mean"}

    def raise_level(train_results, task_settable_env, env_ctx):
        missing = KEYS - set(train_results)
        assert not missing, missing
        return train_results["training_iteration"]
"""


# ---- references -------------------------------------------------------------------------------------


def test_dotted_and_file_references_resolve(tmp_path, monkeypatch):
    write(tmp_path / "tune_rl_curriculum_a.py", "def fn(results, env, ctx):\n    return results['x'] + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for ref in ("tune_rl_curriculum_a:fn", f"{tmp_path}/tune_rl_curriculum_a.py:fn", "tune_rl_curriculum_a.py:fn"):
        assert curriculum.resolve_task_fn(ref)({"x": 2}, None, {}) == 3, ref


@pytest.mark.parametrize("ref, message", [
    ("no_colon_here", "env_task_fn: 'no_colon_here': expected 'module:function' or 'path/to/file.py:function'"),
    ("tune_rl_no_such_module:fn", "env_task_fn: 'tune_rl_no_such_module:fn': no module named "
                                  "'tune_rl_no_such_module'"),
    ("json:nope", "env_task_fn: 'json:nope': module json has no nope"),
    ("json:decoder", "env_task_fn: 'json:decoder': decoder is a module, not a function"),
    ("operator:add", "env_task_fn: 'operator:add': add must take (train_results, task_settable_env, env_ctx)"),
    ("missing/curriculum.py:fn", "env_task_fn: 'missing/curriculum.py:fn': no file "),
])
def test_bad_references_are_one_line_errors(ref, message):
    with pytest.raises(UserError) as caught:
        curriculum.resolve_task_fn(ref)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_misspelt_function_gets_a_suggestion_and_a_broken_file_names_its_error(tmp_path):
    good = write(tmp_path / "good.py", "def raise_level(r, env, ctx):\n    return 1\n")
    with pytest.raises(UserError, match=r"module .*good.py has no raise_levle; did you mean 'raise_level'\?"):
        curriculum.resolve_task_fn(f"{good}:raise_levle")
    broken = write(tmp_path / "broken.py", "def fn(r, env, ctx)\n    return 1\n")
    with pytest.raises(UserError, match=r"broken.py failed: SyntaxError"):
        curriculum.resolve_task_fn(f"{broken}:fn")


def test_relative_file_references_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert curriculum.absolute_ref("curricula/levels.py:fn") == f"{tmp_path}/curricula/levels.py:fn"
    assert curriculum.absolute_ref("my.module:fn") == "my.module:fn"
    assert curriculum.absolute_ref("/abs/levels.py:fn") == "/abs/levels.py:fn"


# ---- vector envs ------------------------------------------------------------------------------------


def test_every_sub_env_of_a_sync_vector_env_gets_the_rising_task():
    env = make_vec_env(LEVEL_ENV, env_config={"level": 0}, num_envs=3, seed=0, vectorize_mode="sync")
    seen = []

    def by_steps(results, task_settable_env, env_ctx):
        seen.append((type(task_settable_env), env_ctx))
        return results["timesteps_total"] // 100

    curriculum.check_task_settable(env.env, env_id=LEVEL_ENV)
    means = []
    for steps in (0, 150, 320):
        results = curriculum.task_results({"episode_return_mean": 1.0}, env_steps=steps)
        tasks = curriculum.advance(by_steps, vector_env=env.env, results=results, env_ctx={"level": 0})
        assert [e.unwrapped.level for e in env.env.envs] == tasks
        means.append(curriculum.mean_task(tasks))
    assert means == [0.0, 1.0, 3.0]
    assert seen[0] == (LevelEnv, {"level": 0})  # the first sub-env, unwrapped; the env_config
    env.close()


def test_an_async_vector_env_gets_the_task_in_its_subprocesses():
    env = gym.make_vec(LEVEL_ENV, num_envs=2, vectorization_mode="async")
    try:
        curriculum.check_task_settable(env, env_id=LEVEL_ENV)
        first = []
        tasks = curriculum.advance(lambda r, e, c: first.append(e.get_task()) or 7, vector_env=env,
                                   results={}, env_ctx={})
        assert tasks == [7, 7] and first == [0]
    finally:
        env.close()


def test_envs_that_cannot_take_a_task_are_refused_by_name():
    numpy_vectorized = make_vec_env("CartPole-v1", env_config={}, num_envs=2, seed=0)
    with pytest.raises(UserError, match="env CartPole-v1 is not task-settable here: it runs as one CartPoleVectorEnv"
                                        " with no sub-envs.*gym_env_vectorize_mode: sync"):
        curriculum.check_task_settable(numpy_vectorized.env, env_id="CartPole-v1")
    plain = make_vec_env("CartPole-v1", env_config={}, num_envs=2, seed=0, vectorize_mode="sync")
    with pytest.raises(UserError, match=r"env CartPole-v1 is not task-settable: it has no get_task\(\)"):
        curriculum.check_task_settable(plain.env, env_id="CartPole-v1")
    with pytest.raises(UserError, match=r"env CartPole-v1 is not task-settable: it has no get_task\(\)"):
        curriculum.check_env("CartPole-v1")
    curriculum.check_env(LEVEL_ENV)


def test_an_env_registered_only_with_ray_tune_is_made_by_our_learners():
    from ray.tune.registry import register_env

    register_env("TuneRlTuneOnlyLevel-v0", lambda env_config: LevelEnv(**env_config))
    env = make_vec_env("TuneRlTuneOnlyLevel-v0", env_config={"level": 4}, num_envs=2, seed=0)
    assert env.obs.tolist() == [[4.0], [4.0]] and curriculum.current_tasks(env.env) == [4, 4]
    env.close()


def test_only_numeric_tasks_are_reported():
    assert curriculum.mean_task([1, 2, 3]) == 2.0
    assert curriculum.mean_task([{"size": 3}]) is None and curriculum.mean_task([]) is None
    assert curriculum.mean_task([True, False]) is None


# ---- our trainables ---------------------------------------------------------------------------------


def level_trainable(name: str, task_fn: str, **settings):
    """Our `name` trainable on the level env with `task_fn`, small enough for a unit test."""
    from tune_runner.trainables.own import own_trainable_class

    config = {"env": LEVEL_ENV, "env_config": {}, "env_task_fn": task_fn, "seed": 0, "num_envs_per_env_runner": 2,
              "fcnet_hiddens": [16], **settings}
    config.update({"train_batch_size_per_learner": 64, "minibatch_size": 32, "num_epochs": 1} if name == "ppo" else
                  {"train_batch_size": 16, "training_intensity": 1, "num_steps_sampled_before_learning_starts": 0,
                   "replay_buffer_config.capacity": 500})
    return own_trainable_class(name)(config=config)


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_own_trainable_raises_the_task_after_every_iteration(name, tmp_path):
    trainable = level_trainable(name, f"{write(tmp_path / 'levels.py', RAISE_LEVEL)}:raise_level")
    try:
        tasks = [trainable.train()["task"] for _ in range(3)]
        assert tasks == [1.0, 2.0, 3.0]
        assert [e.unwrapped.level for e in trainable.learner.env.env.envs] == [3, 3]
    finally:
        trainable.stop()


RECORD = """
    SEEN = []

    def record(train_results, task_settable_env, env_ctx):
        SEEN.append(dict(train_results))
        return len(SEEN)
"""


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_with_several_seeds_each_seeds_envs_take_a_task_from_that_seeds_own_result(name, tmp_path):
    """seeds_per_trial with a curriculum (the re-evaluation of curriculum.yaml trains 2 seeds in one trial): the
    task function is asked once per seed, with that seed's numbers only, and its answer goes to that seed's envs."""
    from tune_runner.spec.reserved import SEEDS_KEY

    trainable = level_trainable(name, f"{write(tmp_path / 'record.py', RECORD)}:record", **{SEEDS_KEY: 2})
    try:
        result = trainable.train()
        seen = trainable.task_fn.__globals__["SEEN"]
        assert len(seen) == 2
        for i, own in enumerate(seen):
            assert own["env_steps"] == result[f"seed_{i}/env_steps"] and own["training_iteration"] == 1
            assert own["episode_return_mean"] == result[f"seed_{i}/episode_return_mean"]
            assert not any(key.startswith("seed_") for key in own)  # no other seed's numbers
        assert seen[0]["episode_return_mean"] != seen[1]["episode_return_mean"]  # else this could not tell
        levels = [[e.unwrapped.level for e in env.envs] for env in curriculum.seed_vector_envs(trainable.learner)]
        assert levels == [[1, 1], [2, 2]] and result["task"] == 1.5
    finally:
        trainable.stop()


def test_env_task_fn_is_a_setting_of_every_trainable_and_checked_before_launch(tmp_path):
    fn = write(tmp_path / "levels.py", RAISE_LEVEL)
    for trainable in map(backend, ("ppo", "dqn", "rllib/PPO", "rllib/DQN")):
        assert trainable.check_settings(["env_task_fn", "lr"]) == [], trainable
        good = {"env": LEVEL_ENV, "env_config": {}, "env_task_fn": f"{fn}:raise_level"}
        assert trainable.check_config(good) is None, trainable
        bad = {**good, "env_task_fn": f"{fn}:raise_lvl"}
        assert "has no raise_lvl; did you mean 'raise_level'?" in trainable.check_config(bad)
        not_settable = {**good, "env": "CartPole-v1"}
        assert "env CartPole-v1 is not task-settable" in trainable.check_config(not_settable)


def test_a_bad_reference_stops_the_cli_before_anything_starts(cli, _isolated_home):
    result = cli("search", "--space", "ppo_small", "--set", "env_task_fn=json:nope")
    assert result.status == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "ppo rejects this config: env_task_fn: 'json:nope': module json has no nope" in result.err
    assert not (_isolated_home / "results").exists()


# ---- RLlib --------------------------------------------------------------------------------------------


def test_rllib_config_turns_env_task_fn_into_a_train_result_callback(tmp_path):
    fn = write(tmp_path / "levels.py", RAISE_LEVEL)
    ref = f"{fn}:raise_level"
    config = rllib_config("PPO", {"env": LEVEL_ENV, "env_config": {}, "env_task_fn": ref,
                                             "train_batch_size_per_learner": 64, "minibatch_size": 32})
    config.validate()
    task_callback = config.callbacks_on_train_result[-1]  # after our episode count (test_rllib_episodes.py)
    assert task_callback.func is curriculum.on_train_result and task_callback.keywords == {"ref": ref}
    assert config.env_task_fn != ref  # not handed to RLlib, which would refuse it
    assert backend("rllib/PPO").resolved_config({"env": LEVEL_ENV, "env_task_fn": ref})["env_task_fn"] == ref


def fake_algorithm(*envs):
    """An Algorithm as on_train_result sees it: a local EnvRunner without envs, one remote-like one per env."""
    def runner(env, index):
        return SimpleNamespace(env=env, worker_index=index, num_workers=len(envs),
                               config=SimpleNamespace(env=LEVEL_ENV, env_config={"level": 0}))

    runners = [runner(None, 0)] + [runner(env, i + 1) for i, env in enumerate(envs)]
    group = SimpleNamespace(foreach_env_runner=lambda func: [func(r) for r in runners])
    return SimpleNamespace(env_runner_group=group, eval_env_runner_group=None)


def test_rllib_callback_sets_the_task_on_every_env_runner_and_reports_it(tmp_path):
    from tune_runner.trainables.metrics import from_rllib

    fn = write(tmp_path / "levels.py", RAISE_LEVEL)
    envs = [gym.make_vec(LEVEL_ENV, num_envs=2, vectorization_mode="sync") for _ in range(2)]
    callback = curriculum.rllib_callback(f"{fn}:raise_level")
    for iteration in (1, 2):
        result = {"training_iteration": iteration, "num_env_steps_sampled_lifetime": 100 * iteration,
                  "env_runners": {"episode_return_mean": 2.0}, "config": {"lr": 1e-3}}
        callback(algorithm=fake_algorithm(*envs), metrics_logger=None, result=result)
        assert result["curriculum"] == {"task": float(iteration)}
        assert from_rllib(result)["task"] == float(iteration)
    assert [e.level for env in envs for e in (s.unwrapped for s in env.envs)] == [2, 2, 2, 2]


def test_the_task_function_sees_our_episode_return_not_rllibs(tmp_path):
    """RLlib's dispatcher runs the config's on_train_result callbacks in order: our episode count, then the
    curriculum, whose function gets the mean of the last episodes we counted (RLlib's figure says 500)."""
    from ray.rllib.callbacks.utils import make_callback
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from tune_runner.trainables import rllib_episodes

    fn = write(tmp_path / "by_return.py", """
        def by_return(results, env, ctx):
            return results["episode_return_mean"]
    """)
    config = rllib_config("PPO", {"env": LEVEL_ENV, "env_config": {}, "env_task_fn": f"{fn}:by_return"})
    env = gym.make_vec(LEVEL_ENV, num_envs=1, vectorization_mode="sync")
    algorithm = fake_algorithm(env)
    algorithm.config = SimpleNamespace(metrics_num_episodes_for_smoothing=100)
    _, remote = algorithm.env_runner_group.foreach_env_runner(lambda r: r)
    for episode_return in (6.0, 8.0):
        episode = SingleAgentEpisode()
        episode.add_env_reset(observation=0)
        episode.add_env_step(observation=0, action=0, reward=episode_return, terminated=True)
        rllib_episodes.on_episode_end(episode=episode, env_runner=remote)
    result = {"training_iteration": 1, "num_env_steps_sampled_lifetime": 2,
              "env_runners": {"episode_return_mean": 500.0}}
    make_callback("on_train_result", callbacks_functions=config.callbacks_on_train_result,
                  kwargs={"algorithm": algorithm, "metrics_logger": None, "result": result})
    assert result["curriculum"] == {"task": 7.0}


def test_rllib_callback_raises_what_an_env_runner_hit(tmp_path):
    fn = write(tmp_path / "levels.py", RAISE_LEVEL)
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    result = {"training_iteration": 1, "num_env_steps_sampled_lifetime": 10, "env_runners": {}}
    with pytest.raises(UserError, match="not task-settable"):
        curriculum.rllib_callback(f"{fn}:raise_level")(algorithm=fake_algorithm(env), result=result)


@pytest.mark.e2e  # RLlib's env runner, in-process: Ray's stack, so with the e2e tests (issue 15: units need no Ray)
def test_rllib_callback_on_a_real_local_env_runner(tmp_path):
    """RLlib's own EnvRunner (in this process, Ray forbidden): its wrapped vector env gets the task,
    and the next episodes it samples show it."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    fn = write(tmp_path / "levels.py", RAISE_LEVEL)
    config = rllib_config("PPO", {"env": LEVEL_ENV, "env_config": {}, "num_envs_per_env_runner": 2,
                                             "env_task_fn": f"{fn}:raise_level"})
    runner = SingleAgentEnvRunner(config=config)
    group = SimpleNamespace(foreach_env_runner=lambda func: [func(runner)])
    algorithm = SimpleNamespace(env_runner_group=group, eval_env_runner_group=None)
    result = {"training_iteration": 5, "num_env_steps_sampled_lifetime": 40, "env_runners": {}}
    config.callbacks_on_train_result[-1](algorithm=algorithm, metrics_logger=None, result=result)
    assert result["curriculum"] == {"task": 5.0}
    episodes = runner.sample(num_episodes=2, explore=True, force_reset=True)
    assert {float(o[0]) for e in episodes for o in e.get_observations()} == {5.0}
    runner.stop()
