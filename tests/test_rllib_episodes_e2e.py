"""End to end: an `rllib/PPO` trial reports the mean of the last `metrics_num_episodes_for_smoothing`
episodes, compared on every iteration with the episodes the env itself wrote down
(tests/episode_recorder.py), with RLlib's local EnvRunner and with a remote one, and across a
checkpoint and restore (PBT's exploit, a resume)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.episode_recorder import RECORDED_ENV, recorded, register
from tune_runner.trainables.catalog import backend

pytestmark = pytest.mark.e2e

SLID_ITERATIONS = 1  # iterations to run once the window has dropped episodes
MAX_ITERATIONS = 20


def assert_matches(result: dict[str, Any], record: Path, *, window: int) -> None:
    """The result's episode figures against the last `window` episodes the env wrote down."""
    seen = recorded(record)
    last = seen[-window:]
    assert result["episodes"] == len(seen)
    assert result["episode_return_mean"] == pytest.approx(statistics.fmean(r for r, _ in last), rel=1e-12)
    assert result["episode_len_mean"] == pytest.approx(statistics.fmean(n for _, n in last), rel=1e-12)
    assert (result["episode_return_max"], result["episode_return_min"]) == (max(r for r, _ in last),
                                                                            min(r for r, _ in last))


@pytest.mark.parametrize("runners", [0, 1], ids=["local-env-runner", "remote-env-runner"])
def test_the_reported_return_is_the_mean_of_the_last_episodes_the_env_finished(runners, ray_session, tmp_path):
    register()
    record = tmp_path / "episodes.jsonl"
    config = {"env": RECORDED_ENV, "env_config": {"record_to": str(record)}, "num_env_runners": runners,
              "num_envs_per_env_runner": 2, "train_batch_size_per_learner": 500, "minibatch_size": 125,
              "num_epochs": 2, "seed": 0}
    trial = backend("rllib/PPO").trainable_class()(config=config)
    window = trial.algo.config.metrics_num_episodes_for_smoothing
    assert window == 100  # RLlib's default, as users run it
    slid = 0
    for _ in range(MAX_ITERATIONS):
        result = trial.train()
        assert_matches(result, record, window=window)
        assert "rllib_episode_return_mean" in result  # RLlib's own figure, kept by another name
        slid += result["episodes"] > window
        if slid == SLID_ITERATIONS:
            break
    assert slid == SLID_ITERATIONS, f"only {result['episodes']} episodes in {MAX_ITERATIONS} iterations"

    checkpoint = trial.save()
    trial.stop()  # its unfinished episodes are never written down, nor counted
    restored = backend("rllib/PPO").trainable_class()(config=config)
    restored.restore(checkpoint)
    # The window goes on from the checkpoint's: the env's record holds both trials' episodes, in order.
    after = restored.train()
    assert_matches(after, record, window=window)
    # sps counts this iteration's env steps only: from the checkpoint's lifetime count, not from 0
    # (which made the first sps after a PBT exploit or a resume several times too high).
    steps = after["env_steps"] - result["env_steps"]
    assert 0 < steps < result["env_steps"]
    assert after["sps"] * after["time_this_iter_s"] <= 1.5 * steps, (after["sps"], after["time_this_iter_s"], steps)
    restored.stop()
