"""Re-evaluation: train the top K configs again on N fresh seeds, as one small Tune run of its own,
and rank them with the statistics of tune_runner.results.robust.

It runs a search of its own, so it lives with the search (search/) and not with the results it ranks:
results/ reads finished searches and imports nothing from search/.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tune_runner.errors import UserError
from tune_runner.results import robust
from tune_runner.results.robust import Candidate, SeedRun, Verdict, rank, summarise, target_of
from tune_runner.spec import reserved
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.tuning.warm import WarmTrials

if TYPE_CHECKING:
    from tune_runner.trainables.backends import Backend

CANDIDATE_KEY = reserved.CANDIDATE_KEY  # the re-evaluation run's candidate index; trainables ignore it
SEED_BASE = 1000  # re-evaluation seeds are SEED_BASE + i: never the seeds a search uses by default


def reevaluate_best(spec: ExperimentSpec, loaded: Any, folder: Path, *, record: Backend, top: int | None,
                    seeds: int | None, name: str, out: TextIO, num_cpus: int | None = None, verbose: bool = False,
                    warm: WarmTrials | None = None) -> Verdict | None:
    """The robust best of a finished search: its top configs trained again on fresh seeds, ranked, and the
    verdict saved in its folder (the report reads it). Used by a search's automatic stage (top and seeds
    from the spec or the flags, Ray already up) and by `tune-rl best --reevaluate K` (top given).

    Without `top` or `seeds`, the stage costs at most the search's own trial budgets (robust.plan); None,
    said on `out`, when that leaves too few configs or seeds. With `top`, a search with no finished trial
    is refused before Ray starts. `record`: the spec's trainable, resolved once by whoever read the spec.
    `warm`: the search's kept trial actors, which its trials start on.
    """
    from tune_runner.cluster.session import ensure_ray, quiet_logs
    from tune_runner.results.report import save_verdict

    quiet_logs(verbose=verbose)
    shape = robust.plan(spec.num_trials, top=top, seeds=seeds)
    picks = robust.candidates(loaded, metric=spec.metric, mode=spec.mode, k=shape[0],
                              reached=spec.reached) if shape else []
    if top is not None and not picks:
        raise UserError(f"--reevaluate {top}: no finished trial of {folder.name} reported {spec.metric}")
    if shape is None or len(picks) < 2 and top is None:
        print(f"re-evaluation skipped: {spec.num_trials} trial(s) is too few for {robust.DEFAULT_TOP} configs x "
              f"{robust.DEFAULT_SEEDS} seeds (tune-rl best EXP --reevaluate K --seeds N runs it anyway)",
              file=out, flush=True)
        return None
    ensure_ray(num_cpus=num_cpus, verbose=verbose)
    verdict = reevaluate(spec, picks, record=record, seeds=shape[1], storage=folder, name=name, out=out, warm=warm)
    save_verdict(verdict, folder, metric=spec.metric)
    return verdict


def reevaluate(spec: ExperimentSpec, picks: Sequence[Candidate], *, record: Backend, seeds: int, storage: Path,
               name: str, out: TextIO, first_seed: int = SEED_BASE, warm: WarmTrials | None = None) -> Verdict:
    """Train every candidate on `seeds` fresh seeds with the search's budget (one Tune run), then rank.

    A trainable that trains several seeds as one learner (seeds_per_trial) runs each candidate as one trial of
    all its seeds, stopped once every seed has reached stop_at; any other runs one trial per seed."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from tune_runner.tuning.progress_csv import ProgressCSV

    space = _space(spec, picks, seeds=seeds, first_seed=first_seed, batched=record.seeds)
    print(f"re-evaluating the top {len(picks)} config(s) on {seeds} fresh seeds ({len(picks) * seeds} runs of "
          f"{spec.budget_env_steps:,} env steps{', seeds batched: one trial per config' if record.seeds else ''})",
          file=out, flush=True)
    stopper = _stopper(spec, batched=record.seeds, count=len(picks))
    tuner = tune.Tuner(
        record.trainable_class(), param_space=space,
        tune_config=tune.TuneConfig(metric=spec.metric, mode=spec.mode, reuse_actors=True,
                                    max_concurrent_trials=spec.max_concurrent, search_alg=_generator(spec)),
        run_config=tune.RunConfig(name=name, storage_path=str(storage), stop=stopper,
                                  verbose=0, callbacks=[_Progress(picks, spec, out), ProgressCSV(),
                                                        JsonLoggerCallback()],
                                  failure_config=tune.FailureConfig(max_failures=1),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))
    with warm.adopting() if warm is not None else contextlib.nullcontext():
        grid = tuner.fit()
    runs = _batched_runs(grid, spec, count=len(picks)) if record.seeds else _seed_runs(grid, spec, count=len(picks))
    target = target_of(spec)
    return rank([summarise(pick, runs[i], target=target) for i, pick in enumerate(picks)], mode=spec.mode,
                target=target)


