"""Compose a validated spec into a Ray Tune run, log it to MLflow, select and export the best."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from ray.tune import Stopper

from tune_runner import analysis, export, mlflow_uri, tracking
from tune_runner.errors import ExitStatus, UserError, unknown_name
from tune_runner.spec import ExperimentSpec


@dataclass(frozen=True)
class RunOptions:
    """What the command line adds to a spec: where results go and how loud to be."""

    storage: Path
    mlflow_uri: str
    name: str | None = None
    export: bool = True
    verbose: bool = False
    num_cpus: int | None = None
    register_model: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What a finished search leaves behind."""

    experiment_path: Path
    best: analysis.Best | None
    export_path: Path | None
    counts: Counter
    seconds: float
    audit: str | None = None
    report: tuple[Path, ...] = ()

    @property
    def exit_status(self) -> ExitStatus:
        total = sum(self.counts.values())
        if total and self.counts.get("errored", 0) == total:
            return ExitStatus.ALL_TRIALS_FAILED
        return ExitStatus.OK


@dataclass(frozen=True)
class Prepared:
    """The Ray Tune objects for a spec, all validated before anything starts.

    `spec` is the spec as it runs (the grid searcher turns choices into grid axes).
    """

    spec: ExperimentSpec
    trainable: Any
    searcher: Any
    scheduler: Any
    population: bool = False


def check_env(name: str, *, where: str) -> None:
    """The env must be a gymnasium id or an env registered with Ray Tune."""
    import gymnasium
    from ray.tune.registry import ENV_CREATOR, _global_registry

    if name in gymnasium.envs.registry or _global_registry.contains(ENV_CREATOR, name):
        return
    raise UserError(f"{where}: env: {unknown_name('environment', name, gymnasium.envs.registry)}")


def prepare(spec: ExperimentSpec, *, storage: Path | None = None) -> Prepared:
    """Check every name, setting and combination in the spec and build the Tune objects; start nothing."""
    from tune_runner import schedulers, searchers, trainables

    where = spec.source
    try:
        trainable = trainables.resolve(spec.trainable)
    except UserError as exc:
        raise UserError(f"{where}: trainable: {exc}") from None
    keys = list(spec.fixed) + list(spec.searched)
    for key, problem in trainables.check_settings(trainable, keys):
        section = "space" if key in spec.searched else "fixed"
        raise UserError(f"{where}: {section}.{key}: {problem}")
    check_env(spec.env, where=where)
    check_metric(spec, trainable)
    problem = _check_space_corners(spec, trainable)
    if problem:
        raise UserError(f"{where}: {spec.trainable} rejects this config: {problem}")
    kind, scheduler_type, _ = schedulers.scheduler_type(spec.scheduler, where=where)
    searcher_type = searchers.searcher_type(spec.searcher, where=where)
    check_combination(spec, trainable, kind, scheduler_type, searcher_type)
    if spec.searcher.name == "grid":
        spec = replace(spec, space=searchers.grid_space(spec.space, where=where))
    scheduler = schedulers.build_scheduler(
        spec.scheduler, budget=spec.budget_env_steps, where=where, space=spec.space,
        time_attrs=trainables.time_attrs(trainable), seed=spec.searcher.settings.get("seed"))
    searcher = searchers.build_searcher(spec.searcher, params=spec.space, where=where, storage=storage,
                                        metric=spec.metric, mode=spec.mode)
    return Prepared(spec, trainables.trainable_class(spec.trainable), searcher, scheduler,
                    population=scheduler_type.population)


def check_metric(spec: ExperimentSpec, trainable: str) -> None:
    """The metric to optimize must be one the trainable reports."""
    from tune_runner import trainables

    known = (*trainables.reported(trainable), *trainables.TIME_ATTRS)
    if spec.metric not in known:
        raise UserError(f"{spec.source}: metric: {unknown_name(f'metric of {spec.trainable}', spec.metric, known)}")


