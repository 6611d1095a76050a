"""Schedulers from presets, fed synthetic results in milliseconds (no Ray cluster, no training)."""

from __future__ import annotations

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from tune_runner.errors import UserError
from tune_runner.schedulers import budget_share, build_scheduler, presets
from tune_runner.spec import Component


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
