"""Re-evaluation: train the top K configs again on N fresh seeds, as one small Tune run of its own,
and rank them with the statistics of tune_runner.results.robust.

It runs a search of its own, so it lives with the search (search/) and not with the results it ranks:
results/ reads finished searches and imports nothing from search/.
"""

from __future__ import annotations

import contextlib
import copy
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
    all its seeds, stopped once every seed has reached stop_at; any other runs one trial per seed. After a
    population search (configs_per_trial), candidates that share their trial-level values train side by side
    as the members of one population trial (`units`), as many to a trial as keeps every trial slot busy."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from tune_runner.tuning.progress_csv import ProgressCSV

    batches = units(spec, picks, record=record, seeds=seeds, at_once=_trials_at_once(spec, record)) \
        if record.seeds else [[i] for i in range(len(picks))]
    configs = trial_configs(spec, picks, seeds=seeds, first_seed=first_seed, batched=record.seeds, units=batches,
                            member_keys=record.member_keys)
    how = ""
    if any(len(unit) > 1 for unit in batches):
        how = f", as {len(batches)} population trial(s) of {'/'.join(str(len(u)) for u in batches)} configs"
    elif record.seeds:
        how = ", seeds batched: one trial per config"
    print(f"re-evaluating the top {len(picks)} config(s) on {seeds} fresh seeds ({len(picks) * seeds} runs of "
          f"{spec.budget_env_steps:,} env steps{how})", file=out, flush=True)
    stopper = _stopper(spec, batched=record.seeds, count=len(picks))
    tuner = tune.Tuner(
        record.trainable_class(),
        tune_config=tune.TuneConfig(metric=spec.metric, mode=spec.mode, reuse_actors=True, num_samples=len(configs),
                                    max_concurrent_trials=spec.max_concurrent, search_alg=_listed(configs)),
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


# A candidate is re-trained at the space's budget, not at the share of it a multi-fidelity searcher gave it.
LEFT_OUT = ("seed", *reserved.SEED_KEYS, reserved.BUDGET_KEY)


def units(spec: ExperimentSpec, picks: Sequence[Candidate], *, record: Backend, seeds: int,
          at_once: int) -> list[list[int]]:
    """The candidates (their indices) each re-evaluation trial trains: one each, or after a population search
    (configs_per_trial > 1, a trainable that trains populations) the candidates that share every trial-level
    value as the members of one trial. A trial holds at most as many member seeds as the search's own trials
    did (configs_per_trial x seeds_per_trial, what its memory was checked for), and no more members than
    leave `at_once` trials to run side by side: on 2 CPU cores, 2 candidates stay 2 trials of their seeds
    each; on one GPU that all trials share, they become one trial."""
    if spec.configs_per_trial == 1 or not record.member_keys:
        return [[i] for i in range(len(picks))]
    most = max(1, min(spec.configs_per_trial * spec.seeds_per_trial // seeds, math.ceil(len(picks) / at_once)))
    groups: dict[tuple, list[int]] = {}
    for i, pick in enumerate(picks):
        shared = tuple(sorted((k, repr(v)) for k, v in pick.config.items()
                              if k not in LEFT_OUT and k not in record.member_keys))
        groups.setdefault(shared, []).append(i)
    return [group[start:start + most] for group in groups.values() for start in range(0, len(group), most)]


def _trials_at_once(spec: ExperimentSpec, record: Backend) -> int:
    """How many re-evaluation trials Ray runs side by side: the cluster's resources over a trial's request,
    at most the space's max_concurrent."""
    from tune_runner.tuning.preflight import trials_at_once

    return min(spec.max_concurrent or math.inf, trials_at_once(spec, record.trainable_class()))


def trial_configs(spec: ExperimentSpec, picks: Sequence[Candidate], *, seeds: int, first_seed: int,
                  batched: bool, units: Sequence[Sequence[int]] | None = None,
                  member_keys: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The re-evaluation's trials, each config whole: a candidate's config (only the keys it had: a conditional
    space's inactive ones stay out) with fresh seeds, one trial per seed or `seeds` seeds from `first_seed` in
    one trial; a unit of several candidates as one population trial (CANDIDATE_KEY lists them, their shared
    trial-level values in its config, each one's member values in its member list)."""
    units = [[i] for i in range(len(picks))] if units is None else units
    base = {"env": spec.env, "env_config": dict(spec.env_config)}
    configs = []
    for unit in units:
        population = len(unit) > 1
        own = {k: v for k, v in picks[unit[0]].config.items()
               if k not in LEFT_OUT and not (population and k in member_keys)}
        config = {**base, **own, CANDIDATE_KEY: list(unit) if population else unit[0]}
        if population:
            config[reserved.MEMBERS_KEY] = len(unit)
            config[reserved.MEMBER_LIST_KEY] = {
                "members": [{"id": picks[i].trial_id, "values": {k: picks[i].config[k] for k in member_keys
                                                                 if k in picks[i].config}} for i in unit],
                "metric": spec.metric, "mode": spec.mode, "per_seed": True}
        if batched:
            configs.append({**config, "seed": first_seed, reserved.SEEDS_KEY: seeds,
                            reserved.AGGREGATE_KEY: spec.seed_aggregate})
        else:
            configs.extend({**config, "seed": first_seed + i} for i in range(seeds))
    return configs


def _listed(configs: Sequence[dict[str, Any]]) -> Any:
    """A Tune searcher that gives each of `configs` to one trial, in order, then is finished. Whole configs, not
    a param_space: Tune resolves a param_space's sample_from functions only as a trial starts, after a search
    algorithm has seen its config, so nothing could leave a key out of it."""
    from ray.tune.search import Searcher

    class Listed(Searcher):
        def __init__(self, configs: Sequence[dict[str, Any]]) -> None:
            super().__init__()
            self.configs, self.given = [copy.deepcopy(c) for c in configs], 0

        def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
            return True

        def suggest(self, trial_id: str) -> dict[str, Any] | str:
            if self.given == len(self.configs):
                return Searcher.FINISHED
            self.given += 1
            return self.configs[self.given - 1]

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            pass

    return Listed(configs)


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
        for candidate, indices, seeds in trained(config):
            for index, seed in zip(indices, seeds, strict=True):
                column = seed_key(index, spec.metric)
                if column in history:
                    episodes = seed_key(index, "episodes")
                    run = _seed_run(spec, seed, history[column].tolist(), env_steps,
                                    history[episodes].tolist() if episodes in history else None, config=config)
                    if run is not None:
                        run = replace(run, trial_path=result.path,
                                      stopped_at=stopped if run.reached_at is None else None)
                        runs[candidate].append(run)
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


def trained(config: dict[str, Any]) -> list[tuple[int, range, list[int]]]:
    """What a re-evaluation trial of `config` trains: per candidate, its seeds' indices in the trial's seed_<i>
    order and their seed numbers (the learner's documented derivation); a population trial's candidates in
    their slots' order, each slot seeds_per_trial seeds (trainables.members)."""
    from tune_runner.algos.seeds import derived_seeds

    unit, k = config.get(CANDIDATE_KEY, 0), int(config.get(reserved.SEEDS_KEY, 1))
    candidates = unit if isinstance(unit, list) else [unit]
    numbers = derived_seeds(int(config.get("seed", 0)), k * len(candidates))
    return [(int(c), range(j * k, (j + 1) * k), numbers[j * k:(j + 1) * k]) for j, c in enumerate(candidates)]


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
            """A line per candidate the trial trained (a population trial's: one per member)."""
            from tune_runner.spec.seed_keys import member_key

            last, population = trial.last_result or {}, isinstance(trial.config.get(CANDIDATE_KEY), list)
            reached = self.reached.get(trial.trial_id, set())
            for slot, (index, indices, seeds) in enumerate(trained(trial.config)):
                value = last.get(member_key(slot, self.spec.metric) if population else self.spec.metric, math.nan)
                solved = _solved_said(trial.config, last, reached & set(indices), self.spec)
                if self.out is not None:
                    print(f"  #{index + 1} {self.picks[index].trial_id} "
                          f"{_seeds_said(trial.config, last, self.spec, indices, seeds)}: "
                          f"{self.spec.metric} {value:.1f}{solved}", file=self.out, flush=True)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            """A re-evaluation trial that failed is named with its error, not left to read as a NaN."""
            from tune_runner.tracking.callback import last_error_line

            if self.out is not None:
                for index, indices, seeds in trained(trial.config):
                    print(f"  #{index + 1} {self.picks[index].trial_id} "
                          f"{_seeds_said(trial.config, {}, self.spec, indices, seeds)} "
                          f"errored: {last_error_line(trial)}", file=self.out, flush=True)

    return Progress


def _seeds_said(config: dict[str, Any], last: dict[str, Any], spec: ExperimentSpec, indices: Sequence[int],
                seeds: Sequence[int]) -> str:
    """`seed 1000`, or for several seeds (`indices` in the trial, numbered `seeds`) `seeds 1000, 11007, 21014
    (412.0, 500.0, 488.5; iqm)`."""
    from tune_runner.spec.seed_keys import seed_key

    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    values = ", ".join(f"{last[seed_key(i, spec.metric)]:.1f}" for i in indices if seed_key(i, spec.metric) in last)
    said = f"seeds {', '.join(map(str, seeds))}"
    return f"{said} ({values}; {spec.seed_aggregate})" if values else said


def _solved_said(config: dict[str, Any], last: dict[str, Any], reached: set[int], spec: ExperimentSpec) -> str:
    """How a finished re-evaluation trial did against stop_at, as the robust verdict counts it: a one-seed trial
    solved at its last result (the stopper ends it there); a trial of K seeds by how many seeds reached stop_at
    at some result over a full window of their own episodes (`reached`: their indices, gathered from every
    result as EverySeedStopper gathers them), not by its aggregate's last value nor a seed's best value, which
    may have come from its first few episodes."""
    if spec.stop_at is None:
        return ""
    steps, k = int(last.get("env_steps", 0)), int(config.get(reserved.SEEDS_KEY, 1))
    if k == 1 and not isinstance(config.get(CANDIDATE_KEY), list):
        return f", solved at {steps:,} env steps" if spec.reached(last) \
            else f", not solved in {spec.budget_env_steps:,} env steps"
    early = "; stopped: its unsolved seeds could no longer change the verdict" \
        if len(reached) < k and steps < spec.budget_env_steps else ""
    return f", {len(reached)}/{k} seeds solved in {steps:,} env steps{early}"


def _Progress(picks: Sequence[Candidate], spec: ExperimentSpec, out: TextIO) -> Any:  # noqa: N802 - a class factory
    return _progress_class()(picks, spec, out)
