"""The robust-best statistics on fixed numbers, against values computed by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from tune_runner.errors import UserError
from tune_runner.results.analysis import best_trial, ranked
from tune_runner.results.bundle import Bundle
from tune_runner.results.robust import (
    Candidate,
    Evaluated,
    SeedRun,
    Target,
    Verdict,
    bootstrap_ci,
    candidates,
    describe,
    fmt_steps,
    headline,
    iqm,
    overlap,
    plan,
    policy_trial,
    rank,
    scope,
    summarise,
    target_of,
)
from tune_runner.spec.experiment import load_spec
from tune_runner.tuning import verify
from tune_runner.tuning.reevaluate import CANDIDATE_KEY, _seed_runs


def test_iqm_is_the_mean_of_the_middle_half_and_the_one_a_trials_seeds_are_judged_by():
    from tune_runner.algos.seeds import aggregate

    assert iqm([4.0]) == 4.0
    assert iqm([1, 2, 3]) == 2.0 and iqm([1, 2, 6]) == pytest.approx((1 + 4 * 2 + 6) / 6)  # n=3: (a + 4b + c) / 6
    assert iqm([1, 2, 3, 10]) == 2.5                 # n=4: drop 1 and 10 -> (2+3)/2
    assert iqm([100, 1, 2, 3, -50]) == pytest.approx((3 * 1 + 4 * 2 + 3 * 3) / 10)  # n=5: (3b + 4c + 3d) / 10
    seeds = [-156.2, -183.5, -164.6]  # a re-evaluation's three seeds, once printed as IQM -166.4 and -168.1
    assert iqm(seeds) == pytest.approx(aggregate(seeds, "iqm")) == pytest.approx(-166.35)
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


@pytest.mark.parametrize("target", [None, Target(475.0, 250_000)], ids=["metric", "stop_at"])
def test_a_candidate_with_no_finished_seed_is_never_a_clear_winner_or_loser(target):
    """Every re-evaluation trial of a config failed (curriculum.yaml's did, on 2 seeds): its NaN interval
    overlaps nothing, which read as a clear winner. Now: no verdict, and the search's best stands."""
    failed = [summarise(Candidate(name, {}, 1.0), [], target=target) for name in ("a", "b")]
    verdict = rank(failed, mode="max", target=target)
    assert not verdict.clear and not verdict.decided
    assert verdict.sentence().startswith("no verdict: no re-evaluation seed finished")
    finished = summarise(Candidate("c", {}, 1.0), _runs((478.0, 90_000), (479.0, 95_000)), target=target)
    one_failed = rank([failed[0], finished], mode="max", target=target)
    assert one_failed.winner.candidate.trial_id == "c" and one_failed.decided and not one_failed.clear
    assert one_failed.sentence().startswith("no verdict between #1 and #2")
    assert rank([failed[0]], mode="max", target=target).clear is False


def test_the_automatic_stage_costs_at_most_the_searchs_own_trial_count():
    assert plan(8, top=None, seeds=None) == (2, 3)
    assert plan(5, top=None, seeds=None) == (2, 2)
    assert plan(3, top=None, seeds=None) is None
    assert plan(3, top=4, seeds=5) == (4, 5)        # asked for explicitly: no cap


# --- with stop_at: solved share first, then the IQM of env steps to solve (an unsolved seed at the budget) ---

TARGET = Target(475.0, 250_000)


def _runs(*outcomes: tuple[float, int | None]) -> list[SeedRun]:
    """Seeds 1000, 1001, ... with (final return, env steps when it reached 475 or None)."""
    return [SeedRun(1000 + i, final, steps) for i, (final, steps) in enumerate(outcomes)]


def _solved(name: str, *steps: int | None, final: float = 478.0, search_steps: int | None = None) -> Evaluated:
    runs = _runs(*[(final if s is not None else 431.0, s) for s in steps])
    return summarise(Candidate(name, {}, 478.0, search_steps), runs, target=TARGET)


def test_fmt_steps_keeps_three_significant_digits():
    assert [fmt_steps(s) for s in (96_000, 96_256, 146_000, 999_999, 1_250_000, 640, 0)] == \
        ["96k", "96.3k", "146k", "1M", "1.25M", "640", "0"]
    assert fmt_steps(math.nan) == "n/a"


def test_an_unsolved_seed_counts_at_the_budget():
    ev = _solved("b", 50_000, 50_000, None)
    assert ev.solved == (True, True, False) and ev.steps == (50_000, 50_000, 250_000)
    # The IQM of three sorted values a <= b <= c is (a + 4b + c) / 6 (tune_runner.algos.seeds.iqm)
    assert ev.steps_iqm == pytest.approx((50_000 + 4 * 50_000 + 250_000) / 6) and ev.share == pytest.approx(2 / 3)
    assert ev.returns == (478.0, 478.0, 431.0) and ev.iqm == pytest.approx((431 + 4 * 478 + 478) / 6)
    # Resampling three seeds draws all three at 50k (or all at 250k) 1 time in 27 (3.7% > 2.5%): the 95% CI
    # reaches exactly from the fastest seed to the budget.
    assert ev.steps_ci == pytest.approx((50_000.0, 250_000.0))
    assert ev.steps_ci == bootstrap_ci([50_000, 50_000, 250_000])
    plain = summarise(Candidate("p", {}, 1.0), _runs((478.0, 60_000)), target=None)
    assert plain.solved == () and plain.steps == () and math.isnan(plain.steps_iqm)


def test_rank_by_solved_share_then_by_steps_to_solve():
    slow_sure = _solved("slow-sure", 200_000, 200_000, 200_000)
    fast_sure = _solved("fast-sure", 96_000, 96_000, 96_000, final=476.0)
    fast_flaky = _solved("fast-flaky", 50_000, 50_000, None)  # the lowest steps IQM (117k)
    verdict = rank([fast_flaky, slow_sure, fast_sure], mode="max", target=TARGET)
    assert [e.candidate.trial_id for e in verdict.ranked] == ["fast-sure", "slow-sure", "fast-flaky"]
    assert verdict.target == TARGET and verdict.clear
    assert verdict.sentence() == "clear winner: its CI of env steps to 475 lies below the runner-up's"
    # mode min flips only the final-metric tie-break: solving is still solving
    assert rank([fast_flaky, slow_sure], mode="min", target=TARGET).winner.candidate.trial_id == "slow-sure"
    # without stop_at the final metric's IQM ranks, as before: 478 beats 476
    assert rank([fast_sure, slow_sure], mode="max").winner.candidate.trial_id == "slow-sure"


def test_a_higher_share_alone_is_no_clear_winner():
    verdict = rank([_solved("flaky", 50_000, 50_000, None), _solved("sure", 200_000, 200_000, 200_000)],
                   mode="max", target=TARGET)
    assert verdict.winner.candidate.trial_id == "sure" and not verdict.clear
    assert verdict.sentence() == ("no clear winner: #1 solved more seeds (3/3 vs 2/3) but the CIs of env steps to 475 "
                                  "of #1 and #2 overlap; more seeds would tell them apart")
    sooner = rank([_solved("flaky", *[50_000] * 7, None), _solved("sure", *[240_000] * 8)], mode="max", target=TARGET)
    assert sooner.winner.candidate.trial_id == "sure" and not sooner.clear
    assert sooner.ranked[1].steps_ci[1] < 240_000
    assert sooner.sentence() == ("no clear winner: #1 solved more seeds (8/8 vs 7/8) but #2 reached 475 sooner (its CI "
                                 "of env steps to 475 lies below #1's); more seeds would tell them apart")
    same = rank([_solved("a", 90_000, 100_000, 110_000), _solved("b", 95_000, 105_000, 115_000)], mode="max",
                target=TARGET)
    assert same.winner.candidate.trial_id == "a" and not same.clear
    assert same.sentence().startswith("no clear winner: the CIs of env steps to 475 of #1 and #2 overlap")


def test_when_no_seed_solved_the_final_metric_ranks_and_judges():
    low = summarise(Candidate("low", {}, 1.0), _runs((300.0, None), (301.0, None), (302.0, None)), target=TARGET)
    high = summarise(Candidate("high", {}, 1.0), _runs((400.0, None), (401.0, None), (402.0, None)), target=TARGET)
    verdict = rank([low, high], mode="max", target=TARGET)
    assert verdict.winner.candidate.trial_id == "high" and verdict.clear
    # not "IQM 250k env steps to 475": none got there (printed so once, on MountainCarContinuous)
    assert headline(verdict.winner, TARGET) == "solved 0/3 seeds within 250k env steps, final IQM 401.0 [95% CI " \
                                               f"{verdict.winner.ci[0]:.1f}, {verdict.winner.ci[1]:.1f}]"
    assert verdict.sentence().startswith("no seed of #1 or #2 reached 475, so the final value's IQM ranks them; "
                                         "clear winner")


def test_the_summary_lines_say_solved_share_and_steps():
    verdict = rank([_solved("flaky", 96_000, 100_000, None), _solved("sure", 96_000, 96_000, 96_000,
                                                                     search_steps=120_000)],
                   mode="max", target=TARGET)
    assert describe(verdict, metric="episode_return_mean") == [
        "#1 sure  solved 3/3 seeds, IQM 96k env steps to 475 [95% CI 96k, 96k]  over seeds 1000-1002  "
        "(search: solved at 120k env steps)",
        "#2 flaky  solved 2/3 seeds, IQM 124k env steps to 475 [95% CI 96k, 250k]  over seeds 1000-1002  "
        "(search: episode_return_mean 478.0, unsolved)",
        "no clear winner: #1 solved more seeds (3/3 vs 2/3) but the CIs of env steps to 475 of #1 and #2 overlap; "
        "more seeds would tell them apart"]
    assert headline(verdict.winner, TARGET) == "solved 3/3 seeds, IQM 96k env steps to 475 [95% CI 96k, 96k]"
    assert scope(verdict) == "reevaluated: solved 3/3 seeds, IQM 96k env steps to 475 [95% CI 96k, 96k]"


class _Result:
    """What reevaluate reads of one of Tune's results: its config and last metrics."""

    def __init__(self, candidate: int, seed: int, **metrics: float) -> None:
        self.config, self.metrics = {CANDIDATE_KEY: candidate, "seed": seed}, metrics
        self.path = f"/exp/reevaluation/trial_{candidate}_{seed}"


def test_seed_runs_take_the_env_steps_where_the_last_result_reached_stop_at():
    spec = load_spec("ppo_small")  # stop_at 475, mode max
    grid = [_Result(0, 1000, episode_return_mean=480.0, env_steps=96_256),
            _Result(0, 1001, episode_return_mean=474.9, env_steps=250_880),
            _Result(1, 1000, episode_return_mean=math.nan, env_steps=100)]  # reported nothing finite: left out
    runs = _seed_runs(grid, spec, count=2)
    assert runs == {0: [SeedRun(1000, 480.0, 96_256, "/exp/reevaluation/trial_0_1000"),
                        SeedRun(1001, 474.9, None, "/exp/reevaluation/trial_0_1001")], 1: []}
    low = spec.with_overrides(mode="min", stop_at=10.0)  # a loss: reaching means at or below
    assert _seed_runs([_Result(0, 1000, episode_return_mean=9.5, env_steps=3_000),
                       _Result(0, 1001, episode_return_mean=10.5, env_steps=9_000)], low, count=1) == \
        {0: [SeedRun(1000, 9.5, 3_000, "/exp/reevaluation/trial_0_1000"),
             SeedRun(1001, 10.5, None, "/exp/reevaluation/trial_0_1001")]}
    assert target_of(spec) == Target(475.0, 250_000) and target_of(spec.with_overrides(stop_at=None)) is None


class _Trial:
    """What ranking reads of a search trial: id, config, last result (and, for a Best, its frame and path)."""

    def __init__(self, trial_id: str, value: float, env_steps: int) -> None:
        self.trial_id, self.config, self.path, self.status = trial_id, {"lr": 0.01, "env": "CartPole-v1"}, "/x", \
            "TERMINATED"
        self.last_result = {"episode_return_mean": value, "env_steps": env_steps}


class _Analysis:
    def __init__(self, trials: list[_Trial]) -> None:
        import pandas as pd

        self.trials = trials
        self.trial_dataframes = {t.trial_id: pd.DataFrame([t.last_result]) for t in trials}

    def get_best_trial(self, **_: object) -> None:
        raise AssertionError("a search in which trials solved is not ranked by the last value")


SEARCH = [_Trial("late", 482.0, 146_000), _Trial("unsolved", 474.0, 250_000), _Trial("soon", 476.0, 96_000),
          _Trial("cut", 300.0, 75_000), _Trial("nan", math.nan, 1_000)]


def test_search_candidates_with_stop_at_are_those_that_solved_soonest():
    spec = load_spec("ppo_small")
    picks = candidates(_Analysis(SEARCH), metric=spec.metric, mode="max", k=3, reached=spec.reached)
    assert [(c.trial_id, c.search_steps) for c in picks] == [("soon", 96_000), ("late", 146_000), ("unsolved", None)]
    assert picks[0].config == {"lr": 0.01} and picks[0].search_score == 476.0
    by_value = candidates(_Analysis(SEARCH), metric=spec.metric, mode="max", k=2)
    assert [c.trial_id for c in by_value] == ["late", "soon"]  # no stop_at: the last value, as before
    assert [t.trial_id for t in ranked(SEARCH, metric=spec.metric, mode="min")] == ["cut", "unsolved", "soon", "late"]


def test_a_population_trial_is_re_evaluated_as_its_best_seeds_own_config():
    """Its seeds were three configs (PPOConfig.population): the candidate is the best seed's, which the
    re-evaluation can train on any number of fresh seeds (the population's lists fit three only)."""
    trial = _Trial("pop", 300.0, 50_000)
    trial.config = {"env": "CartPole-v1", "seed": 0, "seeds_per_trial": 3, "population.lr": [1e-3, 3e-3, 2e-3],
                    "gamma": 0.99}
    trial.last_result.update({"seed_0/episode_return_mean": 250.0, "seed_1/episode_return_mean": 350.0,
                              "seed_2/episode_return_mean": 300.0})
    (pick,) = candidates(_Analysis([trial]), metric="episode_return_mean", mode="max", k=1)
    assert pick.config == {"seed": 1_000_000, "lr": 3e-3, "gamma": 0.99}


def test_the_best_trial_of_a_search_with_stop_at_is_the_one_that_solved_soonest():
    from tune_runner.tuning.console import best_line

    spec = load_spec("ppo_small")
    best = best_trial(_Analysis(SEARCH), metric=spec.metric, mode="max", reached=spec.reached)
    assert best.trial_id == "soon" and best.value == 476.0
    assert best.scope == "solved soonest: 2 of 5 trials reached stop_at"
    assert best_line(spec, best, None) == ("episode_return_mean 476 at 96,000 env steps (solved soonest: 2 of 5 "
                                           "trials reached stop_at 475)")


def _bundle(tmp_path, verdict, *, stop_at: float | None = 475.0) -> dict:
    from tune_runner.results import export
    from tune_runner.results.analysis import Best
    from tune_runner.trainables.catalog import backend

    spec = load_spec("ppo_small").with_overrides(stop_at=stop_at)
    best = Best(trial_id="sure", config={"env": spec.env, **spec.fixed, "lr": 0.004}, value=478.0,
                metric=spec.metric, mode="max", scope=scope(verdict), last_result={"episode_return_mean": 478.0},
                trial_path="/x")
    data = export.bundle(spec, best, record=backend(spec.trainable), experiment="e", verdict=verdict)
    path = data.write(tmp_path / "best.yaml")
    return yaml.safe_load(path.read_text())


def _read(raw: dict) -> Bundle:
    """A bundle's mapping as Bundle.read gives it, from a file named best.yaml."""
    return Bundle(**raw, keys=tuple(raw), path=Path("best.yaml"))


def _sure_verdict() -> Verdict:
    return rank([_solved("flaky", 96_000, 100_000, None), _solved("sure", 90_000, 96_000, 110_000)], mode="max",
                target=TARGET)


def test_the_bundle_says_how_the_winner_was_ranked_and_what_verify_checks(tmp_path):
    raw = _bundle(tmp_path, _sure_verdict())
    evaluation = raw["evaluation"]
    assert evaluation["ranked_by"] == ("the share of seeds that reached episode_return_mean >= 475, then the IQM of "
                                       "env steps to reach it (a seed that did not counts at the budget, 250,000)")
    assert evaluation["summary"] == headline(_sure_verdict().winner, TARGET)
    assert evaluation["summary"].startswith("solved 3/3 seeds, IQM 97.3k env steps to 475 [95% CI ")
    assert evaluation["solved"] == [True, True, True] and evaluation["steps"] == [90_000, 96_000, 110_000]
    assert evaluation["steps_iqm"] == pytest.approx((90_000 + 4 * 96_000 + 110_000) / 6) and \
        len(evaluation["steps_ci"]) == 2
    assert [(r["trial_id"], r["solved"], r["seeds"]) for r in evaluation["ranking"]] == [("sure", 3, 3),
                                                                                        ("flaky", 2, 3)]
    assert {"iqm", "ci", "returns", "clear_winner", "verdict"} <= set(evaluation)  # the final metric's, as before
    assert raw["result"]["scope"].startswith("reevaluated: solved 3/3 seeds")
    plain = _bundle(tmp_path, rank([_ev("a", 480, (470, 490)), _ev("b", 400, (380, 420))], mode="max"), stop_at=None)
    assert "steps_ci" not in plain["evaluation"] and plain["evaluation"]["ranked_by"] == \
        "the IQM of the final episode_return_mean"


def test_verify_judges_a_stop_at_bundle_by_solved_share_and_steps(tmp_path):
    said = verify.claim(_read(_bundle(tmp_path, _sure_verdict())))
    low, high = said.ci
    assert said.solved == (3, 3) and said.stop_at == 475.0 and low <= 98_700 <= high
    holds, line = verify.judge(said, _solved("again", 92_000, 99_000, 104_000))
    assert holds and line == (f"solved 3/3 seeds, IQM 98.7k env steps to 475 [95% CI "
                              f"{fmt_steps(bootstrap_ci([92_000, 99_000, 104_000])[0])}, "
                              f"{fmt_steps(bootstrap_ci([92_000, 99_000, 104_000])[1])}] over seeds 1000-1002 "
                              f"(env steps 92k, 99k, 104k); the bundle's: solved 3/3 seeds, IQM 97.3k env steps to "
                              f"475 [95% CI {fmt_steps(low)}, {fmt_steps(high)}]: as large a share solved and the IQM "
                              f"inside the CI, the config holds")
    fewer, line = verify.judge(said, _solved("again", 92_000, 99_000, 104_000, None, 95_000))  # IQM inside, 4/5
    assert not fewer and "FEWER seeds solved (4/5 vs 3/3), the config does not reproduce" in line
    slow, line = verify.judge(said, _solved("again", 200_000, 210_000, 220_000))
    assert not slow and line.endswith("the IQM is OUTSIDE the CI, the config does not reproduce")


def test_verify_judges_a_bundle_from_before_the_steps_ranking_by_the_final_metric(tmp_path):
    old = _bundle(tmp_path, _sure_verdict())
    for key in ("ranked_by", "summary", "solved", "steps", "steps_iqm", "steps_ci"):
        del old["evaluation"][key]
    old["evaluation"]["ci"] = [470.0, 480.0]
    said = verify.claim(_read(old))
    assert said.solved is None and said.ci == (470.0, 480.0)
    again = summarise(Candidate("b", {}, 0.0), _runs((476.0, 90_000), (477.0, 95_000)), target=TARGET)
    assert verify.judge(said, again) == (True, "IQM 476.5 over seeds 1000-1001 (returns 476.0, 477.0); the bundle's "
                                               "CI is [470.0, 480.0]: inside, the config holds")
    worse = summarise(Candidate("b", {}, 0.0), _runs((431.0, None), (440.0, None)), target=TARGET)
    assert verify.judge(said, worse)[0] is False


def test_verify_refuses_a_bundle_without_a_claim_naming_the_key(tmp_path):
    raw = _bundle(tmp_path, _sure_verdict())
    raw["evaluation"]["steps_ci"] = [1]
    with pytest.raises(UserError, match=r"best.yaml: evaluation.steps_ci: expected \[low, high\] env steps"):
        verify.claim(_read(raw))
    raw["evaluation"] = {"protocol": "single run"}
    with pytest.raises(UserError, match="evaluation.ci: missing; verify needs a bundle exported after a re-eval"):
        verify.claim(_read(raw))


def test_the_reports_verdict_table_shows_solved_share_and_steps(tmp_path):
    import json

    from tune_runner.results.report import _verdict_table, save_verdict

    saved = json.loads(save_verdict(_sure_verdict(), tmp_path, metric="episode_return_mean").read_text())
    table = _verdict_table(saved)
    assert "<th>solved</th><th>IQM env steps to 475</th>" in table
    assert "<td>1</td><td>sure</td><td>3/3</td><td>97.3k</td>" in table and "<td>2/3</td>" in table
    assert "90k, 96k, 110k" in table and _sure_verdict().sentence() in table
    plain = json.loads(save_verdict(rank([_ev("a", 480, (470, 490))], mode="max"), tmp_path, metric="r").read_text())
    assert "<td>a</td><td>480.0</td><td>[470.0, 490.0]</td><td>480.0, 480.0</td>" in _verdict_table(plain)


def test_the_parent_run_gets_the_solved_share_and_steps_under_their_own_names():
    from tune_runner.tracking.parent import robust_metrics

    values = robust_metrics(_sure_verdict())
    winner = _sure_verdict().winner
    assert values == {"robust_iqm": winner.iqm, "robust_ci_low": winner.ci[0], "robust_ci_high": winner.ci[1],
                      "robust_solved_share": 1.0, "robust_solved_seeds": 3, "robust_seeds": 3,
                      "robust_steps_to_solve_iqm": pytest.approx((90_000 + 4 * 96_000 + 110_000) / 6),
                      "robust_steps_to_solve_ci_low": winner.steps_ci[0],
                      "robust_steps_to_solve_ci_high": winner.steps_ci[1]}
    assert set(robust_metrics(rank([_ev("a", 480, (470, 490))], mode="max"))) == {"robust_iqm", "robust_ci_low",
                                                                                  "robust_ci_high"}


def test_verify_refuses_a_broken_stop_at_bundle_in_one_line_before_training(tmp_path, cli, monkeypatch):
    from tune_runner.tuning import runner

    def no_ray(**_: object) -> None:
        raise AssertionError("verify started Ray before checking the bundle")

    monkeypatch.setattr(runner, "ensure_ray", no_ray)
    raw = _bundle(tmp_path, _sure_verdict())
    raw["evaluation"]["solved"] = "3/3"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = cli("verify", str(path))
    assert result.status == 2 and result.out == ""
    assert result.err.strip() == (f"tune-rl: {path}: evaluation.solved: expected a list of true/false per seed, got "
                                  f"'3/3'; export the bundle again")


def test_the_robust_best_is_refused_or_skipped_before_ray_starts(tmp_path, monkeypatch):
    import io

    from tune_runner.cluster import session as cluster
    from tune_runner.trainables.catalog import backend
    from tune_runner.tuning.reevaluate import reevaluate_best

    def no_ray(**_: object) -> None:
        raise AssertionError("Ray started for a re-evaluation that cannot run")

    monkeypatch.setattr(cluster, "ensure_ray", no_ray)
    spec = load_spec("ppo_small")
    # tune-rl best --reevaluate 3 on a search whose trials reported nothing finite
    with pytest.raises(UserError, match=r"^--reevaluate 3: no finished trial of exp reported episode_return_mean$"):
        reevaluate_best(spec, _Analysis([SEARCH[-1]]), tmp_path / "exp", record=backend("ppo"), top=3, seeds=None,
                        name="r", out=io.StringIO())
    # a search's automatic stage: 3 trials cannot pay for 2 configs x 2 seeds
    out = io.StringIO()
    assert reevaluate_best(spec.with_overrides(num_samples=3), _Analysis(SEARCH), tmp_path / "exp",
                           record=backend("ppo"), top=None, seeds=None, name="r", out=out) is None
    assert out.getvalue() == ("re-evaluation skipped: 3 trial(s) is too few for 2 configs x 3 seeds (tune-rl best "
                              "EXP --reevaluate K --seeds N runs it anyway)\n")


def test_the_exported_policy_is_the_winners_best_reevaluation_seeds():
    runs = [SeedRun(1000, -300.0, None, "/r/a"), SeedRun(1001, -180.0, 90_000, "/r/b"),
            SeedRun(1002, -220.0, 120_000, "/r/c")]
    evaluated = summarise(Candidate("t1", {}, 0.0), runs, target=None)
    assert evaluated.trial_paths == ("/r/a", "/r/b", "/r/c")
    assert policy_trial(evaluated, mode="max") == "/r/b"
    assert policy_trial(evaluated, mode="min") == "/r/a"  # a loss: the lowest final value
    assert policy_trial(summarise(Candidate("t1", {}, 0.0), [], target=None), mode="max") is None


def test_seeds_are_printed_as_a_range_only_when_they_run_one_by_one():
    from tune_runner.algos.seeds import derived_seeds
    from tune_runner.results.robust import seed_span

    assert seed_span([1000, 1001, 1002]) == "1000-1002"
    assert seed_span(derived_seeds(1000, 2)) == "1000, 1001000"  # a seed-batched re-evaluation's two seeds
    assert seed_span([7]) == "7" and seed_span([]) == "none finished"


def _seed_result(candidate: int, env_steps: int, *values: float) -> dict:
    """One result of a re-evaluation trial of len(values) seeds, each over a full window of episodes."""
    result: dict = {"config": {CANDIDATE_KEY: candidate}, "env_steps": env_steps, "episode_return_mean": min(values)}
    for i, value in enumerate(values):
        result.update({f"seed_{i}/episode_return_mean": value, f"seed_{i}/episodes": 150})
    return result


def test_the_last_re_evaluation_trial_stops_once_its_unsolved_seeds_cannot_change_the_verdict():
    from tune_runner.tuning.stopper import RankingStopper

    spec, no, yes = load_spec("ppo_small"), 300.0, 480.0  # stop_at 475 within 250k env steps
    stopper = RankingStopper(spec, count=2)
    assert not stopper("a", _seed_result(0, 60_000, yes, no, no))
    assert not stopper("b", _seed_result(1, 60_000, yes, no, no))
    assert not stopper("a", _seed_result(0, 80_000, yes, yes, no))
    assert not stopper("b", _seed_result(1, 120_000, yes, yes, no))  # a still runs: b could still win
    assert stopper("a", _seed_result(0, 100_000, yes, yes, yes))  # a solved all: (60k + 4 x 80k + 100k) / 6
    # b at best solves its third seed now: (60k + 4 x 120k + 120k) / 6 = 110k > 80k, and the CIs overlap either way
    assert stopper("b", _seed_result(1, 130_000, yes, yes, no))

    # the runner-up whose best case (its last seed solving now) would still win is not stopped
    close = RankingStopper(spec, count=2)
    assert not close("b", _seed_result(1, 50_000, yes, yes, no))
    assert close("a", _seed_result(0, 100_000, yes, yes, yes))  # a ends: its three seeds solved at 100k
    assert not close("b", _seed_result(1, 60_000, yes, yes, no))  # at best (50k, 50k, 60k): 51.7k beats 100k
    assert not close("b", _seed_result(1, 200_000, yes, yes, no))  # (50k, 50k, 200k): 75k still would

    # nor one whose winner would be clear in the worst case but not in the best: a (30k, 31k, 40k), CI up to 40k;
    # b unsolved at 35k could solve all now (CI from 35k: overlaps) or never (CI from 250k: clear)
    flip = RankingStopper(spec, count=2)
    for steps, values in ((30_000, (yes, no, no)), (31_000, (yes, yes, no)), (40_000, (yes, yes, yes))):
        flip("a", _seed_result(0, steps, *values))
    assert not flip("b", _seed_result(1, 35_000, no, no, no))
    assert flip("b", _seed_result(1, 45_000, no, no, no))  # past a's CI: clear at best and at worst

    # nor the winner, even when no outcome changes the verdict: its unsolved seed would count at the budget
    lead = RankingStopper(spec, count=2)
    assert lead("a", _seed_result(0, 250_000, *[no] * 6))
    assert not lead("b", _seed_result(1, 60_000, *[yes] * 5, no))  # worst: CI to 155k, clear of a's 250k
    assert lead._verdict([lead.trials["a"]], lead.trials["b"], best=False) == ((1, 0), True)  # first, clear at worst

    # with two trials still running nothing is decided; a result without a candidate is EverySeedStopper's
    three = RankingStopper(spec, count=3)
    assert three("a", _seed_result(0, 40_000, yes, yes, yes))
    assert not three("b", _seed_result(1, 200_000, yes, no, no))
    assert not three("plain", {k: v for k, v in _seed_result(0, 200_000, yes, no, no).items() if k != "config"})


def test_a_stopped_runner_up_counts_at_the_budget_and_says_where_it_stopped(tmp_path):
    import json

    from tune_runner.results.report import _verdict_table, save_verdict

    stopped = summarise(Candidate("b", {}, 478.0), [SeedRun(1000, 480.0, 60_000), SeedRun(1001, 480.0, 120_000),
                                                    SeedRun(1002, 300.0, None, stopped_at=130_000)], target=TARGET)
    assert stopped.steps == (60_000, 120_000, 250_000) and stopped.stopped_at == 130_000
    verdict = rank([stopped, _solved("a", 60_000, 80_000, 100_000)], mode="max", target=TARGET)
    assert describe(verdict, metric="episode_return_mean")[1].endswith(
        "(search: episode_return_mean 478.0, unsolved); stopped at 130k env steps, where its unsolved seeds could no "
        "longer change the verdict (they count at the budget)")
    saved = json.loads(save_verdict(verdict, tmp_path, metric="episode_return_mean").read_text())
    assert saved["ranking"][1]["stopped_at"] == 130_000 and saved["ranking"][0]["stopped_at"] is None
    assert "60k, 120k, unsolved, stopped at 130k" in _verdict_table(saved)
    from tune_runner.results.robust import load_verdict

    assert load_verdict(saved, budget=250_000) == verdict


def test_batched_runs_mark_the_unsolved_seeds_of_a_trial_that_ended_before_the_budget_without_an_error():
    import pandas as pd

    from tune_runner.spec import reserved
    from tune_runner.tuning.reevaluate import _batched_runs

    class Trial:
        def __init__(self, candidate: int, rows: list[tuple[int, float, float]], error: Exception | None = None):
            self.config = {CANDIDATE_KEY: candidate, "seed": 1000, reserved.SEEDS_KEY: 2}
            self.error, self.path = error, f"/exp/trial_{candidate}"
            self.metrics_dataframe = pd.DataFrame(
                [{"env_steps": s, "seed_0/episode_return_mean": a, "seed_1/episode_return_mean": b,
                  "seed_0/episodes": 150, "seed_1/episodes": 150} for s, a, b in rows])

    spec = load_spec("ppo_small")
    stopped = Trial(0, [(60_000, 480.0, 300.0), (130_000, 480.0, 320.0)])
    failed = Trial(1, [(60_000, 480.0, 300.0)], error=RuntimeError("lost"))
    full = Trial(2, [(60_000, 480.0, 300.0), (250_000, 480.0, 320.0)])
    runs = _batched_runs([stopped, failed, full], spec, count=3)
    assert [(r.reached_at, r.stopped_at) for r in runs[0]] == [(60_000, None), (None, 130_000)]
    assert [(r.reached_at, r.stopped_at) for r in runs[1]] == [(60_000, None), (None, None)]
    assert [(r.reached_at, r.stopped_at) for r in runs[2]] == [(60_000, None), (None, None)]


def test_a_population_searchs_candidates_that_share_trial_level_values_become_members_of_one_trial():
    """Units: grouped by their trial-level values, as many to a trial as leaves every trial slot busy, at most
    the search trial's own member seeds; each unit's config whole (members' values in its member list only)."""
    from tune_runner.spec import reserved
    from tune_runner.spec.experiment import build_spec
    from tune_runner.trainables.catalog import backend
    from tune_runner.tuning.reevaluate import trial_configs, units

    spec = build_spec({"trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       reserved.MEMBERS_KEY: 4, "space": {"lr": {"loguniform": [1e-4, 1e-2]},
                                                          "num_epochs": {"randint": [1, 4]}}},
                      name="p", source="p.yaml")
    record = backend("ppo")
    picks = [Candidate(f"t-{i}", {"lr": 1e-3 * (i + 1), "num_epochs": epochs, "seed": i}, 1.0)
             for i, epochs in enumerate([2, 3, 2, 2])]
    assert units(spec, picks, record=record, seeds=2, at_once=1) == [[0, 2], [3], [1]]  # 4 x 1 seeds: 2 members
    assert units(spec, picks, record=record, seeds=1, at_once=1) == [[0, 2, 3], [1]]
    assert units(spec, picks, record=record, seeds=1, at_once=2) == [[0, 2], [3], [1]]  # ceil(4 / 2) a trial
    assert units(spec, picks, record=record, seeds=1, at_once=4) == [[0], [2], [3], [1]]  # a trial per core
    one = build_spec({"trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                      "space": {"lr": {"loguniform": [1e-4, 1e-2]}}}, name="o", source="o.yaml")
    assert units(one, picks, record=record, seeds=1, at_once=1) == [[0], [1], [2], [3]]  # not a population search

    configs = trial_configs(spec, picks, seeds=2, first_seed=1000, batched=True, units=[[0, 2], [1]],
                            member_keys=record.member_keys)
    pair, single = configs
    assert pair[CANDIDATE_KEY] == [0, 2] and pair[reserved.MEMBERS_KEY] == 2 and pair["num_epochs"] == 2
    assert "lr" not in pair and pair[reserved.MEMBER_LIST_KEY]["members"] == [
        {"id": "t-0", "values": {"lr": 1e-3}}, {"id": "t-2", "values": {"lr": 3e-3}}]
    assert pair[reserved.MEMBER_LIST_KEY]["per_seed"] and pair["seed"] == 1000 and pair[reserved.SEEDS_KEY] == 2
    assert single == {"env": "CartPole-v1", "env_config": {}, "lr": 2e-3, "num_epochs": 3, CANDIDATE_KEY: 1,
                      "seed": 1000, reserved.SEEDS_KEY: 2, reserved.AGGREGATE_KEY: "iqm"}


def test_batched_runs_read_each_member_of_a_population_trial_from_its_own_slots_seeds():
    import pandas as pd

    from tune_runner.algos.seeds import derived_seeds
    from tune_runner.spec import reserved
    from tune_runner.tuning.reevaluate import _batched_runs

    trial = type("Trial", (), {})()
    trial.config = {CANDIDATE_KEY: [2, 0], "seed": 1000, reserved.SEEDS_KEY: 2}
    trial.error, trial.path = None, "/exp/pop"
    trial.metrics_dataframe = pd.DataFrame(
        [{"env_steps": s, **{f"seed_{i}/episode_return_mean": v for i, v in enumerate(values)},
          **{f"seed_{i}/episodes": 150 for i in range(4)}} for s, values in
         [(60_000, [480.0, 300.0, 100.0, 476.0]), (250_000, [490.0, 320.0, 110.0, 470.0])]])
    runs = _batched_runs([trial], load_spec("ppo_small"), count=3)
    numbers = derived_seeds(1000, 4)
    assert [(r.seed, r.reached_at, r.final) for r in runs[2]] == [(numbers[0], 60_000, 480.0),
                                                                   (numbers[1], None, 320.0)]
    assert [(r.seed, r.reached_at, r.final) for r in runs[0]] == [(numbers[2], None, 110.0),
                                                                   (numbers[3], 60_000, 476.0)]
    assert runs[1] == [] and {r.trial_path for r in runs[0] + runs[2]} == {"/exp/pop"}
