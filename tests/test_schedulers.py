"""Schedulers from presets, fed synthetic results in milliseconds (no Ray cluster, no training)."""

from __future__ import annotations

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from tune_runner.errors import UserError
from tune_runner.spec.experiment import Component
from tune_runner.tuning.schedulers import budget_share, build_scheduler, presets


def test_shipped_presets_build_and_count_env_steps():
    assert {"asha", "fifo"} <= set(presets())
    asha = build_scheduler(Component("asha"), budget=10_000, where="t")
    assert asha._time_attr == "env_steps" and asha._max_t == 10_000
    # grace_period "20%" of the budget -> the first rung at 2,000 env steps
    assert min(rung for bracket in asha._brackets for rung, _ in bracket._rungs) == 2_000


def test_inline_settings_override_the_preset():
    asha = build_scheduler(Component("asha", {"reduction_factor": 3, "grace_period": 500}), budget=9_000, where="t")
    assert asha._reduction_factor == 3
    assert min(rung for bracket in asha._brackets for rung, _ in bracket._rungs) == 500


def test_budget_share():
    assert budget_share("25%", budget=1000, where="w") == 250
    assert budget_share(300, budget=1000, where="w") == 300
    for bad in ("0%", "101%", "x%", -1, True, "ten"):
        with pytest.raises(UserError):
            budget_share(bad, budget=1000, where="w")


def _trial(i: int) -> Trial:
    return Trial("x", config={}, trial_id=f"t{i}", stub=True)


def test_asha_stops_a_worse_trial_at_the_first_rung():
    asha = build_scheduler(Component("asha"), budget=1000, where="t")
    asha.set_search_properties("episode_return_mean", "max")
    good, bad = _trial(0), _trial(1)
    for trial in (good, bad):
        asha.on_trial_add(None, trial)
    # Both reach the first rung (200 env steps); the worse one must stop, the better continue.
    assert asha.on_trial_result(None, good, {"env_steps": 200, "episode_return_mean": 80.0}) == TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, bad, {"env_steps": 200, "episode_return_mean": 20.0}) == TrialScheduler.STOP
    assert asha.on_trial_result(None, good, {"env_steps": 300, "episode_return_mean": 90.0}) == TrialScheduler.CONTINUE


def test_every_type_has_a_preset_and_every_preset_builds():
    from tune_runner.spec.search_space import parse_space
    from tune_runner.tuning.schedulers import SCHEDULERS

    space = parse_space({"lr": {"loguniform": [1e-4, 1e-2]}, "act": {"choice": ["tanh", "relu"]}}, where="t")
    pb2_space = space[:1]
    assert set(presets()) == set(SCHEDULERS)
    for name in presets():
        scheduler = build_scheduler(Component(name), budget=10_000, where="t",
                                    space=pb2_space if name == "pb2" else space)
        if name != "fifo":
            assert getattr(scheduler, "counts_in", scheduler._time_attr) == "env_steps", name


def test_median_stops_a_trial_below_the_median_after_the_grace_period():
    median = build_scheduler(Component("median"), budget=1000, where="t")  # grace 20% = 200 env steps
    median.set_search_properties("episode_return_mean", "max")
    trials = [_trial(i) for i in range(4)]

    class Controller:  # the one thing the rule asks of Tune's controller: is anyone waiting to run?
        def get_live_trials(self):
            return trials

    for trial in trials:
        trial.set_status(Trial.RUNNING)
        median.on_trial_add(Controller(), trial)
    for steps in (100, 200, 300):
        for trial, level in zip(trials[:3], (100.0, 110.0, 120.0), strict=True):
            action = median.on_trial_result(Controller(), trial, {"env_steps": steps, "episode_return_mean": level})
            assert action == TrialScheduler.CONTINUE
    bad = trials[3]
    # inside the grace period even a bad trial continues; after it, below the median, it stops
    assert median.on_trial_result(Controller(), bad, {"env_steps": 100, "episode_return_mean": 5.0}) \
        == TrialScheduler.CONTINUE
    assert median.on_trial_result(Controller(), bad, {"env_steps": 300, "episode_return_mean": 6.0}) \
        == TrialScheduler.STOP
    assert median.on_trial_result(Controller(), trials[2], {"env_steps": 400, "episode_return_mean": 130.0}) \
        == TrialScheduler.CONTINUE


