"""A best config that holds up: re-train the top K configs on N fresh seeds and rank them.

RL returns are noisy; the trial that looks best after one seed is often lucky. After a
search (or with `tune-rl best EXP --reevaluate K --seeds N`) the top K configs are trained
again on N seeds that the search did not use, with the search's budget, as one small Tune
run of its own (tune_runner.tuning.reevaluate runs it; this module holds the statistics only).
Each config's final returns are summarised by their interquartile mean (IQM: the mean of the
middle half, `trimmed_mean(x, 0.25)`) with a percentile-bootstrap 95% confidence interval; the
config with the best IQM wins, and when its interval overlaps the runner-up's the output says
there is no clear winner.

With `stop_at`, every run that solves stops at about that value, so the final return tells
the configs apart no more: they are ranked by the share of seeds that reached `stop_at`,
then by the IQM of the env steps each seed took to reach it (a seed that did not counts at
the budget), with the same bootstrap CI of that IQM (`solved 3/3 seeds, IQM 96k env steps to
475 [95% CI 88k, 110k]`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tune_runner.spec.experiment import ExperimentSpec

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
DEFAULT_TOP, DEFAULT_SEEDS = 2, 3


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean of a trial's seed_aggregate (tune_runner.algos.seeds.iqm: the middle 50% of the
    mass, interpolated; for 3 values (a + 4b + c) / 6), NaN of none. A second definition here (floor(n/4) cut
    at each end: the plain mean of 3) printed two IQMs of the same three seeds, -166.4 and -168.1."""
    from tune_runner.algos.seeds import iqm as seeds_iqm

    values = [float(v) for v in values]
    return seeds_iqm(values) if values else math.nan


