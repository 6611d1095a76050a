"""Export → load round trip: the exported bundle re-runs as a one-trial spec with the same config."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from tune_runner.errors import UserError
from tune_runner.results import export
from tune_runner.results.analysis import Best, parse_scope, score
from tune_runner.spec.experiment import load_spec
from tune_runner.trainables.catalog import backend


def _best(spec):
    config = {"env": spec.env, "env_config": {"k": 1}, **spec.fixed, "lr": 0.00123, "num_epochs": 7,
              "minibatch_size": 256, "gamma": 0.99, "lambda_": 0.95}
    return Best(trial_id="abc_00001", config=config, value=480.0, metric="episode_return_mean", mode="max",
                scope="last", last_result={"episode_return_mean": 480.0, "env_steps": 50_010}, trial_path="/x")


def _exported(spec, best, **kwargs):
    """The bundle as the runner writes it: with the record of the spec's trainable, resolved once."""
    return export.bundle(spec, best, record=backend(spec.trainable), **kwargs)


def test_round_trip_gives_the_same_resolved_config(tmp_path):
    spec = load_spec("ppo_small")
    best = _best(spec)
    path = _exported(spec, best, experiment="exp-1").write(tmp_path / "out" / "best.yaml")
    raw = yaml.safe_load(path.read_text())
    assert raw["source"] == {"experiment": "exp-1", "trial_id": "abc_00001", "space": "ppo_small",
                             "space_file": spec.source, "space_sha256": spec.source_sha256}
    again = export.load(path)
    assert again.space == () and again.num_samples == 1 and again.scheduler.name == "fifo"
    assert again.trainable == spec.trainable and again.env == spec.env and again.env_config == {"k": 1}
    assert again.budget_env_steps == spec.budget_env_steps
    resolved = {k: v for k, v in best.config.items() if k not in ("env", "env_config")}
    assert again.fixed == resolved
    assert again.param_space() == best.config  # the trial config Tune gets is exactly the best one


def test_bundle_names_the_best_trials_newest_checkpoint(tmp_path):
    spec = load_spec("ppo_small")
    best = _best(spec)
    assert _exported(spec, best, experiment="e").checkpoint is None  # /x holds no checkpoint
    trial = tmp_path / "trial"
    for index in (2, 10, 9):
        (trial / f"checkpoint_{index:06d}").mkdir(parents=True)
    best = Best(**{**best.__dict__, "trial_path": str(trial)})
    path = _exported(spec, best, experiment="e").write(tmp_path / "b.yaml")
    assert yaml.safe_load(path.read_text())["checkpoint"] == str((trial / "checkpoint_000010").resolve())
    assert export.load(path).fixed["lr"] == 0.00123  # the new key does not trouble the loader


@pytest.mark.parametrize(("mode", "member"), [("max", 2), ("min", 0)])
def test_a_population_trial_exports_its_best_seeds_own_config_which_trains_again(mode, member, tmp_path):
    """A bundle is one config: of a trial whose three seeds differed in lr and gamma (a population), the seed that
    scored best on the metric (NaN: no episode yet, never best), with its own values and its own seed."""
    spec = replace(load_spec("ppo_small", overrides=["seeds_per_trial=3"]), mode=mode)
    base = _best(spec)
    config = {**base.config, "seed": 5, "seeds_per_trial": 3, "seed_aggregate": "iqm",
              "population.lr": [1e-3, 2e-3, 3e-3], "population": {"gamma": [0.9, 0.95, 0.99]}}
    result = {**base.last_result, "seed_0/episode_return_mean": 100.0, "seed_1/episode_return_mean": float("nan"),
              "seed_2/episode_return_mean": 300.0}
    best = replace(base, config=config, last_result=result, mode=mode)
    path = _exported(spec, best, experiment="e").write(tmp_path / "b.yaml")
    raw = yaml.safe_load(path.read_text())
    assert raw["description"].endswith(f"its population's seed {member}")
    assert (raw["config"]["lr"], raw["config"]["gamma"]) == (config["population.lr"][member],
                                                             config["population"]["gamma"][member])
    assert raw["config"]["seed"] == 5 + 1_000_000 * member and raw["seeds"]["search"] == raw["config"]["seed"]
    assert not any(key.startswith("population") for key in {**raw["config"], **raw["resolved"]})
    again = export.load(path)
    assert again.seeds_per_trial == 1 and again.fixed["gamma"] == config["population"]["gamma"][member]


def test_the_summary_names_a_population_trials_best_seed_and_its_values():
    from tune_runner.tuning.console import config_line

    spec = load_spec("ppo_small", overrides=["seeds_per_trial=2"])
    base = _best(spec)
    config = {**base.config, "seeds_per_trial": 2, "population": {"lambda": [0.9, 0.8], "gamma": [0.99, 0.95]}}
    result = {**base.last_result, "seed_0/episode_return_mean": 200.0, "seed_1/episode_return_mean": 250.0}
    line = config_line(spec, replace(base, config=config, last_result=result))
    assert line.endswith("num_epochs=7 minibatch_size=256 gamma=0.99 lambda_=0.95; its population's best seed 1: "
                         "lambda_=0.8 gamma=0.95"), line
    assert config_line(spec, base) == "lr=1.23e-03 num_epochs=7 minibatch_size=256 gamma=0.99 lambda_=0.95"


def test_load_applies_overrides(tmp_path):
    spec = load_spec("ppo_small")
    path = _exported(spec, _best(spec), experiment="e").write(tmp_path / "b.yaml")
    assert export.load(path, overrides={"lr": 0.5}).fixed["lr"] == 0.5


def test_no_tmp_file_left_behind(tmp_path):
    spec = load_spec("ppo_small")
    _exported(spec, _best(spec), experiment="e").write(tmp_path / "b.yaml")
    assert [p.name for p in tmp_path.iterdir()] == ["b.yaml"]


def test_scopes():
    import pandas as pd

    frame = pd.DataFrame({"r": [1.0, 5.0, 3.0, 2.0]})
    assert score(frame, metric="r", mode="max", scope="last") == 2.0
    assert score(frame, metric="r", mode="max", scope="max") == 5.0
    assert score(frame, metric="r", mode="min", scope="max") == 1.0  # "max" = best over all, min for mode min
    assert score(frame, metric="r", mode="max", scope="avg-last-2") == 2.5
    assert parse_scope("avg-last-10") == 10
    with pytest.raises(UserError):
        parse_scope("avg-last-0")


@pytest.mark.parametrize("key, value, message", [
    ("budget", {"env_steps": "1e5"}, "budget.env_steps: expected a positive whole number of env steps, got '1e5'"),
    ("stop_at", "high", "stop_at: expected a number, got 'high'"),
])
def test_bad_export_values_get_the_space_files_messages(tmp_path, key, value, message):
    spec = load_spec("ppo_small")
    data = replace(_exported(spec, _best(spec), experiment="e"), **{key: value})
    path = data.write(tmp_path / "b.yaml")
    with pytest.raises(UserError, match=message):
        export.load(path)