def check_combination(spec: ExperimentSpec, trainable: str, kind: str, scheduler: Any, searcher: Any) -> None:
    """Scheduler x searcher x trainable combinations that cannot work, refused with the reason."""
    from tune_runner import trainables

    where, name = spec.source, spec.searcher.name
    if scheduler.searcher and name != scheduler.searcher:
        raise UserError(f"{where}: scheduler: {kind} works only with searcher {scheduler.searcher} "
                        f"(BOHB = HyperBand + its own model), got searcher {name}; set searcher: {scheduler.searcher}")
    if searcher.scheduler and kind != searcher.scheduler:
        raise UserError(f"{where}: searcher: {name} works only with scheduler {searcher.scheduler}, got "
                        f"scheduler {kind}; set scheduler: {searcher.scheduler}")
    if scheduler.population and searcher.model_based:
        raise UserError(f"{where}: searcher: {kind} picks hyperparameters itself and cannot run with the "
                        f"{name} searcher (Ray refuses it at the first trial); use searcher: random")
    if scheduler.needs_checkpoints and not trainables.can_checkpoint(trainable):
        why = "copies checkpoints between trials" if scheduler.population else "pauses trials and resumes them"
        raise UserError(f"{where}: scheduler: {kind} {why}, and trainable {spec.trainable} cannot save a "
                        f"checkpoint; use asha, median or fifo, or a trainable with checkpoints")


def _check_space_corners(spec: ExperimentSpec, trainable: str) -> str | None:
    """The backend's own validation on one sample of the space, then on each parameter's extremes."""
    from tune_runner import trainables

    base = {**spec.fixed, **{p.name: p.example() for p in spec.space}, "env": spec.env, "env_config": spec.env_config}
    candidates = [base] + [{**base, p.name: value} for p in spec.space for value in p.extremes()]
    for config in candidates:
        problem = trainables.check_config(trainable, config)
        if problem:
            return problem
    return None


def quiet_logs(*, verbose: bool) -> None:
    """Keep the driver's output to our live view: RLlib, Tune and MLflow chatter only with --verbose."""
    if verbose:
        return
    for name in ("ray.rllib", "ray.tune", "ray.train"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is first imported
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def ensure_ray(*, num_cpus: int | None, verbose: bool) -> None:
    """Start a local Ray (never join a running cluster by accident); reuse one already started."""
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, loopback-only instance
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0 the old engine prints nothing
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # we add CSV+JSON, not TensorBoard
    import ray

    if ray.is_initialized():
        return
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=verbose,
             logging_level=logging.INFO if verbose else logging.ERROR)


def experiment_name(spec: ExperimentSpec, options: RunOptions, *, suffix: str = "") -> str:
    """--name, or `<space>[-suffix]-<timestamp>`."""
    if options.name:
        return options.name
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{spec.name}{'-' + suffix if suffix else ''}-{stamp}"


def run(spec: ExperimentSpec, options: RunOptions, *, out: TextIO | None = None, suffix: str = "") -> Outcome:
    """Validate, launch, track, select the best trial and export it."""
    out = out or sys.stdout
    quiet_logs(verbose=options.verbose)
    prepared = prepare(spec, storage=options.storage)
    spec = prepared.spec
    check_register(spec, options)
    mlflow_uri.check_uri(options.mlflow_uri)
    name = experiment_name(spec, options, suffix=suffix)
    exp_path = options.storage / name
    if exp_path.exists():
        raise UserError(f"--name {name}: {exp_path} exists already; choose another name")
    started = time.monotonic()
    _header(spec, name, out)
    ensure_ray(num_cpus=options.num_cpus, verbose=options.verbose)
    exp_path.mkdir(parents=True)
    (exp_path / "tune_rl_spec.yaml").write_text(yaml.safe_dump(spec.as_dict(), sort_keys=False))
    mlflow = tracking.client(options.mlflow_uri)
    exp_id = tracking.experiment_id(mlflow, spec.name, options.mlflow_uri)
    parent = _open_parent(mlflow, exp_id, spec, name, exp_path)
    logged = tuple(spec.fixed) + spec.searched
    callbacks = [
        _live_view(spec, out),
        tracking.MlflowTracking(uri=options.mlflow_uri, experiment_id=exp_id, parent_run_id=parent,
                                logged_keys=logged, ending=spec.ending),
    ]
    audit = None
    if prepared.population:
        from tune_runner.audit import make_callback

        audit = make_callback(out)
        callbacks.append(audit)
    status = "FAILED"
    try:
        _fit(spec, prepared, name=name, storage=options.storage, callbacks=callbacks)
        outcome = _finish(spec, exp_path, options, started, audit=audit.summary() if audit else None)
        status = "FINISHED" if outcome.exit_status == ExitStatus.OK else "FAILED"
        _log_outcome(mlflow, parent, spec, outcome)
        policy = _log_model(spec, outcome, options, experiment_id=exp_id, parent=parent)
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        mlflow.set_tag(parent, "tune_rl.status", status.lower())
        mlflow.set_terminated(parent, status=status)
    _summary(spec, outcome, options, mlflow_run=parent, model=policy, out=out)
    return outcome