def test_time_attr_may_count_iterations_with_settings_in_its_own_units():
    asha = build_scheduler(Component("asha", {"time_attr": "training_iteration", "grace_period": 3}),
                           budget=10_000, where="t", time_attrs=("env_steps", "training_iteration"))
    assert asha._time_attr == "training_iteration"
    # max_t falls back to Ray's default instead of a budget in env steps read as iterations
    assert min(rung for bracket in asha._brackets for rung, _ in bracket._rungs) == 3


def test_pbt_mutations_come_from_the_space_and_explore_stays_inside_bounds():
    from ray.tune.search.sample import Domain

    from tune_runner.spec.search_space import parse_space
    from tune_runner.tuning.schedulers import Explore

    space = parse_space({"lr": {"loguniform": [1e-4, 1e-2]}, "epochs": {"randint": [2, 8]},
                         "clip": {"quniform": [0.1, 0.3, 0.05]}, "act": {"choice": ["tanh", "relu", "elu"]}},
                        where="t")
    pbt = build_scheduler(Component("pbt", {"hyperparam_mutations": {"epochs": False}}), budget=10_000,
                          where="t", space=space, seed=3)
    assert pbt._perturbation_interval == 1_000  # 10% of the budget, in env steps
    assert set(pbt._hyperparam_mutations) == {"lr", "clip"}  # epochs left out; a choice is resampled by explore
    assert all(isinstance(d, Domain) for d in pbt._hyperparam_mutations.values())
    explore = pbt._custom_explore_fn
    assert isinstance(explore, Explore) and set(explore.params) == {"lr", "clip", "act"}
    seen = set()
    for value in (1e-6, 5e-3, 1.0):  # PBT's x0.8 / x1.2 can step outside the range
        config = explore({"lr": value, "clip": value, "act": "tanh", "epochs": 99})
        assert 1e-4 <= config["lr"] <= 1e-2 and 0.1 <= config["clip"] <= 0.3
        assert round(config["clip"] / 0.05, 6).is_integer() and config["epochs"] == 99
        seen.add(config["act"])
    for _ in range(30):
        seen.add(explore({"lr": 1e-3, "clip": 0.2, "act": "tanh"})["act"])
    assert seen == {"tanh", "relu", "elu"}


def test_pb2_bounds_come_from_the_space_with_per_parameter_overrides():
    from tune_runner.spec.search_space import parse_space

    space = parse_space({"lr": {"loguniform": [1e-4, 1e-2]}, "epochs": {"randint": [2, 8]}}, where="t")
    pb2 = build_scheduler(Component("pb2", {"hyperparam_bounds": {"epochs": [3, 6]}}), budget=5_000,
                          where="t", space=space)
    assert pb2._hyperparam_bounds == {"lr": [1e-4, 1e-2], "epochs": [3, 6]}
    assert pb2._custom_explore_fn({"lr": 1.0, "epochs": 5.7}) == {"lr": 1e-2, "epochs": 6}


def test_hyperband_counts_env_steps_in_units_of_min_t():
    hyperband = build_scheduler(Component("hyperband"), budget=9_000, where="t")
    assert hyperband.counts_in == "env_steps" and hyperband.unit_steps == 990  # the preset's min_t: 11%
    assert hyperband._max_t_attr == 9  # 3 brackets at reduction factor 3, not log3(9000) = 8
    assert hyperband._scaled({"env_steps": 4_950, "x": 1})["tune_rl_time_units"] == 5.0
