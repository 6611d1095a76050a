"""What `tune-rl search` prints around its live view: the header before it starts, the summary after it ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from tune_runner import storage
from tune_runner.hints import printed
from tune_runner.results import analysis
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.tracking import uri as mlflow_uri


def header(spec: ExperimentSpec, name: str, out: TextIO) -> None:
    """The search's name, what it trains for how long, and the space it searches."""
    searched = ", ".join(f"{p.name}~{p.describe()}" for p in spec.space) or "nothing (fixed config)"
    print(f"tune-rl: {name}: {spec.trainable} on {spec.env}, {spec.trials_text()}{_stop_at(spec)}, "
          f"searcher {spec.searcher.name}, scheduler {spec.scheduler.name}",
          file=out)
    print(f"  searching {searched}", file=out, flush=True)
    if spec.plugins or not spec.discover_plugins:  # code that runs is named: ./envs/ and plugins: import unasked
        files = ", ".join(_shown(path) for path in spec.plugins) or "none (--no-plugins or plugins: false)"
        print(f"  plug-ins  {files}", file=out, flush=True)


def _shown(path: str) -> str:
    """A plug-in file as the header names it: relative to the working folder where it lies below it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _stop_at(spec: ExperimentSpec) -> str:
    if spec.stop_at is None:
        return f" ({spec.stop_at_note})" if spec.stop_at_note else ""
    why = f": {spec.stop_at_note}" if spec.stop_at_note else ""
    return f" (or until {spec.metric} {'>=' if spec.mode == 'max' else '<='} {spec.stop_at:g}{why})"


def config_line(spec: ExperimentSpec, best: analysis.Best) -> str:
    """The best trial's searched values; of a population (PPOConfig.population), also its best seed's own values,
    the config best.yaml holds."""
    from tune_runner.algos.config import ALIASES
    from tune_runner.trainables.trial import best_member, population_of

    text = analysis.fmt_config(best.config, spec.searched) or "(nothing searched)"
    config, member = best_member(best.config, best.last_result, metric=spec.metric, mode=spec.mode)
    if member is None:
        return text
    keys = tuple(ALIASES.get(key, key) for key in population_of(best.config))
    return f"{text}; its population's best seed {member}: {analysis.fmt_config(config, keys)}"


def best_line(spec: ExperimentSpec, best: analysis.Best, verdict: Any) -> str:
    """What the best trial scored and how it was chosen: with stop_at, by solving (soonest, or on fresh seeds)."""
    from tune_runner.tuning.progress import fmt_value

    if verdict is not None and verdict.target is not None:
        from tune_runner.results.robust import headline

        return f"{headline(verdict.winner, verdict.target)} on fresh seeds (robust, below)"
    steps = int(best.last_result.get("env_steps", 0))
    line = f"{spec.metric} {fmt_value(best.value)} at {steps:,} env steps"
    if spec.stop_at is None or verdict is not None:
        return line
    if spec.reached(best.last_result):
        return f"{line} ({best.scope} {spec.stop_at:g})"
    return f"{line} (no trial reached {spec.stop_at:g})"


def where_to_look(uri: str) -> str:
    """How to open the dashboard on this store."""
    from tune_runner.paths import default_mlflow_uri

    if uri.startswith(("http://", "https://")):
        return "open it in a browser"
    flag = [] if uri == default_mlflow_uri() else ["--mlflow-uri", mlflow_uri.redacted(uri)]  # no password shown
    return f"see it: {printed(['tune-rl', 'dashboard', *flag])}"


def summary(spec: ExperimentSpec, outcome: Any, options: Any, *, mlflow_run: str, model: Any, out: TextIO) -> None:
    """A finished search (tune_runner.tuning.runner's Outcome and RunOptions): trials, errors, the best and
    its config, the PBT audit, the robust verdict, and where its results, runs, model and bundle are."""

    minutes, seconds = divmod(int(outcome.seconds), 60)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(outcome.counts.items()))
    print(f"\ntrials     {sum(outcome.counts.values())}: {counts} in {minutes}m{seconds:02d}s", file=out)
    if outcome.errors:
        (line, times), = outcome.errors.most_common(1)
        print(f"errors     {sum(outcome.errors.values())} trial(s) errored; most common ({times}x): {line}", file=out)
    best = outcome.best
    if best is not None:
        print(f"best       {best.trial_id}  {best_line(spec, best, outcome.verdict)}", file=out)
        print(f"config     {config_line(spec, best)}", file=out)
    if outcome.audit:
        print(f"pbt        {outcome.audit}", file=out)
    if outcome.verdict is not None:
        from tune_runner.results.robust import describe

        for i, line in enumerate(describe(outcome.verdict, metric=spec.metric)):
            print(f"{'robust' if i == 0 else '':<10} {line}", file=out)
    where = storage.join(options.storage, outcome.experiment_path.name)
    print(f"results    {where}" + (f"  (local copy: {outcome.experiment_path})" if storage.is_uri(where) else ""),
          file=out)
    print(f"mlflow     {mlflow_uri.redacted(options.mlflow_uri)}  (experiment {spec.name}, run {mlflow_run}; "
          f"{where_to_look(options.mlflow_uri)})", file=out)
    print(f"model      {model.note}", file=out)
    if outcome.export_path is not None:
        rerun = printed(["tune-rl", "train", "--config", str(outcome.export_path)])
        print(f"exported   {outcome.export_path}  (re-run: {rerun})", file=out)
    out.flush()
