"""Compose a validated spec into a Ray Tune run, log it to MLflow, select and export the best."""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from tune_runner import mlflow_uri, storage
from tune_runner.errors import ExitStatus, UserError
from tune_runner.results import analysis, export
from tune_runner.search import resume
from tune_runner.search.preflight import (  # noqa: F401 - prepare and Prepared are part of this module's API
    Prepared,
    check_address,
    check_register,
    check_resources,
    check_storage,
    prepare,
    with_trial_resources,
)
from tune_runner.search.stopper import BudgetStopper  # noqa: F401 - 0.1.0's pickles name tune_runner.runner.BudgetStopper
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.tracking import callback as tracking

MAX_FAILURES = 2  # retries of a failing trial, each from its newest checkpoint
CHECKPOINT_EVERY = 5  # training iterations between a trial's checkpoints (and at its end)
FINISHED_MARK = resume.FINISHED_MARK  # written when a search has run to its end


@dataclass(frozen=True)
class RunOptions:
    """What the command line adds to a spec: where results go and how loud to be. Saved with the search
    (tune_runner.search.resume), less `name`, `verbose` and `resume`."""

    storage: storage.Storage  # a folder, or a URI (tune_runner.storage)
    mlflow_uri: str
    name: str | None = None
    export: bool = True
    verbose: bool = False
    num_cpus: int | None = None
    reevaluate: bool = True
    top: int | None = None
    seeds: int | None = None
    resume: bool = False
    max_failures: int = MAX_FAILURES
    num_gpus: float | None = None
    cpus_per_trial: float | None = None
    gpus_per_trial: float | None = None
    address: str | None = None
    register_model: str | None = None
    search_id: str | None = None  # tags the MLflow parent run; None for a search saved before ids


@dataclass(frozen=True)
class Outcome:
    """What a finished search leaves behind."""

    experiment_path: Path
    best: analysis.Best | None
    export_path: Path | None
    counts: Counter
    seconds: float
    audit: str | None = None
    verdict: Any = None
    report: tuple[Path, ...] = ()
    interrupted: bool = False
    errors: Counter = field(default_factory=Counter)
    mlflow_run: str | None = None  # the search's MLflow parent run

    @property
    def exit_status(self) -> ExitStatus:
        if self.interrupted:
            return ExitStatus.INTERRUPTED
        total = sum(self.counts.values())
        if total and self.counts.get("errored", 0) == total:
            return ExitStatus.ALL_TRIALS_FAILED
        return ExitStatus.OK


