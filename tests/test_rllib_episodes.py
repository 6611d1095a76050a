"""Our episode count for `rllib/*` trials (tune_runner.trainables.rllib_episodes), without Ray: the window, the
callbacks on RLlib's own episode objects and on a real local EnvRunner, and the metric mapping."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from tests.episode_recorder import RECORDED_ENV, recorded, register
from tune_runner.trainables import curriculum, rllib_episodes
from tune_runner.trainables.metrics import from_rllib
from tune_runner.trainables.rllib import rllib_config
from tune_runner.trainables.rllib_episodes import EpisodeWindow


def runner(*, evaluation: bool = False) -> SimpleNamespace:
    """An EnvRunner as our callbacks see it: something with a config and room for attributes."""
    return SimpleNamespace(config=SimpleNamespace(in_evaluation=evaluation))


def chunk(rewards: list[float], *, done: bool = False, after: SingleAgentEpisode | None = None) -> SingleAgentEpisode:
    """RLlib's episode object with these rewards, continuing `after` (RLlib's own cut) when given."""
    episode = after.cut(len_lookback_buffer=1) if after is not None else SingleAgentEpisode()
    if after is None:
        episode.add_env_reset(observation=0)
    for i, reward in enumerate(rewards):
        episode.add_env_step(observation=0, action=0, reward=reward, terminated=done and i == len(rewards) - 1)
    return episode


def test_the_window_is_the_mean_of_the_last_n_episodes_and_counts_all():
    window = EpisodeWindow(3)
    assert math.isnan(window.metrics()["episode_return_mean"]) and window.metrics()["episodes"] == 0
    window.add([(10.0, 10), (20.0, 20)])
    assert window.metrics()["episode_return_mean"] == 15.0
    window.add([(30.0, 3), (40.0, 4), (50.0, 5)])
    assert window.metrics() == {"episode_return_mean": 40.0, "episode_return_max": 50.0, "episode_return_min": 30.0,
                                "episode_len_mean": 4.0, "episodes": 5}


def test_the_window_state_round_trips_and_a_smaller_window_keeps_the_newest():
    window = EpisodeWindow(4)
    window.add([(float(r), r) for r in range(1, 7)])
    state = json.loads(json.dumps(window.get_state()))  # what a checkpoint file holds
    same, smaller = EpisodeWindow(4), EpisodeWindow(2)
    same.set_state(state)
    smaller.set_state(state)
    assert same.metrics() == window.metrics()
    assert smaller.metrics()["episode_return_mean"] == 5.5 and smaller.metrics()["episodes"] == 6


def test_an_episode_over_several_samples_counts_every_chunk_as_handed_out():
    env_runner = runner()
    first = chunk([1.0, 1.0])
    rllib_episodes.on_sample_end(env_runner=env_runner, samples=[first])
    second = chunk([2.0, 2.0, 2.0], after=first)
    rllib_episodes.on_sample_end(env_runner=env_runner, samples=[second])
    # RLlib's learner connectors change handed-out chunks in place (PPO appends a step): not counted.
    first.add_env_step(observation=0, action=0, reward=100.0)
    last = chunk([3.0], done=True, after=second)
    rllib_episodes.on_episode_end(episode=last, env_runner=env_runner, prev_episode_chunks=[first, second])
    short = chunk([5.0], done=True)
    rllib_episodes.on_episode_end(episode=short, env_runner=env_runner)
    assert rllib_episodes.collect(env_runner) == [(11.0, 6), (5.0, 1)]
    assert rllib_episodes.collect(env_runner) == []  # collected once


def test_an_episode_the_env_runner_dropped_is_forgotten():
    env_runner = runner()
    dropped = chunk([1.0])
    rllib_episodes.on_sample_end(env_runner=env_runner, samples=[dropped])
    rllib_episodes.on_sample_end(env_runner=env_runner, samples=[chunk([1.0])])  # after a forced reset
    assert dropped.id_ not in vars(env_runner)[rllib_episodes._RUNNER].running


def test_evaluation_episodes_are_not_training_episodes():
    env_runner = runner(evaluation=True)
    rllib_episodes.on_episode_end(episode=chunk([1.0], done=True), env_runner=env_runner)
    assert rllib_episodes.collect(env_runner) == []


def fake_algorithm(runners: list[SimpleNamespace], *, window: int = 2) -> SimpleNamespace:
    """An Algorithm as on_train_result sees it (RLlib's foreach_env_runner calls the function on each runner)."""
    group = SimpleNamespace(foreach_env_runner=lambda func: [func(r) for r in runners])
    return SimpleNamespace(env_runner_group=group, config=SimpleNamespace(metrics_num_episodes_for_smoothing=window))


def test_each_iteration_reports_the_window_over_every_env_runner_under_our_names():
    runners = [runner(), runner()]
    algorithm = fake_algorithm(runners, window=3)
    rllib_figure = {"episode_return_mean": 500.0}
    for returns in ([10.0, 20.0], [30.0, 40.0]):
        for env_runner, episode_return in zip(runners, returns, strict=True):
            rllib_episodes.on_episode_end(episode=chunk([episode_return], done=True), env_runner=env_runner)
        result = {"num_env_steps_sampled_lifetime": 100, "env_runners": rllib_figure}
        rllib_episodes.on_train_result(algorithm=algorithm, metrics_logger=None, result=result)
    ours = from_rllib(result)
    assert ours["episode_return_mean"] == 30.0 and ours["episodes"] == 4  # (20 + 30 + 40) / 3
    assert ours["episode_return_max"] == 40.0 and ours["episode_len_mean"] == 1.0
    assert ours["rllib_episode_return_mean"] == 500.0  # RLlib's own figure, by another name


def test_the_return_is_nan_before_the_first_finished_episode():
    result = {"num_env_steps_sampled_lifetime": 100, "env_runners": {}}
    rllib_episodes.on_train_result(algorithm=fake_algorithm([runner()]), result=result)
    ours = from_rllib(result)
    assert math.isnan(ours["episode_return_mean"]) and ours["episodes"] == 0


def test_our_callbacks_come_first_and_the_curriculum_still_runs(tmp_path):
    task_fn = tmp_path / "tasks.py"
    task_fn.write_text("def next_task(results, env, ctx):\n    return 1\n")
    config = rllib_config("PPO", {"env": "CartPole-v1", "env_task_fn": f"{task_fn}:next_task"})
    first, then = config.callbacks_on_train_result
    assert first is rllib_episodes.on_train_result and then.func is curriculum.on_train_result
    assert config.callbacks_on_episode_end == [rllib_episodes.on_episode_end]
    assert config.callbacks_on_sample_end == [rllib_episodes.on_sample_end]


def test_add_callbacks_keeps_what_was_there():
    config = rllib_config("PPO", {"env": "CartPole-v1"})
    config.callbacks(on_train_result=print)
    rllib_episodes.add_callbacks(config, on_train_result=len)
    assert config.callbacks_on_train_result == [print, len]


@pytest.fixture
def no_ray(monkeypatch):
    import ray

    monkeypatch.setattr("ray._private.auto_init_hook.enable_auto_connect", False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("this test must not start Ray"))


@pytest.mark.e2e  # RLlib's env runner, in-process: Ray's stack, so with the e2e tests (issue 15)
def test_a_real_local_env_runner_counts_what_the_env_saw(tmp_path, no_ray):
    """RLlib's own EnvRunner in this process, sampling 37 steps at a time over 2 envs (episodes span
    samples): our count equals the env's own, episode by episode; an evaluation runner counts nothing."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    register()
    record = tmp_path / "episodes.jsonl"
    config = rllib_config("PPO", {"env": RECORDED_ENV, "env_config": {"record_to": str(record)},
                                             "num_envs_per_env_runner": 2})
    env_runner = SingleAgentEnvRunner(config=config)
    counted = []
    for _ in range(8):
        env_runner.sample(num_timesteps=37, explore=True)
        counted += rllib_episodes.collect(env_runner)
    env_runner.stop()
    seen = recorded(record)
    assert len(seen) >= 5 and counted == seen

    evaluation = SingleAgentEnvRunner(config=config.get_evaluation_config_object())
    evaluation.sample(num_episodes=2, explore=False)
    assert rllib_episodes.collect(evaluation) == []
    evaluation.stop()
