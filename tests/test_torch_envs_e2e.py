"""env_backend torch on a real local Ray (issue 44): a small ppo search on CartPole-v1 whose trials step one torch
env of every seed's envs (on the CPU: the suite's Ray hides any GPU) ends with every trial done, each seed's curve
reported, and a best.yaml that says torch and trains again; a population trial (configs_per_trial, issue 43) on
torch envs refills its members' slots until every config has started, each refill restarting its own block of the
one torch env (tests/test_env_backend.py holds that block to a fresh learner's)."""

from __future__ import annotations

import pytest
import yaml

from tests.test_population_e2e import member_ids
from tests.test_seeds_e2e import results
from tune_runner.spec import reserved

pytestmark = pytest.mark.e2e
SEEDS = 2
FIXED = {"env_backend": "torch", "num_envs_per_env_runner": 4, "train_batch_size": 500, "minibatch_size": 125,
         "num_epochs": 2, "metrics_num_episodes_for_smoothing": 10}


def trial_dirs(folder) -> list:
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "result.json").is_file())


def test_a_search_on_torch_envs_trains_every_seed_and_exports_a_config_that_trains_again(
        ray_session, cli, _isolated_home, tmp_path):
    from tune_runner.spec.seed_keys import per_seed

    space = tmp_path / "torch_cartpole.yaml"
    space.write_text(yaml.safe_dump({
        "trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 4000}, "num_samples": 2,
        "seeds_per_trial": SEEDS, "scheduler": "fifo", "fixed": FIXED,
        "space": {"lr": {"loguniform": [1.0e-4, 3.0e-3]}}}, sort_keys=False))
    result = cli("search", "--space", str(space), "--name", "torch_cartpole", "--no-reevaluate")
    assert result.status == 0, result.out + result.err
    folder = _isolated_home / "results" / "torch_cartpole"
    trials = trial_dirs(folder)
    assert len(trials) == 2
    for trial in trials:
        rows = results(trial)
        assert rows[-1]["env_steps"] >= 4000  # ran to its budget: the torch envs stepped in the trial's process
        assert len(per_seed(rows[-1], "episode_return_mean")) == SEEDS
        assert rows[-1]["episodes"] > 0
    bundle = yaml.safe_load((folder / "best.yaml").read_text())
    assert bundle["config"]["env_backend"] == "torch"
    again = cli("train", "--config", str(folder / "best.yaml"))
    assert again.status == 0, again.out + again.err


def test_a_population_trial_on_torch_envs_refills_its_slots_until_every_config_started(
        ray_session, cli, _isolated_home, tmp_path):
    space = tmp_path / "torch_population.yaml"
    space.write_text(yaml.safe_dump({
        "trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 3000},
        "searcher": {"name": "random", "seed": 2}, "scheduler": {"name": "asha", "grace_period": 1000},
        "num_samples": 4, reserved.MEMBERS_KEY: 2, "max_concurrent": 1, "fixed": FIXED,
        "space": {"lr": {"loguniform": [1.0e-4, 3.0e-3]}}}, sort_keys=False))
    result = cli("search", "--space", str(space), "--name", "torch_population", "--no-reevaluate")
    assert result.status == 0, result.out + result.err
    search_trials = trial_dirs(_isolated_home / "results" / "torch_population")
    assert len(search_trials) == 1, [t.name for t in search_trials]  # one trial, its 2 slots refilled
    assert len(member_ids(search_trials[0])) == 4
    bundle = yaml.safe_load((_isolated_home / "results" / "torch_population" / "best.yaml").read_text())
    assert bundle["config"]["env_backend"] == "torch" and "lr" in bundle["config"]