def quiet_logs(*, verbose: bool) -> None:
    """Keep the driver's output to our live view: RLlib, Tune and MLflow chatter only with --verbose."""
    if verbose:
        return
    for name in ("ray.rllib", "ray.train"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # Tune logs every failed trial's traceback at ERROR; the live view and summary say it in one line.
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is first imported
    for name in ("mlflow", "alembic", "optuna", "hpbandster"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # PB2's Gaussian process fit warns about convergence on almost every perturbation.
    warnings.filterwarnings("ignore", module=r"sklearn\.gaussian_process")
    warnings.filterwarnings("ignore", message=r".*TPESampler.*|.*CmaEsSampler.*|.*multivariate.*")


def ensure_ray(*, num_cpus: int | None, verbose: bool, num_gpus: float | None = None,
               address: str | None = None, plugins: Sequence[str] = ()) -> None:
    """Start a local Ray, or join the cluster at `address`; reuse a session already started.

    A local Ray is never a running cluster joined by accident (address="local"). Joining one
    ships our package to its workers through Ray's runtime environment, so workers that only
    have Ray and our dependencies installed still run our trainables. Inside a Ray job
    (tune-rl submit) the search joins the job's cluster.
    """
    for key, value in (("RAY_enable_worker_prestart", "0"), ("RAY_DEDUP_LOGS", "0"),
                       ("RAY_AIR_NEW_OUTPUT", "0"),  # with verbose=0 the old engine prints nothing
                       ("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1"),  # we add CSV+JSON, not TensorBoard
                       ("TUNE_GLOBAL_CHECKPOINT_S", "2")):  # experiment-state snapshots at most 2 s old
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        return
    logs = {"log_to_driver": verbose, "logging_level": logging.INFO if verbose else logging.ERROR}
    from tune_runner.search.jobs import inside_job

    if address or inside_job():
        _join(address or "auto", logs, plugins=plugins)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, loopback-only instance
    from tune_runner.search import reaper

    os.environ[reaper.MARK] = str(os.getpid())  # inherited by every Ray process we start
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, **logs)
    import subprocess

    unmarked = {k: v for k, v in os.environ.items() if k != reaper.MARK}  # the reaper must not reap itself
    subprocess.Popen([sys.executable, "-m", "tune_runner.search.reaper", str(os.getpid())], start_new_session=True,
                     env=unmarked, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _join(address: str, logs: dict, *, plugins: Sequence[str] = ()) -> None:
    """ray.init on an existing cluster (`auto`, host:port or ray://host:10001), with our package shipped.

    A Ray job's driver has it already: the job's runtime env (tune-rl submit) applies to everything
    the job starts, and Ray refuses a ray.init that sets py_modules again.
    """
    import ray

    from tune_runner.paths import package_for_cluster
    from tune_runner.search.jobs import inside_job

    try:
        if inside_job():
            ray.init(address=address, **logs)
            return
        check_address(address)
        with package_for_cluster() as package, tempfile.TemporaryDirectory(prefix="tune-rl-plugins-") as tmp:
            modules = [str(package)]  # uploaded by ray.init; the staged copies can go after
            if plugins:
                modules.append(str(stage_plugins(plugins, Path(tmp))))
            ray.init(address=address, runtime_env={"py_modules": modules}, **logs)
    except ImportError as exc:
        raise UserError(f"--address {address}: Ray Client needs more packages ({exc}); "
                        f"pip install 'tune-rl[cluster]'") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"--address {address}: cannot join the Ray cluster "
                        f"({str(exc).strip().splitlines()[0]}); check the address, or drop --address "
                        f"for a local Ray") from None


SHIPPED_PLUGINS = "tune_rl_user_plugins"  # the package a joined cluster's workers import user plugins from
_shipped: dict[str, str] = {}  # plugin path on this machine -> its module reference on the cluster


def stage_plugins(plugins: Sequence[str], tmp: Path) -> Path:
    """The user's plugin files copied into a package for a runtime env's py_modules (workers may not see
    this machine's files); remembers each file's module there, which the trials import instead."""
    package = tmp / SHIPPED_PLUGINS
    package.mkdir()
    (package / "__init__.py").write_text("")
    for n, path in enumerate(plugins):
        module = f"p{n}_{re.sub(r'[^0-9a-zA-Z_]', '_', Path(path).stem)}"
        shutil.copy2(path, package / f"{module}.py")
        _shipped[path] = f"module:{SHIPPED_PLUGINS}.{module}"
    return package


def trial_plugins(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec as trials see it: plugins shipped to a joined cluster are imported from there."""
    return replace(spec, plugins=tuple(_shipped.get(p, p) for p in spec.plugins))


local_folder = storage.local_folder  # the experiment's folder on this machine (a URI's local copy)


def _check_new(where: storage.Storage, name: str, exp_path: Path) -> None:
    """A new search must not write into an existing experiment (here, or at a --storage URI)."""
    target = storage.join(where, name)
    taken = exp_path if exp_path.exists() else target if storage.is_uri(target) and storage.exists(target) else None
    if taken is not None:
        raise UserError(f"--name {name}: {taken} exists already; choose another name "
                        f"(or continue it: tune-rl resume {name})")


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
    prepared = prepare(with_trial_resources(spec, cpus=options.cpus_per_trial, gpus=options.gpus_per_trial),
                       storage=options.storage)
    spec = prepared.spec
    check_register(spec, options.register_model)
    mlflow_uri.check_uri(options.mlflow_uri)
    check_storage(options.storage)
    if options.address:
        check_address(options.address)  # here, not only on joining: a refusal comes before the header
    name = experiment_name(spec, options, suffix=suffix)
    exp_path = local_folder(options.storage, name)
    if not options.resume:
        _check_new(options.storage, name, exp_path)
        options = replace(options, search_id=resume.new_search_id())
    started = time.monotonic()
    _header(spec, name, out)
    ensure_ray(num_cpus=options.num_cpus, verbose=options.verbose, num_gpus=options.num_gpus,
               address=options.address, plugins=spec.plugins)
    check_resources(spec, prepared)
    _note_storage(options, out)
    if not options.resume:  # after the checks that need Ray, so that a refused search leaves nothing
        resume.save(exp_path, spec=spec, options=options)
    mlflow, exp_id, parent, callbacks, audit = _tracking(spec, options, exp_path, population=prepared.population,
                                                         out=out)
    status = "FAILED"
    try:
        unfinished = _fit(trial_plugins(spec), prepared, name=name, where=options.storage, local=exp_path,
                          callbacks=callbacks, resume=options.resume, max_failures=options.max_failures)
        if unfinished:
            status = "KILLED"
            print(f"\ninterrupted: {unfinished} trial(s) unfinished; the search's state is saved. Continue it with:\n"
                  f"  {resume.command(name, options)}", file=out, flush=True)
            return Outcome(exp_path, None, None, Counter(), time.monotonic() - started, interrupted=True)
        outcome = _finish(spec, exp_path, options, started, audit=audit.summary() if audit else None, out=out)
        status = "FINISHED" if outcome.exit_status == ExitStatus.OK else "FAILED"
        _log_outcome(mlflow, parent, spec, outcome)
        policy = _log_model(spec, outcome, options, experiment_id=exp_id, parent=parent)
        resume.mark_finished(exp_path, status=status.lower(), counts=dict(outcome.counts))
        if storage.is_uri(options.storage):  # best.yaml, the report and our marks join Tune's files there
            storage.upload(exp_path, storage.join(options.storage, name))
    except KeyboardInterrupt:
        status = "KILLED"
        print(f"\ninterrupted at once; continue with: {resume.command(name, options)}", file=out, flush=True)
        raise
    finally:
        mlflow.set_tag(parent, "tune_rl.status", status.lower())
        mlflow.set_terminated(parent, status=status)
    _summary(spec, outcome, options, mlflow_run=parent, model=policy, out=out)
    return replace(outcome, mlflow_run=parent)


def _tracking(spec: ExperimentSpec, options: RunOptions, exp_path: Path, *, population: bool,
              out: TextIO) -> tuple[Any, str, str, list, Any]:
    """The MLflow parent run (continued on a resume, with its child runs) and the Tune callbacks."""
    mlflow = tracking.client(options.mlflow_uri)
    exp_id = tracking.experiment_id(mlflow, spec.name, options.mlflow_uri)
    parent = tracking.find_parent(mlflow, exp_id, search_id=options.search_id, exp_path=exp_path) \
        if options.resume else None
    children = tracking.children(mlflow, exp_id, parent) if parent else {}
    if parent:
        mlflow.update_run(parent, status="RUNNING")
        mlflow.set_tag(parent, "tune_rl.status", "running")
        print(f"  resuming: {len(children)} trial run(s) continue in MLflow run {parent}", file=out, flush=True)
        log_spec(mlflow, parent, spec)  # a search started before the spec was logged gets it now
    else:
        parent = _open_parent(mlflow, exp_id, spec, exp_path.name, exp_path, search_id=options.search_id)
    logged = tuple(spec.fixed) + spec.searched
    tracker = tracking.MlflowTracking(uri=options.mlflow_uri, experiment_id=exp_id, parent_run_id=parent,
                                      logged_keys=logged, ending=spec.ending)
    tracker.runs.update(children)
    callbacks = [_live_view(spec, out), tracker]
    audit = None
    if population:
        from tune_runner.audit import make_callback

        audit = make_callback(out)
        callbacks.append(audit)
    return mlflow, exp_id, parent, callbacks, audit


def _note_storage(options: RunOptions, out: TextIO) -> None:
    """On a multi-node cluster a local results folder must be one every node reaches."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) > 1 and "://" not in str(options.storage):
        print(f"  note: {len(nodes)} nodes; --storage {options.storage} is a local path, so every node must "
              f"reach it (a shared folder), or use a URI like s3://bucket/results", file=out, flush=True)


def _fit(spec: ExperimentSpec, prepared: Prepared, *, name: str, where: storage.Storage, local: Path,
         callbacks: list, resume: bool = False, max_failures: int = MAX_FAILURES) -> int:
    """Run (or continue) the Tune experiment; the number of trials left unfinished (interrupted).

    With a URI storage, the experiment is then fetched into `local` for what follows."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from tune_runner.search.progress_csv import ProgressCSV
    run_config = tune.RunConfig(
        name=name, storage_path=str(where), stop=BudgetStopper(spec),
        callbacks=[*callbacks, ProgressCSV(), JsonLoggerCallback()], verbose=0,
        checkpoint_config=tune.CheckpointConfig(num_to_keep=checkpoints_to_keep(prepared),
                                                checkpoint_frequency=CHECKPOINT_EVERY
                                                if _checkpoints(spec) else 0,
                                                checkpoint_at_end=_checkpoints(spec)),
        failure_config=tune.FailureConfig(max_failures=max_failures))
    if resume:
        tuner = tune.Tuner.restore(str(storage.join(where, name)), trainable=prepared.trainable, resume_unfinished=True,
                                   resume_errored=True, param_space=spec.param_space())
        # The restored run config holds the callbacks pickled at the start; ours must be the live ones.
        tuner._local_tuner._run_config = run_config
    else:
        tuner = tune.Tuner(
            prepared.trainable,
            param_space=spec.param_space(),
            tune_config=tune.TuneConfig(metric=spec.metric, mode=spec.mode, search_alg=prepared.searcher,
                                        scheduler=prepared.scheduler, num_samples=spec.num_samples,
                                        max_concurrent_trials=spec.max_concurrent, reuse_actors=True),
            run_config=run_config)
    tuner.fit()
    # Interrupted: trials still RUNNING/PENDING in the saved state, or not created yet. (HyperBand may end a
    # search with a trial PAUSED in a bracket that never filled; that one is over.)
    if storage.is_uri(where):
        storage.download(storage.join(where, name), local)
    trials = analysis.load(local).trials
    live = sum(1 for t in trials if t.status in ("RUNNING", "PENDING"))
    return live + max(0, spec.num_trials - len(trials))


def _checkpoints(spec: ExperimentSpec) -> bool:
    from tune_runner.trainables import catalog as trainables

    return trainables.can_checkpoint(spec.trainable)


def checkpoints_to_keep(prepared: Prepared) -> int:
    """Per trial. PBT exploits the checkpoint a donor had when the exploit was decided, while the
    donor trains on and saves again (every CHECKPOINT_EVERY iterations and at each perturbation).
    Once the donor has saved this many newer ones, Ray deletes it and the exploiting trial fails to
    restore ("does not exist on storage anymore"), on every retry: 4 was too few in CI. Older ones
    are pruned, so disk use stays at this many per trial."""
    return 20 if prepared.population else 2


def _finish(spec: ExperimentSpec, exp_path: Path, options: RunOptions, started: float, *,
            audit: str | None = None, out: TextIO | None = None) -> Outcome:
    loaded = analysis.load(exp_path)
    counts = analysis.statuses(loaded, ending=spec.ending)
    errors = Counter(tracking.last_error_line(t) for t in loaded.trials if t.status == "ERROR")
    try:
        best = analysis.best_trial(loaded, metric=spec.metric, mode=spec.mode, scope="last", reached=spec.reached)
    except UserError:
        best = None
    verdict = None
    if best is not None and options.reevaluate and spec.reevaluate is not False:
        verdict = _reevaluate(spec, loaded, exp_path, options, out or sys.stdout)
        if verdict is not None:
            from tune_runner.results.robust import scope

            best = analysis.trial_best(loaded, verdict.winner.candidate.trial_id, metric=spec.metric,
                                       mode=spec.mode, value=verdict.winner.iqm, scope=scope(verdict))
    export_path = None
    if best is not None and options.export:
        export_path = export.write(export.bundle(spec, best, experiment=exp_path.name, verdict=verdict),
                                   exp_path / "best.yaml")
    from tune_runner.results import summary as report

    written = report.write(loaded, spec, folder=exp_path, title=exp_path.name)
    return Outcome(exp_path, best, export_path, counts, time.monotonic() - started, audit, verdict, tuple(written),
                   errors=errors)


def _reevaluate(spec: ExperimentSpec, loaded: Any, exp_path: Path, options: RunOptions, out: TextIO) -> Any:
    """The automatic robust-best stage (tune_runner.results.robust), or None when it does not apply."""
    from tune_runner.results import robust
    from tune_runner.search.reevaluate import reevaluate

    settings = spec.reevaluate if isinstance(spec.reevaluate, dict) else {}
    top, seeds = options.top or settings.get("top"), options.seeds or settings.get("seeds")
    shape = robust.plan(spec.num_trials, top=top, seeds=seeds)
    picks = robust.candidates(loaded, metric=spec.metric, mode=spec.mode, k=shape[0],
                              reached=spec.reached) if shape else []
    if shape is None or len(picks) < 2 and top is None:
        print(f"re-evaluation skipped: {spec.num_trials} trial(s) is too few for {robust.DEFAULT_TOP} configs x "
              f"{robust.DEFAULT_SEEDS} seeds (tune-rl best EXP --reevaluate K --seeds N runs it anyway)",
              file=out, flush=True)
        return None
    verdict = reevaluate(spec, picks, seeds=shape[1], storage=exp_path, name="reevaluation", out=out)
    from tune_runner.results.report import save_verdict

    save_verdict(verdict, exp_path, metric=spec.metric)
    return verdict


def _live_view(spec: ExperimentSpec, out: TextIO) -> Any:
    from tune_runner.search.progress import LiveView

    return LiveView(searched=spec.searched, budget=spec.budget_env_steps, metric=spec.metric, mode=spec.mode,
                    ending=spec.ending, out=out)


def _open_parent(mlflow: Any, exp_id: str, spec: ExperimentSpec, name: str, exp_path: Path, *,
                 search_id: str | None = None) -> str:
    from mlflow.entities import Param

    tags = {"tune_rl.space": spec.name, "tune_rl.experiment_path": str(exp_path), "tune_rl.status": "running",
            "mlflow.note.content": spec.description}
    if search_id:
        tags["tune_rl.search_id"] = search_id
    run = mlflow.create_run(exp_id, run_name=name, tags=tags)
    params = {"space": spec.name, "trainable": spec.trainable, "env": spec.env,
              "searcher": spec.searcher.name, "scheduler": spec.scheduler.name,
              "budget_env_steps": spec.budget_env_steps, "num_samples": spec.num_samples,
              "metric": spec.metric, "mode": spec.mode}
    params.update({f"space.{p.name}": p.describe() for p in spec.space})
    mlflow.log_batch(run.info.run_id, params=[Param(k, str(v)[:500]) for k, v in params.items()])
    log_spec(mlflow, run.info.run_id, spec)
    return run.info.run_id


def log_spec(mlflow: Any, parent: str, spec: ExperimentSpec) -> None:
    """The search's validated spec as an artifact of its parent run, the same YAML as the folder's
    tune_rl_spec.yaml: what `tune-rl best runs:/<parent>` rebuilds the search from, without the folder."""
    import yaml

    mlflow.log_text(parent, yaml.safe_dump(spec.as_dict(), sort_keys=False), resume.SPEC_FILE)


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
    if outcome.verdict is not None:
        values.update(_robust_metrics(outcome.verdict))
        mlflow.set_tag(parent, "tune_rl.robust_verdict", outcome.verdict.sentence())
        if outcome.verdict.target is not None:
            from tune_runner.results.robust import headline

            mlflow.set_tag(parent, "tune_rl.robust_summary", headline(outcome.verdict.winner, outcome.verdict.target))
    mlflow.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()
                                      if math.isfinite(float(v))], params=params)
    for path in (outcome.export_path, *outcome.report):
        if path is not None:
            mlflow.log_artifact(parent, str(path))


def _robust_metrics(verdict: Any) -> dict[str, float]:
    """The re-evaluated winner's numbers for the parent run: the final metric's IQM and CI, and with stop_at
    the share of seeds that solved and the IQM (and CI) of env steps to solve, which ranked it."""
    winner = verdict.winner
    values = {"robust_iqm": winner.iqm, "robust_ci_low": winner.ci[0], "robust_ci_high": winner.ci[1]}
    if verdict.target is not None:
        values.update(robust_solved_share=winner.share, robust_solved_seeds=sum(winner.solved),
                      robust_seeds=len(winner.solved), robust_steps_to_solve_iqm=winner.steps_iqm,
                      robust_steps_to_solve_ci_low=winner.steps_ci[0],
                      robust_steps_to_solve_ci_high=winner.steps_ci[1])
    return values


def _log_model(spec: ExperimentSpec, outcome: Outcome, options: RunOptions, *, experiment_id: str,
               parent: str) -> Any:
    """The best trial's policy as an MLflow model on the parent run (tune_runner.results.model)."""
    from tune_runner.results import model

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


def _best_line(spec: ExperimentSpec, best: analysis.Best, verdict: Any) -> str:
    """What the best trial scored and how it was chosen: with stop_at, by solving (soonest, or on fresh seeds)."""
    from tune_runner.search.progress import fmt_value

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


def _summary(spec: ExperimentSpec, outcome: Outcome, options: RunOptions, *, mlflow_run: str, model: Any,
             out: TextIO) -> None:
    from tune_runner.search.progress import fmt_config

    minutes, seconds = divmod(int(outcome.seconds), 60)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(outcome.counts.items()))
    print(f"\ntrials     {sum(outcome.counts.values())}: {counts} in {minutes}m{seconds:02d}s", file=out)
    if outcome.errors:
        (line, times), = outcome.errors.most_common(1)
        print(f"errors     {sum(outcome.errors.values())} trial(s) errored; most common ({times}x): {line}", file=out)
    best = outcome.best
    if best is not None:
        print(f"best       {best.trial_id}  {_best_line(spec, best, outcome.verdict)}", file=out)
        print(f"config     {fmt_config(best.config, spec.searched) or '(nothing searched)'}", file=out)
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
          f"{_where_to_look(options.mlflow_uri)})", file=out)
    print(f"model      {model.note}", file=out)
    if outcome.export_path is not None:
        print(f"exported   {outcome.export_path}  (re-run: tune-rl train --config {outcome.export_path})", file=out)
    out.flush()