def bootstrap_ci(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the IQM: `resamples` draws of n values with replacement
    (numpy's default_rng(seed).integers), the IQM of each, then the (1-c)/2 and (1+c)/2 quantiles
    (numpy's linear interpolation)."""
    data = np.asarray(values, dtype=float)
    if len(data) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(data), size=(resamples, len(data)))
    from tune_runner.algos.seeds import iqm_weights

    stats = np.sort(data[picks], axis=1) @ iqm_weights(len(data))  # each resample's IQM
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def fmt_steps(steps: float) -> str:
    """Env steps in three significant digits: 96k, 146k, 1.25M, 640."""
    if not math.isfinite(steps):
        return "n/a"
    rounded = float(f"{steps:.3g}")  # round first: 999,999 is 1M, not 1e+03k
    for size, unit in ((1e6, "M"), (1e3, "k")):
        if abs(rounded) >= size:
            return f"{rounded / size:g}{unit}"
    return f"{rounded:g}"


@dataclass(frozen=True)
class Target:
    """A space's `stop_at` as the ranking reads it: reach `value` within `budget` env steps."""

    value: float
    budget: int

    @property
    def label(self) -> str:
        return f"{self.value:g}"


def target_of(spec: ExperimentSpec) -> Target | None:
    """The spec's Target, or None without `stop_at` (then the final metric's IQM ranks)."""
    return None if spec.stop_at is None else Target(float(spec.stop_at), spec.budget_env_steps)


@dataclass(frozen=True)
class Candidate:
    """A config from the search: its trial, its single-run score there and, with `stop_at`, the env
    steps at which that run reached it (None: it did not)."""

    trial_id: str
    config: dict
    search_score: float
    search_steps: int | None = None


@dataclass(frozen=True)
class SeedRun:
    """One re-evaluation run: its seed, the metric's last value, and the env steps at which it reached
    `stop_at` (None: it did not, or there is none)."""

    seed: int
    final: float
    reached_at: int | None = None
    trial_path: str | None = None
    """The re-evaluation trial folder it trained in (one per seed, or one for a trial of several seeds)."""
    stopped_at: int | None = None
    """Unsolved, and stopped at these env steps before the budget because nothing it could still do would change
    the verdict (tuning.stopper.RankingStopper); it counts at the budget, as a run that never solved."""


@dataclass(frozen=True)
class Evaluated:
    """A candidate's re-evaluation: its final returns per seed, their IQM and CI; with `stop_at`, also
    per seed whether it solved and its env steps to solve (the budget when it did not), their IQM and CI."""

    candidate: Candidate
    seeds: tuple[int, ...]
    returns: tuple[float, ...]
    iqm: float
    ci: tuple[float, float]
    solved: tuple[bool, ...] = ()
    steps: tuple[int, ...] = ()
    steps_iqm: float = math.nan
    steps_ci: tuple[float, float] = (math.nan, math.nan)
    trial_paths: tuple[str | None, ...] = ()
    """Each seed's re-evaluation trial folder, in `seeds` order."""
    stopped_at: int | None = None
    """Where its unsolved seeds were stopped, once they could no longer change the verdict (SeedRun.stopped_at)."""

    @property
    def share(self) -> float:
        """The share of its seeds that reached `stop_at` (0 with no seeds)."""
        return sum(self.solved) / len(self.solved) if self.solved else 0.0

    @property
    def solved_text(self) -> str:
        return f"{sum(self.solved)}/{len(self.solved)}"


def summarise(candidate: Candidate, runs: Sequence[SeedRun], *, target: Target | None) -> Evaluated:
    """A candidate's Evaluated from its runs; with a target, a seed that did not solve counts at the budget."""
    runs = sorted(runs, key=lambda r: r.seed)
    returns = tuple(r.final for r in runs)
    stopped = [r.stopped_at for r in runs if r.stopped_at is not None]
    evaluated = Evaluated(candidate, tuple(r.seed for r in runs), returns, iqm(returns), bootstrap_ci(returns),
                          trial_paths=tuple(r.trial_path for r in runs), stopped_at=max(stopped, default=None))
    if target is None:
        return evaluated
    steps = tuple(target.budget if r.reached_at is None else int(r.reached_at) for r in runs)
    return replace(evaluated, solved=tuple(r.reached_at is not None for r in runs), steps=steps,
                   steps_iqm=iqm(steps), steps_ci=bootstrap_ci(steps))


def policy_trial(evaluated: Evaluated, *, mode: str) -> str | None:
    """The re-evaluation trial folder whose policy stands for `evaluated`: its best seed's (a trial of several
    seeds holds them all, and a policy read from it is its best seed's: trainables.checkpoints.policy_seed)."""
    if not evaluated.trial_paths:
        return None
    pick = max if mode == "max" else min
    return evaluated.trial_paths[pick(range(len(evaluated.returns)), key=lambda i: evaluated.returns[i])]


def load_verdict(data: Any, *, budget: int) -> Verdict | None:
    """A verdict as results.report.save_verdict saved it (reevaluation.json), or None when it ranks nothing;
    `budget` is the search's env-step budget (the target's). KeyError, TypeError or ValueError where the data
    is not such a verdict. A file saved before it held trial_paths gives no re-evaluation policy."""
    nan = math.nan

    def number(value: Any) -> float:
        return nan if value is None else float(value)

    rows = data["ranking"]
    ranked = tuple(Evaluated(
        Candidate(str(r["trial_id"]), dict(r.get("config") or {}), number(r.get("search_score")),
                  None if r.get("search_steps") is None else int(r["search_steps"])),
        tuple(int(s) for s in r["seeds"]), tuple(number(v) for v in r["returns"]), number(r["iqm"]),
        tuple(number(v) for v in r["ci"]), solved=tuple(bool(v) for v in r.get("solved", ())),
        steps=tuple(int(v) for v in r.get("steps", ())), steps_iqm=number(r.get("steps_iqm")),
        steps_ci=tuple(number(v) for v in r.get("steps_ci", (None, None))),
        trial_paths=tuple(r.get("trial_paths", ())),
        stopped_at=None if r.get("stopped_at") is None else int(r["stopped_at"])) for r in rows)
    target = None if data.get("stop_at") is None else Target(float(data["stop_at"]), int(budget))
    return Verdict(ranked, bool(data.get("clear_winner")), target) if ranked else None


def winner_best(loaded: Any, verdict: Verdict, *, metric: str, mode: str) -> Any:
    """The best to export after a re-evaluation: the winner's search trial and config, valued at its IQM, with
    the policy (trial_path) of its best re-evaluation seed where that trial left a checkpoint. The search trial
    itself may have been stopped early by the scheduler, long before its config's policy was any good."""
    from tune_runner.results.analysis import last_checkpoint, trial_best

    best = trial_best(loaded, verdict.winner.candidate.trial_id, metric=metric, mode=mode, value=verdict.winner.iqm,
                      scope=scope(verdict))
    path = policy_trial(verdict.winner, mode=mode)
    if path is not None and last_checkpoint(path) is not None:
        best = replace(best, trial_path=str(path))
    return best


@dataclass(frozen=True)
class Verdict:
    """The ranking (best first), whether the winner is clear of the runner-up, and the target it was
    ranked on (None: by the final metric's IQM)."""

    ranked: tuple[Evaluated, ...]
    clear: bool
    target: Target | None = None

    @property
    def winner(self) -> Evaluated:
        return self.ranked[0]

    @property
    def decided(self) -> bool:
        """Whether the winner has a finished seed: else (every re-evaluation trial failed) the re-evaluation
        tells nothing, and the search's own best stands."""
        return bool(self.winner.seeds)

    def sentence(self) -> str:
        if not self.decided:
            return "no verdict: no re-evaluation seed finished (the errors are above); the search's best stands"
        if len(self.ranked) < 2:
            return "one config re-evaluated; nothing to compare it with"
        if not self.ranked[1].seeds:
            return "no verdict between #1 and #2: no re-evaluation seed of #2 finished (the errors are above)"
        if self.target is not None:
            return _steps_sentence(self.ranked[0], self.ranked[1], self.target, clear=self.clear)
        return _metric_sentence(self.clear)


def _metric_sentence(clear: bool) -> str:
    if clear:
        return "clear winner: its confidence interval does not overlap the runner-up's"
    return "no clear winner: the confidence intervals of #1 and #2 overlap; more seeds would tell them apart"


def _steps_sentence(first: Evaluated, second: Evaluated, target: Target, *, clear: bool) -> str:
    to = f"env steps to {target.label}"
    if not any(first.solved):
        return f"no seed of #1 or #2 reached {target.label}, so the final value's IQM ranks them; " \
               + _metric_sentence(clear)
    if clear:
        return f"clear winner: its CI of {to} lies below the runner-up's"
    more = f"#1 solved more seeds ({first.solved_text} vs {second.solved_text}) but " \
        if first.share > second.share else ""
    if more and first.steps_ci[0] > second.steps_ci[1]:
        return f"no clear winner: {more}#2 reached {target.label} sooner (its CI of {to} lies below #1's); " \
               f"more seeds would tell them apart"
    return f"no clear winner: {more}the CIs of {to} of #1 and #2 overlap; more seeds would tell them apart"


def _metric_key(evaluated: Evaluated, mode: str) -> tuple[bool, float]:
    """Best final-metric IQM first, NaN last."""
    sign = -1.0 if mode == "max" else 1.0
    return math.isnan(evaluated.iqm), sign * evaluated.iqm if not math.isnan(evaluated.iqm) else 0.0


def _steps_key(evaluated: Evaluated, mode: str) -> tuple:
    """A candidate with finished seeds first, then the highest solved share, fewest env steps to solve (IQM),
    then the final metric."""
    steps = evaluated.steps_iqm
    return not evaluated.seeds, -evaluated.share, math.isnan(steps), steps if not math.isnan(steps) else 0.0, \
        *_metric_key(evaluated, mode)


def rank(evaluated: Sequence[Evaluated], *, mode: str, target: Target | None = None) -> Verdict:
    """Best first: by the final metric's IQM, or with a target by solved share, then the IQM of env steps to
    solve. `clear` when #1's interval lies clear of #2's: for steps, #1's CI wholly below #2's (an unsolved
    seed counts at the budget, so a real gap in solved share shows there too); when neither solved a seed,
    the final metric's CIs judge as without a target."""
    ordered = tuple(sorted(evaluated, key=lambda e: _metric_key(e, mode) if target is None else _steps_key(e, mode)))
    if len(ordered) < 2:
        return Verdict(ordered, bool(ordered[0].seeds), target)
    first, second = ordered[:2]
    if not (first.seeds and second.seeds):  # a candidate with no finished seed: its NaN CI tells nothing
        return Verdict(ordered, False, target)
    if target is None:
        return Verdict(ordered, not overlap(first.ci, second.ci))
    if not any(first.solved):
        return Verdict(ordered, not overlap(first.ci, second.ci), target)
    return Verdict(ordered, first.steps_ci[1] < second.steps_ci[0], target)


def plan(num_trials: int, *, top: int | None, seeds: int | None) -> tuple[int, int] | None:
    """(K, N) for the automatic stage: defaults 2 x 3, costing at most as many trial budgets as the
    search ran (K x N <= its trials). None when that leaves fewer than 2 configs x 2 seeds."""
    k, n = top or DEFAULT_TOP, seeds or DEFAULT_SEEDS
    if top is None and seeds is None:
        while k * n > num_trials and n > 2:
            n -= 1
        if k * n > num_trials:
            return None
    return k, n


def candidates(analysis: Any, *, metric: str, mode: str, k: int,
               reached: Callable[[dict], bool] | None = None) -> list[Candidate]:
    """The best `k` trials of a finished search: by their last value of `metric`, or, given `reached`
    (the spec's stop_at test), those that solved first, soonest first (tune_runner.results.analysis.ranked)."""
    from tune_runner.results.analysis import ranked
    from tune_runner.trainables.trial import best_member

    picks = []
    for trial in ranked(analysis.trials, metric=metric, mode=mode, reached=reached)[:k]:
        last = trial.last_result or {}
        solved = reached is not None and reached(last)
        config, _ = best_member(trial.config, last, metric=metric, mode=mode)  # a population: its best seed's
        picks.append(Candidate(trial.trial_id, {k_: v for k_, v in config.items() if k_ not in ("env", "env_config")},
                               float(last[metric]), int(last.get("env_steps", 0)) if solved else None))
    return picks


def headline(evaluated: Evaluated, target: Target) -> str:
    """`solved 3/3 seeds, IQM 96k env steps to 475 [95% CI 88k, 110k]`: how a config did against stop_at. With
    no seed solved, the final value's IQM instead: env steps "to 475" would be the budget, never reached."""
    if evaluated.solved and not any(evaluated.solved):
        low, high = evaluated.ci
        return (f"solved {evaluated.solved_text} seeds within {fmt_steps(target.budget)} env steps, final IQM "
                f"{evaluated.iqm:.1f} [{CONFIDENCE:.0%} CI {low:.1f}, {high:.1f}]")
    low, high = evaluated.steps_ci
    return (f"solved {evaluated.solved_text} seeds, IQM {fmt_steps(evaluated.steps_iqm)} env steps to "
            f"{target.label} [{CONFIDENCE:.0%} CI {fmt_steps(low)}, {fmt_steps(high)}]")


def stopped_note(evaluated: Evaluated) -> str:
    """`; stopped at 122k env steps: ...` for a candidate whose unsolved seeds were stopped early, else ''."""
    if evaluated.stopped_at is None:
        return ""
    return (f"; stopped at {fmt_steps(evaluated.stopped_at)} env steps, where its unsolved seeds could no longer "
            f"change the verdict (they count at the budget)")


def scope(verdict: Verdict) -> str:
    """How the re-evaluation chose the best trial, for its `Best.scope`."""
    if verdict.target is None:
        return "reevaluated IQM"
    return f"reevaluated: {headline(verdict.winner, verdict.target)}"


def seed_span(seeds: Sequence[int]) -> str:
    """Seeds as printed: `1000-1002` when they run one by one, else each of them (a seed-batched re-evaluation's
    seeds are 1000, 1001000, ...: `1000-1001000` would read as a million seeds)."""
    if not seeds:
        return "none finished"
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(str(seed) for seed in seeds)


def describe(verdict: Verdict, *, metric: str) -> list[str]:
    """The summary lines: one per candidate, then the verdict."""
    lines = []
    for place, ev in enumerate(verdict.ranked, 1):
        seeds = seed_span(ev.seeds)
        search = ev.candidate.search_score
        if verdict.target is None:
            lines.append(f"#{place} {ev.candidate.trial_id}  IQM {ev.iqm:.1f}  95% CI [{ev.ci[0]:.1f}, "
                         f"{ev.ci[1]:.1f}]  over seeds {seeds}  (search: {search:.1f})")
            continue
        steps = ev.candidate.search_steps
        found = f"solved at {fmt_steps(steps)} env steps" if steps is not None else f"{metric} {search:.1f}, unsolved"
        lines.append(f"#{place} {ev.candidate.trial_id}  {headline(ev, verdict.target)}  over seeds {seeds}  "
                     f"(search: {found}){stopped_note(ev)}")
    lines.append(verdict.sentence())
    return lines