def check_register(spec: ExperimentSpec, options: RunOptions) -> None:
    """--register-model needs a trainable whose policy we export (ours), and a usable name."""
    from tune_runner.trainables import OWN

    name = options.register_model
    if name is None:
        return
    if not name.strip() or "/" in name or ":" in name:
        raise UserError(f"--register-model {name!r}: a model name without '/' or ':', e.g. cartpole-ppo")
    if spec.trainable not in OWN:
        raise UserError(f"--register-model {name}: the policy of trainable {spec.trainable} is not exported as "
                        f"a model (only {', '.join(OWN)}); drop --register-model")


def _fit(spec: ExperimentSpec, prepared: Prepared, *, name: str, storage: Path, callbacks: list) -> None:
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    tuner = tune.Tuner(
        prepared.trainable,
        param_space=spec.param_space(),
        tune_config=tune.TuneConfig(metric=spec.metric, mode=spec.mode, search_alg=prepared.searcher,
                                    scheduler=prepared.scheduler, num_samples=spec.num_samples,
                                    max_concurrent_trials=spec.max_concurrent, reuse_actors=True),
        run_config=tune.RunConfig(
            name=name, storage_path=str(storage), stop=BudgetStopper(spec),
            callbacks=[*callbacks, CSVLoggerCallback(), JsonLoggerCallback()], verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=checkpoints_to_keep(prepared),
                                                    checkpoint_at_end=True),
            failure_config=tune.FailureConfig(max_failures=1)),
    )
    tuner.fit()


def checkpoints_to_keep(prepared: Prepared) -> int:
    """Per trial. PBT exploits a donor's newest checkpoint while the donor trains on and saves
    again; with 2 or fewer Ray can delete it first ("checkpoint does not exist on storage
    anymore"). Older ones are pruned, so disk use stays at this many per trial."""
    return 4 if prepared.population else 2


class BudgetStopper(Stopper):
    """Ends a trial at the env-step budget, or once it reaches the space's `stop_at`."""

    def __init__(self, spec: ExperimentSpec) -> None:
        self.spec = spec

    def __call__(self, trial_id: str, result: dict) -> bool:
        return int(result.get("env_steps", 0)) >= self.spec.budget_env_steps or self.spec.reached(result)

    def stop_all(self) -> bool:
        return False


def _finish(spec: ExperimentSpec, exp_path: Path, options: RunOptions, started: float, *,
            audit: str | None = None) -> Outcome:
    loaded = analysis.load(exp_path)
    counts = analysis.statuses(loaded, ending=spec.ending)
    try:
        best = analysis.best_trial(loaded, metric=spec.metric, mode=spec.mode, scope="last")
    except UserError:
        best = None
    export_path = None
    if best is not None and options.export:
        export_path = export.write(export.bundle(spec, best, experiment=exp_path.name), exp_path / "best.yaml")
    from tune_runner import report

    written = report.write(loaded, spec, folder=exp_path, title=exp_path.name)
    return Outcome(exp_path, best, export_path, counts, time.monotonic() - started, audit, tuple(written))


def _live_view(spec: ExperimentSpec, out: TextIO) -> Any:
    from tune_runner.progress import LiveView

    return LiveView(searched=spec.searched, budget=spec.budget_env_steps, metric=spec.metric, mode=spec.mode,
                    ending=spec.ending, out=out)


def _open_parent(mlflow: Any, exp_id: str, spec: ExperimentSpec, name: str, exp_path: Path) -> str:
    from mlflow.entities import Param

    run = mlflow.create_run(exp_id, run_name=name, tags={
        "tune_rl.space": spec.name, "tune_rl.experiment_path": str(exp_path), "tune_rl.status": "running",
        "mlflow.note.content": spec.description})
    params = {"space": spec.name, "trainable": spec.trainable, "env": spec.env,
              "searcher": spec.searcher.name, "scheduler": spec.scheduler.name,
              "budget_env_steps": spec.budget_env_steps, "num_samples": spec.num_samples,
              "metric": spec.metric, "mode": spec.mode}
    params.update({f"space.{p.name}": p.describe() for p in spec.space})
    mlflow.log_batch(run.info.run_id, params=[Param(k, str(v)[:500]) for k, v in params.items()])
    return run.info.run_id