def _space(spec: ExperimentSpec, picks: Sequence[Candidate], *, seeds: int, first_seed: int,
           batched: bool) -> dict[str, Any]:
    """The re-evaluation's param_space: each candidate's config with fresh seeds (one grid value per seed, or
    `seeds_per_trial` seeds from `first_seed` in one trial)."""
    from ray import tune

    # A candidate is re-trained at the space's budget, not at the share of it a multi-fidelity searcher gave it.
    left_out = ("seed", *reserved.SEED_KEYS, reserved.BUDGET_KEY)
    keys = sorted({key for c in picks for key in c.config if key not in left_out})
    space: dict[str, Any] = {"env": spec.env, "env_config": dict(spec.env_config),
                             CANDIDATE_KEY: tune.grid_search(list(range(len(picks))))}
    if batched:
        space.update({"seed": first_seed, reserved.SEEDS_KEY: seeds, reserved.AGGREGATE_KEY: spec.seed_aggregate})
    else:
        space["seed"] = tune.grid_search([first_seed + i for i in range(seeds)])
    for key in keys:
        space[key] = tune.sample_from(_Pick(picks, key))
    return space


def _generator(spec: ExperimentSpec) -> Any:
    """None (Tune's own variant generator), or for a conditional space one that leaves out of each trial the
    parameters its candidate did not have (`_Pick` gives those None)."""
    if not spec.conditional:
        return None
    from tune_runner.searchers.conditional import PruningVariantGenerator

    return PruningVariantGenerator(spec.space)


def _stopper(spec: ExperimentSpec, *, batched: bool, count: int) -> Any:
    """One trial per seed: each ends at stop_at or the budget. One trial of all seeds per candidate: once every
    seed has reached stop_at, or the budget, or when its unsolved seeds can no longer change the verdict."""
    from tune_runner.tuning.stopper import BudgetStopper, RankingStopper

    return RankingStopper(spec, count=count) if batched else BudgetStopper(spec)


