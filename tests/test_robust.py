"""The robust-best statistics on fixed numbers, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from tune_runner.robust import Candidate, Evaluated, bootstrap_ci, iqm, overlap, plan, rank


def test_iqm_drops_a_quarter_at_each_end():
    assert iqm([4.0]) == 4.0
    assert iqm([1, 2, 3]) == 2.0                     # n=3: floor(3/4)=0 cut, plain mean
    assert iqm([1, 2, 3, 10]) == 2.5                 # n=4: drop 1 and 10 -> (2+3)/2
    assert iqm([100, 1, 2, 3, -50]) == 2.0           # n=5: drop -50 and 100 -> (1+2+3)/3
    assert iqm([0, 0, 10, 10, 10, 10, 0, 1000]) == pytest.approx((0 + 0 + 10 + 10) / 4 + 2.5)
    assert math.isnan(iqm([]))


def test_bootstrap_ci_with_a_fixed_seed_matches_a_hand_computation():
    # default_rng(0).integers(0, 4, (3, 4)) draws rows [3,2,2,1], [1,0,0,0], [0,3,2,3]:
    #   [10,3,3,2] -> IQM (3+3)/2 = 3;  [2,1,1,1] -> (1+1)/2 = 1;  [1,10,3,10] -> (3+10)/2 = 6.5
    # 50% interval = the 25% and 75% quantiles of [1, 3, 6.5] (linear): 2.0 and 4.75
    assert bootstrap_ci([1, 2, 3, 10], resamples=3, confidence=0.5, seed=0) == (2.0, 4.75)
    assert bootstrap_ci([7.0] * 5) == (7.0, 7.0)
    low, high = bootstrap_ci([400, 410, 420, 430, 440])
    assert 400 <= low < iqm([400, 410, 420, 430, 440]) < high <= 440
    assert bootstrap_ci([1, 2, 3, 10], seed=1) == bootstrap_ci([1, 2, 3, 10], seed=1)


def test_overlap_rule():
    assert overlap((1, 3), (2, 4)) and overlap((2, 4), (1, 3))
    assert overlap((1, 3), (3, 5))                  # touching counts as overlapping
    assert not overlap((1, 2), (2.5, 4)) and not overlap((2.5, 4), (1, 2))


def _ev(name: str, value: float, ci: tuple[float, float]) -> Evaluated:
    return Evaluated(Candidate(name, {}, 0.0), (1000, 1001), (value, value), value, ci)


def test_rank_orders_by_iqm_and_calls_a_clear_winner_only_without_overlap():
    verdict = rank([_ev("b", 400, (380, 420)), _ev("a", 480, (470, 490))], mode="max")
    assert [e.candidate.trial_id for e in verdict.ranked] == ["a", "b"] and verdict.clear
    assert "clear winner" in verdict.sentence()
    close = rank([_ev("b", 470, (440, 480)), _ev("a", 480, (470, 490))], mode="max")
    assert close.winner.candidate.trial_id == "a" and not close.clear
    assert "no clear winner" in close.sentence()
    assert rank([_ev("b", 1.0, (0.5, 1.5)), _ev("a", 3.0, (2.5, 3.5))], mode="min").winner.candidate.trial_id == "b"
    assert rank([_ev("n", math.nan, (math.nan, math.nan)), _ev("a", 3.0, (2, 4))], mode="max").winner.candidate \
        .trial_id == "a"


def test_the_automatic_stage_costs_at_most_the_searchs_own_trial_count():
    assert plan(8, top=None, seeds=None) == (2, 3)
    assert plan(5, top=None, seeds=None) == (2, 2)
    assert plan(3, top=None, seeds=None) is None
    assert plan(3, top=4, seeds=5) == (4, 5)        # asked for explicitly: no cap