def _log_outcome(mlflow: Any, parent: str, spec: ExperimentSpec, outcome: Outcome) -> None:
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    values = {f"trials_{k.replace(' ', '_')}": v for k, v in outcome.counts.items()}
    values["search_seconds"] = outcome.seconds
    params = []
    if outcome.best is not None:
        values[f"best_{spec.metric}"] = outcome.best.value
        mlflow.set_tag(parent, "tune_rl.best_trial", outcome.best.trial_id)
        chosen = {k: outcome.best.config[k] for k in spec.searched if k in outcome.best.config}
        params = [Param(f"best.{k}", v) for k, v in tracking.flat_params(chosen).items()]
    if outcome.audit:
        mlflow.set_tag(parent, "tune_rl.pbt_audit", outcome.audit)
    mlflow.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()], params=params)
    for path in (outcome.export_path, *outcome.report):
        if path is not None:
            mlflow.log_artifact(parent, str(path))


def _log_model(spec: ExperimentSpec, outcome: Outcome, options: RunOptions, *, experiment_id: str,
               parent: str) -> Any:
    """The best trial's policy as an MLflow model on the parent run (tune_runner.model)."""
    from tune_runner import model

    if outcome.best is None:
        return model.Logged(None, "not logged (no best trial)")
    return model.log_policy(uri=options.mlflow_uri, experiment_id=experiment_id, run_id=parent,
                            trainable=spec.trainable, best=outcome.best, register_as=options.register_model)


def _where_to_look(uri: str) -> str:
    """How to open the dashboard on this store."""
    from tune_runner.paths import default_mlflow_uri

    if uri.startswith(("http://", "https://")):
        return "open it in a browser"
    return "see it: tune-rl dashboard" + ("" if uri == default_mlflow_uri() else f" --mlflow-uri {uri}")


def _header(spec: ExperimentSpec, name: str, out: TextIO) -> None:
    searched = ", ".join(f"{p.name}~{p.describe()}" for p in spec.space) or "nothing (fixed config)"
    print(f"tune-rl: {name}: {spec.trainable} on {spec.env}, {spec.num_trials} trial(s) x "
          f"{spec.budget_env_steps:,} env steps{_stop_at(spec)}, "
          f"searcher {spec.searcher.name}, scheduler {spec.scheduler.name}",
          file=out)
    print(f"  searching {searched}", file=out, flush=True)


def _stop_at(spec: ExperimentSpec) -> str:
    return f" (or until {spec.metric} {'>=' if spec.mode == 'max' else '<='} {spec.stop_at:g})" \
        if spec.stop_at is not None else ""


def _summary(spec: ExperimentSpec, outcome: Outcome, options: RunOptions, *, mlflow_run: str, model: Any,
             out: TextIO) -> None:
    from tune_runner.progress import fmt_config, fmt_value

    minutes, seconds = divmod(int(outcome.seconds), 60)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(outcome.counts.items()))
    print(f"\ntrials     {sum(outcome.counts.values())}: {counts} in {minutes}m{seconds:02d}s", file=out)
    best = outcome.best
    if best is not None:
        steps = int(best.last_result.get("env_steps", 0))
        print(f"best       {best.trial_id}  {spec.metric} {fmt_value(best.value)} at {steps:,} env steps", file=out)
        print(f"config     {fmt_config(best.config, spec.searched) or '(nothing searched)'}", file=out)
    if outcome.audit:
        print(f"pbt        {outcome.audit}", file=out)
    print(f"results    {outcome.experiment_path}", file=out)
    print(f"mlflow     {mlflow_uri.redacted(options.mlflow_uri)}  (experiment {spec.name}, run {mlflow_run}; "
          f"{_where_to_look(options.mlflow_uri)})", file=out)
    print(f"model      {model.note}", file=out)
    if outcome.export_path is not None:
        print(f"exported   {outcome.export_path}  (re-run: tune-rl train --config {outcome.export_path})", file=out)
    out.flush()