def _seed_runs(grid: Any, spec: ExperimentSpec, *, count: int) -> dict[int, list[SeedRun]]:
    """Each candidate's runs from Tune's result grid: the last result under BudgetStopper is where a run
    reached stop_at, if it did. A run that reported no finite value is left out."""
    runs: dict[int, list[SeedRun]] = {i: [] for i in range(count)}
    for result in grid:
        config, metrics = result.config or {}, result.metrics or {}
        value = metrics.get(spec.metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            reached_at = int(metrics.get("env_steps", 0)) if spec.reached(metrics) else None
            runs[int(config[CANDIDATE_KEY])].append(SeedRun(int(config["seed"]), float(value), reached_at,
                                                            trial_path=result.path))
    return runs


def _batched_runs(grid: Any, spec: ExperimentSpec, *, count: int) -> dict[int, list[SeedRun]]:
    """Each candidate's runs from trials of several seeds each: per seed, from the trial's history, its value
    where it first reached stop_at (and those env steps), else its last finite value."""
    from tune_runner.spec.seed_keys import seed_key

    runs: dict[int, list[SeedRun]] = {i: [] for i in range(count)}
    for result in grid:
        config, history = result.config or {}, result.metrics_dataframe
        if history is None or not len(history):
            continue
        env_steps = history["env_steps"].tolist()
        # Ended before the budget with a seed unsolved, and not by an error: RankingStopper found it decided
        stopped = int(env_steps[-1]) if result.error is None and int(env_steps[-1]) < spec.budget_env_steps else None
        for index, seed in enumerate(seed_numbers(config)):
            column = seed_key(index, spec.metric)
            if column in history:
                episodes = seed_key(index, "episodes")
                run = _seed_run(spec, seed, history[column].tolist(), env_steps,
                                history[episodes].tolist() if episodes in history else None, config=config)
                if run is not None:
                    run = replace(run, trial_path=result.path,
                                  stopped_at=stopped if run.reached_at is None else None)
                    runs[int(config[CANDIDATE_KEY])].append(run)
    return runs


def _seed_run(spec: ExperimentSpec, seed: int, values: list[Any], env_steps: list[Any],
              episodes: list[Any] | None = None, *, config: dict | None = None) -> SeedRun | None:
    """One seed's SeedRun from its curve: the first value that reached stop_at (over a full window of its
    `episodes`, where given), else the last finite one."""
    episodes = episodes if episodes is not None else [None] * len(values)
    finite = [(float(v), int(s), e) for v, s, e in zip(values, env_steps, episodes, strict=True)
              if isinstance(v, (int, float)) and math.isfinite(v)]
    for value, steps, count in finite:
        if spec.reached({spec.metric: value, "config": config or {}, "episodes": count}):
            return SeedRun(seed, value, steps)
    return SeedRun(seed, finite[-1][0], None) if finite else None


def seed_numbers(config: dict[str, Any]) -> list[int]:
    """The seeds a trial of `config` trains, in its seed_<i> order (the learner's documented derivation)."""
    from tune_runner.algos.seeds import derived_seeds

    return derived_seeds(int(config.get("seed", 0)), int(config.get(reserved.SEEDS_KEY, 1)))


class _Pick:
    """`tune.sample_from` body: the value of `key` in the trial's candidate config (picklable)."""

    def __init__(self, picks: Sequence[Candidate], key: str) -> None:
        self.values = [c.config.get(key) for c in picks]

    def __call__(self, spec: Any) -> Any:
        return self.values[int(spec.config[CANDIDATE_KEY])]


def _progress_class() -> type:
    from ray.tune import Callback

    class Progress(Callback):
        def __init__(self, picks: Sequence[Candidate], spec: ExperimentSpec, out: TextIO) -> None:
            self.picks, self.spec, self.out = picks, spec, out
            self.reached: dict[str, set[int]] = {}  # per trial, the seeds that reached stop_at at some result

        def __getstate__(self) -> dict:
            return {"picks": self.picks, "spec": self.spec, "out": None, "reached": self.reached}

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            from tune_runner.tuning.stopper import seeds_reached

            self.reached.setdefault(trial.trial_id, set()).update(seeds_reached(self.spec, result))

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            index, last = int(trial.config[CANDIDATE_KEY]), trial.last_result or {}
            value = last.get(self.spec.metric, math.nan)
            solved = _solved_said(trial.config, last, self.reached.get(trial.trial_id, set()), self.spec)
            if self.out is not None:
                print(f"  #{index + 1} {self.picks[index].trial_id} {_seeds_said(trial.config, last, self.spec)}: "
                      f"{self.spec.metric} {value:.1f}{solved}", file=self.out, flush=True)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            """A re-evaluation trial that failed is named with its error, not left to read as a NaN."""
            from tune_runner.tracking.callback import last_error_line

            if self.out is not None:
                index = int(trial.config[CANDIDATE_KEY])
                print(f"  #{index + 1} {self.picks[index].trial_id} {_seeds_said(trial.config, {}, self.spec)} "
                      f"errored: {last_error_line(trial)}", file=self.out, flush=True)

    return Progress


def _seeds_said(config: dict[str, Any], last: dict[str, Any], spec: ExperimentSpec) -> str:
    """`seed 1000`, or for a trial of several seeds `seeds 1000, 11007, 21014 (412.0, 500.0, 488.5; iqm)`."""
    from tune_runner.spec.seed_keys import per_seed

    if int(config.get(reserved.SEEDS_KEY, 1)) == 1:
        return f"seed {config['seed']}"
    values = ", ".join(f"{v:.1f}" for v in per_seed(last, spec.metric))
    seeds = f"seeds {', '.join(map(str, seed_numbers(config)))}"
    return f"{seeds} ({values}; {spec.seed_aggregate})" if values else seeds


def _solved_said(config: dict[str, Any], last: dict[str, Any], reached: set[int], spec: ExperimentSpec) -> str:
    """How a finished re-evaluation trial did against stop_at, as the robust verdict counts it: a one-seed trial
    solved at its last result (the stopper ends it there); a trial of K seeds by how many seeds reached stop_at
    at some result over a full window of their own episodes (`reached`: their indices, gathered from every
    result as EverySeedStopper gathers them), not by its aggregate's last value nor a seed's best value, which
    may have come from its first few episodes."""
    if spec.stop_at is None:
        return ""
    steps, k = int(last.get("env_steps", 0)), int(config.get(reserved.SEEDS_KEY, 1))
    if k == 1:
        return f", solved at {steps:,} env steps" if spec.reached(last) \
            else f", not solved in {spec.budget_env_steps:,} env steps"
    early = "; stopped: its unsolved seeds could no longer change the verdict" \
        if len(reached) < k and steps < spec.budget_env_steps else ""
    return f", {len(reached)}/{k} seeds solved in {steps:,} env steps{early}"


def _Progress(picks: Sequence[Candidate], spec: ExperimentSpec, out: TextIO) -> Any:  # noqa: N802 - a class factory
    return _progress_class()(picks, spec, out)
