"""A best config that holds up: re-train the top K configs on N fresh seeds and rank them by IQM.

RL returns are noisy; the trial that looks best after one seed is often lucky. After a
search (or with `tune-rl best EXP --reevaluate K --seeds N`) the top K configs are trained
again on N seeds that the search did not use, with the search's budget, as one small Tune
run of its own. Each config's final returns are summarised by their interquartile mean
(IQM: the mean of the middle half, `trimmed_mean(x, 0.25)`) with a percentile-bootstrap
95% confidence interval; the config with the best IQM wins, and when its interval overlaps
the runner-up's the output says there is no clear winner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tune_runner.spec import ExperimentSpec

CANDIDATE_KEY = "tune_rl_candidate"  # the re-evaluation run's candidate index; trainables ignore it
SEED_BASE = 1000  # re-evaluation seeds are SEED_BASE + i: never the seeds a search uses by default
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
DEFAULT_TOP, DEFAULT_SEEDS = 2, 3


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: sort, drop floor(n/4) values at each end, average the rest."""
    ordered = sorted(float(v) for v in values)
    if not ordered:
        return math.nan
    cut = len(ordered) // 4
    middle = ordered[cut:len(ordered) - cut]
    return sum(middle) / len(middle)


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
    stats = np.array([iqm(data[row]) for row in picks])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


@dataclass(frozen=True)
class Candidate:
    """A config from the search: its trial and its single-run score there."""

    trial_id: str
    config: dict
    search_score: float


@dataclass(frozen=True)
class Evaluated:
    """A candidate's re-evaluation: its final returns per seed, their IQM and CI."""

    candidate: Candidate
    seeds: tuple[int, ...]
    returns: tuple[float, ...]
    iqm: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class Verdict:
    """The ranking (best first) and whether the winner is clear of the runner-up."""

    ranked: tuple[Evaluated, ...]
    clear: bool

    @property
    def winner(self) -> Evaluated:
        return self.ranked[0]

    def sentence(self) -> str:
        if len(self.ranked) < 2:
            return "one config re-evaluated; nothing to compare it with"
        if self.clear:
            return "clear winner: its confidence interval does not overlap the runner-up's"
        return "no clear winner: the confidence intervals of #1 and #2 overlap; more seeds would tell them apart"


def rank(evaluated: Sequence[Evaluated], *, mode: str) -> Verdict:
    """Best IQM first; `clear` when #1's interval does not overlap #2's."""
    sign = -1.0 if mode == "max" else 1.0
    ordered = tuple(sorted(evaluated, key=lambda e: (math.isnan(e.iqm), sign * e.iqm if not math.isnan(e.iqm)
                                                     else 0.0)))
    clear = len(ordered) < 2 or not overlap(ordered[0].ci, ordered[1].ci)
    return Verdict(ordered, clear)


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


def candidates(analysis: Any, *, metric: str, mode: str, k: int) -> list[Candidate]:
    """The best `k` trials of a finished search by their last value of `metric`."""
    scored = []
    for trial in analysis.trials:
        value = (trial.last_result or {}).get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            scored.append((float(value), trial))
    scored.sort(key=lambda pair: pair[0], reverse=mode == "max")
    return [Candidate(t.trial_id, {k_: v for k_, v in t.config.items() if k_ not in ("env", "env_config")},
                      value) for value, t in scored[:k]]


def reevaluate(spec: ExperimentSpec, picks: Sequence[Candidate], *, seeds: int, storage: Path, name: str,
               out: TextIO, first_seed: int = SEED_BASE) -> Verdict:
    """Train every candidate on `seeds` fresh seeds with the search's budget (one Tune run), then rank."""
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    from tune_runner import trainables
    from tune_runner.runner import BudgetStopper

    seed_values = [first_seed + i for i in range(seeds)]
    keys = sorted({key for c in picks for key in c.config if key != "seed"})
    space: dict[str, Any] = {"env": spec.env, "env_config": dict(spec.env_config),
                             CANDIDATE_KEY: tune.grid_search(list(range(len(picks)))),
                             "seed": tune.grid_search(seed_values)}
    for key in keys:
        space[key] = tune.sample_from(_Pick(picks, key))
    print(f"re-evaluating the top {len(picks)} config(s) on {seeds} fresh seeds ({len(picks) * seeds} runs of "
          f"{spec.budget_env_steps:,} env steps)", file=out, flush=True)
    tuner = tune.Tuner(
        trainables.trainable_class(spec.trainable), param_space=space,
        tune_config=tune.TuneConfig(metric=spec.metric, mode=spec.mode, reuse_actors=True,
                                    max_concurrent_trials=spec.max_concurrent),
        run_config=tune.RunConfig(name=name, storage_path=str(storage), stop=BudgetStopper(spec), verbose=0,
                                  callbacks=[_Progress(picks, spec.metric, out), CSVLoggerCallback(),
                                             JsonLoggerCallback()],
                                  failure_config=tune.FailureConfig(max_failures=1),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))
    grid = tuner.fit()
    returns: dict[int, dict[int, float]] = {i: {} for i in range(len(picks))}
    for result in grid:
        config, metrics = result.config or {}, result.metrics or {}
        value = metrics.get(spec.metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            returns[int(config[CANDIDATE_KEY])][int(config["seed"])] = float(value)
    evaluated = []
    for i, pick in enumerate(picks):
        values = tuple(returns[i][s] for s in seed_values if s in returns[i])
        evaluated.append(Evaluated(pick, tuple(s for s in seed_values if s in returns[i]), values, iqm(values),
                                   bootstrap_ci(values)))
    return rank(evaluated, mode=spec.mode)


class _Pick:
    """`tune.sample_from` body: the value of `key` in the trial's candidate config (picklable)."""

    def __init__(self, picks: Sequence[Candidate], key: str) -> None:
        self.values = [c.config.get(key) for c in picks]

    def __call__(self, spec: Any) -> Any:
        return self.values[int(spec.config[CANDIDATE_KEY])]


def _progress_class() -> type:
    from ray.tune import Callback

    class Progress(Callback):
        def __init__(self, picks: Sequence[Candidate], metric: str, out: TextIO) -> None:
            self.picks, self.metric, self.out = picks, metric, out

        def __getstate__(self) -> dict:
            return {"picks": self.picks, "metric": self.metric, "out": None}

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            index = int(trial.config[CANDIDATE_KEY])
            value = (trial.last_result or {}).get(self.metric, math.nan)
            if self.out is not None:
                print(f"  #{index + 1} {self.picks[index].trial_id} seed {trial.config['seed']}: "
                      f"{self.metric} {value:.1f}", file=self.out, flush=True)

    return Progress


def _Progress(picks: Sequence[Candidate], metric: str, out: TextIO) -> Any:  # noqa: N802 - a class factory
    return _progress_class()(picks, metric, out)


def describe(verdict: Verdict, *, metric: str) -> list[str]:
    """The summary lines: one per candidate, then the verdict."""
    lines = []
    for place, ev in enumerate(verdict.ranked, 1):
        seeds = f"{ev.seeds[0]}-{ev.seeds[-1]}" if ev.seeds else "none finished"
        lines.append(f"#{place} {ev.candidate.trial_id}  IQM {ev.iqm:.1f}  95% CI [{ev.ci[0]:.1f}, {ev.ci[1]:.1f}]  "
                     f"over seeds {seeds}  (search: {ev.candidate.search_score:.1f})")
    lines.append(verdict.sentence())
    return lines
