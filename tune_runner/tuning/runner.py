"""Compose a validated spec into a Ray Tune run, log it to MLflow, select and export the best.

Ray's start (or a cluster's join) is tune_runner.cluster.session's, the MLflow parent run
tune_runner.tracking.parent's, what is printed around the live view tune_runner.tuning.console's.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tune_runner import paths, storage
from tune_runner.cluster import session
from tune_runner.cluster.session import (  # noqa: F401 - cli and tests call them here
    check_address,
    ensure_ray,
    quiet_logs,
    trial_plugins,
)
from tune_runner.errors import ExitStatus, UserError
from tune_runner.results import analysis, export, robust
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.tracking import callback as tracking
from tune_runner.tracking import parent as parent_run
from tune_runner.tracking import uri as mlflow_uri
from tune_runner.tuning import console, disk, resume
from tune_runner.tuning.preflight import (  # noqa: F401 - prepare and Prepared are part of this module's API
    Prepared,
    check_register,
    check_resources,
    check_storage,
    prepare,
    trials_at_once,
    with_trial_resources,
)
from tune_runner.tuning.stopper import BudgetStopper  # noqa: F401 - 0.1.0's pickles name tune_runner.runner.BudgetStopper
from tune_runner.tuning.warm import WarmTrials

if TYPE_CHECKING:
    from tune_runner.trainables.backends import Backend

MAX_FAILURES = 2  # retries of a failing trial, each from its newest checkpoint
CHECKPOINT_EVERY = 5  # training iterations between a trial's checkpoints (and at its end)
FINISHED_MARK = resume.FINISHED_MARK  # written when a search has run to its end


@dataclass(frozen=True)
class RunOptions:
    """What the command line adds to a spec: where results go and how loud to be. Saved with the search
    (tune_runner.tuning.resume), less `name`, `verbose` and `resume`."""

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
    disk_full: bool = False  # stopped (resumable) because its results folder ran short of space (tuning.disk)
    mlflow_run: str | None = None  # the search's MLflow parent run

    @property
    def exit_status(self) -> ExitStatus:
        if self.disk_full:
            return ExitStatus.ERROR
        if self.interrupted:
            return ExitStatus.INTERRUPTED
        total = sum(self.counts.values())
        if total and self.counts.get("errored", 0) == total:
            return ExitStatus.ALL_TRIALS_FAILED
        return ExitStatus.OK


local_folder = storage.local_folder  # the experiment's folder on this machine (a URI's local copy)


def _check_new(where: storage.Storage, name: str, exp_path: Path) -> None:
    """A new search must not write into an existing experiment (here, or at a --storage URI)."""
    target = storage.join(where, name)
    taken = exp_path if exp_path.exists() else target if storage.is_uri(target) and storage.exists(target) else None
    if taken is not None:
        raise UserError(f"--name {name}: {taken} exists already; choose another name, or continue that search: "
                        f"{resume.command(name, storage=where)}")  # the command last: copied to the line's end


def experiment_name(spec: ExperimentSpec, options: RunOptions, *, suffix: str = "") -> str:
    """--name, or `<space>[-suffix]-<timestamp>`."""
    if options.name:
        return options.name
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{spec.name}{'-' + suffix if suffix else ''}-{stamp}"


def run(spec: ExperimentSpec, options: RunOptions, *, out: TextIO | None = None, suffix: str = "",
        record: Backend | None = None) -> Outcome:
    """Validate, launch, track, select the best trial and export it. `record`: the spec's trainable, where the
    caller has resolved it already (preflight.prepare); the one record is what every later stage asks. The
    search's folder is locked while it runs (resume.hold): a second process that resumes it is refused."""
    try:
        return _run(spec, options, out=out, suffix=suffix, record=record)
    finally:
        resume.release()


def _run(spec: ExperimentSpec, options: RunOptions, *, out: TextIO | None, suffix: str,
         record: Backend | None) -> Outcome:
    out = out or sys.stdout
    quiet_logs(verbose=options.verbose)
    prepared, name, exp_path, options = _checked(spec, options, suffix=suffix, record=record)
    if options.resume:
        resume.hold(exp_path)  # one process at a time: a second resume of it is refused here
    spec = prepared.spec
    started = time.monotonic()
    console.header(spec, name, out)
    for key, value in STORE_RETRIES.items():  # a store that is away: a call fails in seconds and waits in the spool
        os.environ.setdefault(key, value)
    store = _open_store(options.mlflow_uri, warm=("torch",) if prepared.backend.exports_policy else ())
    shipped = ensure_ray(num_cpus=options.num_cpus, verbose=options.verbose, num_gpus=options.num_gpus,
                         address=options.address, plugins=spec.plugins,
                         worker_modules=prepared.backend.worker_modules)
    _checked_on_ray(prepared, options, exp_path, out=out)
    mlflow, exp_id, parent, callbacks, audit = _tracking(spec, options, exp_path, population=prepared.population,
                                                         out=out, store=store)
    tracker = next(c for c in callbacks if isinstance(c, tracking.MlflowTracking))
    guard = disk.DiskGuard(exp_path)
    callbacks.append(guard)
    status = "FAILED"
    warm = _warm_trials(spec, options, batched=prepared.backend.seeds)
    try:
        with warm.keeping(), session.watching(resume.run_command(name, options)):
            unfinished = _fit(trial_plugins(spec, shipped), prepared, name=name, where=options.storage,
                              local=exp_path, callbacks=callbacks, resume=options.resume,
                              max_failures=options.max_failures)
        if unfinished and guard.tripped:
            status = "KILLED"
            print(f"\ntune-rl: {guard.said(resume.run_command(name, options))}", file=sys.stderr, flush=True)
            return Outcome(exp_path, None, None, Counter(), time.monotonic() - started, interrupted=True,
                           disk_full=True)
        if unfinished:
            status = "KILLED"
            print(f"\ninterrupted: {unfinished} trial(s) unfinished; the search's state is saved. Continue it with:\n"
                  f"  {resume.run_command(name, options)}", file=out, flush=True)
            return Outcome(exp_path, None, None, Counter(), time.monotonic() - started, interrupted=True)
        with session.watching(resume.run_command(name, options)):  # the re-evaluation runs on it too
            outcome = _finish(spec, exp_path, options, started, record=prepared.backend,
                              audit=audit.summary() if audit else None, out=out, warm=warm)
        status = "FINISHED" if outcome.exit_status == ExitStatus.OK else "FAILED"
        tracker.call("_log_outcome", spec, outcome)
        policy = _log_model(prepared.backend, outcome, options, experiment_id=exp_id, parent=parent,
                            store_away=tracker.spool is not None and tracker.spool.active)
        resume.mark_finished(exp_path, status=status.lower(), counts=dict(outcome.counts))
        if storage.is_uri(options.storage):  # best.yaml, the report and our marks join Tune's files there
            storage.upload(exp_path, storage.join(options.storage, name))
    except KeyboardInterrupt:
        status = "KILLED"
        print(f"\ninterrupted at once; continue with: {resume.run_command(name, options)}", file=out, flush=True)
        raise
    finally:
        warm.release()
        tracker.call("_close_parent", status)
    console.summary(spec, outcome, options, mlflow_run=parent, model=policy, out=out)
    if tracker.spool is not None and tracker.spool.outage is not None:
        sync = resume.run_command(name, options, verb="sync")
        print(f"mlflow     {tracker.spool.outage.said(tracker.spool.path, sync)}", file=out)
    return replace(outcome, mlflow_run=parent)


# MLflow's REST client retries a failed call 7 times with backoff (minutes, the writer waiting on a dead server);
# the search's spool (tracking.spool) keeps the call instead and tries the store again every 10 s. A user's own
# setting of these wins.
STORE_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def _checked(spec: ExperimentSpec, options: RunOptions, *, suffix: str,
             record: Backend | None = None) -> tuple[Prepared, str, Path, RunOptions]:
    """Every check that needs no Ray, before anything is printed or written: the prepared search, its name, its
    folder on this machine, and the options (a new search gets its id here)."""
    prepared = prepare(with_trial_resources(spec, cpus=options.cpus_per_trial, gpus=options.gpus_per_trial),
                       storage=options.storage, record=record)
    check_register(prepared, options.register_model)
    mlflow_uri.check_uri(options.mlflow_uri)
    check_storage(options.storage)
    if options.address:
        check_address(options.address)  # here, not only on joining: a refusal comes before the header
    name = experiment_name(prepared.spec, options, suffix=suffix)
    exp_path = local_folder(options.storage, name)
    if not options.resume:
        _check_new(options.storage, name, exp_path)
        options = replace(options, search_id=resume.new_search_id())
    return prepared, name, exp_path, options


def _checked_on_ray(prepared: Prepared, options: RunOptions, exp_path: Path, *, out: TextIO) -> None:
    """The checks that need Ray; then a new search's options are saved (a refused search leaves nothing)."""
    check_resources(prepared.spec, prepared)
    if prepared.spec.configs_per_trial > 1 and prepared.spec.max_concurrent is None:
        prepared.searcher.concurrent = trials_at_once(prepared.spec, prepared.trainable)
    _note_storage(options, out)
    if not options.resume:
        resume.save(exp_path, spec=prepared.spec, options=options)
        resume.hold(exp_path)


def _open_store(uri: str, *, warm: Sequence[str] = ()) -> Future:
    """MLflow's client for `uri`, made in a thread while Ray starts (ray.init mostly waits for Ray's
    processes): importing MLflow takes 2-4 s of the driver's own time and opening a SQLite store 1-2 s
    more. A store that would be created by opening it is not opened there (the thread only imports
    MLflow, and answers None): a search that the checks on Ray refuse must leave no store behind.
    The modules in `warm` are imported there too: torch, which the driver needs only to log the best policy
    as an MLflow model at the end (3 s there, after the last trial, with nothing else left to run)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tune-rl-mlflow-store")
    try:
        return pool.submit(_store_if_there, uri)
    finally:
        for module in warm:  # after the store, which the search waits for
            pool.submit(importlib.import_module, module)
        pool.shutdown(wait=False)


def _store_if_there(uri: str) -> Any:
    if mlflow_uri.opens_without_writing(uri):
        return tracking.client(uri)
    import mlflow.tracking  # noqa: F401 - the imports alone

    if uri.lower().startswith(mlflow_uri.DATABASE_SCHEMES):
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401 - SQLAlchemy and Alembic
    return None


def _tracking(spec: ExperimentSpec, options: RunOptions, exp_path: Path, *, population: bool,
              out: TextIO, store: Future) -> tuple[Any, str, str, list, Any]:
    """The MLflow parent run (continued on a resume, with its child runs) and the Tune callbacks; `store` is
    _open_store's."""
    mlflow = store.result() or tracking.client(options.mlflow_uri)
    exp_id = tracking.experiment_id(mlflow, spec.name, options.mlflow_uri)
    parent = tracking.find_parent(mlflow, exp_id, search_id=options.search_id, exp_path=exp_path) \
        if options.resume else None
    children = tracking.children(mlflow, exp_id, parent) if parent else {}
    if parent:
        parent_run.reopen(mlflow, parent, spec)
        print(f"  resuming: {len(children)} trial run(s) continue in MLflow run {parent}", file=out, flush=True)
    else:
        parent = parent_run.open_run(mlflow, exp_id, spec, name=exp_path.name, exp_path=exp_path,
                                     search_id=options.search_id)
    logged = tuple(spec.fixed) + spec.searched
    tracker = tracking.MlflowTracking(uri=options.mlflow_uri, experiment_id=exp_id, parent_run_id=parent,
                                      logged_keys=logged, ending=spec.ending,
                                      spool_path=str(exp_path / paths.SPOOL_FILE))
    tracker.runs.update(children)
    if children and spec.configs_per_trial > 1:  # a resumed population trial's members log on in their runs
        tracker.continue_members(tracking.member_runs(mlflow, exp_id, parent))
    callbacks = [_live_view(spec, out), tracker]
    audit = None
    if population:
        from tune_runner.trainables.audit import make_callback

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

    from tune_runner.tuning.progress_csv import ProgressCSV
    run_config = tune.RunConfig(
        name=name, storage_path=str(where), stop=BudgetStopper(spec),
        callbacks=[*callbacks, ProgressCSV(), JsonLoggerCallback()], verbose=0,
        checkpoint_config=tune.CheckpointConfig(num_to_keep=checkpoints_to_keep(prepared),
                                                checkpoint_frequency=CHECKPOINT_EVERY
                                                if prepared.backend.can_checkpoint else 0,
                                                checkpoint_at_end=prepared.backend.can_checkpoint),
        failure_config=tune.FailureConfig(max_failures=max_failures))
    if resume:
        tuner = tune.Tuner.restore(str(storage.join(where, name)), trainable=prepared.trainable, resume_unfinished=True,
                                   resume_errored=True,
                                   param_space=spec.param_space(searched=not prepared.owns_space))
        # The restored run config holds the callbacks pickled at the start; ours must be the live ones.
        tuner._local_tuner._run_config = run_config
    else:
        tuner = tune.Tuner(
            prepared.trainable,
            param_space=spec.param_space(searched=not prepared.owns_space),
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
    if spec.configs_per_trial > 1:  # its trials are as many as ran at once, each refilled: none is owed
        return live
    return live + max(0, spec.num_trials - len(trials))


def checkpoints_to_keep(prepared: Prepared) -> int:
    """Per trial. PBT exploits the checkpoint a donor had when the exploit was decided, while the
    donor trains on and saves again (every CHECKPOINT_EVERY iterations and at each perturbation).
    Once the donor has saved this many newer ones, Ray deletes it and the exploiting trial fails to
    restore ("does not exist on storage anymore"), on every retry: 4 was too few in CI. Older ones
    are pruned, so disk use stays at this many per trial."""
    return 20 if prepared.population else 2


def _reevaluation(spec: ExperimentSpec, options: RunOptions) -> tuple[int | None, int | None] | None:
    """The re-evaluation's top and seeds as asked (the flags over the space's `reevaluate`; None for a default),
    or None when it is off."""
    if not options.reevaluate or spec.reevaluate is False:
        return None
    settings = spec.reevaluate if isinstance(spec.reevaluate, dict) else {}
    return options.top or settings.get("top"), options.seeds or settings.get("seeds")


def _warm_trials(spec: ExperimentSpec, options: RunOptions, *, batched: bool) -> WarmTrials:
    """What the re-evaluation can start on: as many of the search's last trial actors as it runs trials (none
    when it will not run)."""
    asked = _reevaluation(spec, options)
    shape = robust.plan(spec.num_trials, top=asked[0], seeds=asked[1]) if asked else None
    if shape is None:
        return WarmTrials(keep=0)
    return WarmTrials(keep=shape[0] if batched else shape[0] * shape[1])


def _finish(spec: ExperimentSpec, exp_path: Path, options: RunOptions, started: float, *, record: Backend,
            audit: str | None = None, out: TextIO | None = None, warm: WarmTrials | None = None) -> Outcome:
    loaded = analysis.load(exp_path)
    counts = analysis.statuses(loaded, ending=spec.ending)
    errors = Counter(tracking.last_error_line(t) for t in loaded.trials if t.status == "ERROR")
    try:
        best = analysis.best_trial(loaded, metric=spec.metric, mode=spec.mode, scope="last", reached=spec.reached)
    except UserError:
        best = None
    verdict = None
    asked = _reevaluation(spec, options)
    if best is not None and asked is not None:
        from tune_runner.tuning.reevaluate import reevaluate_best

        verdict = reevaluate_best(spec, loaded, exp_path, record=record, top=asked[0], seeds=asked[1],
                                  name="reevaluation", out=out or sys.stdout, verbose=options.verbose, warm=warm)
        if verdict is not None and verdict.decided:
            from tune_runner.results.robust import winner_best

            best = winner_best(loaded, verdict, metric=spec.metric, mode=spec.mode)
    export_path = None
    if best is not None and options.export:
        export_path = export.bundle(spec, best, record=record, experiment=exp_path.name, verdict=verdict).write(
            exp_path / paths.BUNDLE_FILE)
    from tune_runner.results import summary as report

    written = report.write(loaded, spec, folder=exp_path, title=exp_path.name)
    return Outcome(exp_path, best, export_path, counts, time.monotonic() - started, audit, verdict, tuple(written),
                   errors=errors)


def _live_view(spec: ExperimentSpec, out: TextIO) -> Any:
    from tune_runner.tuning.progress import LiveView

    return LiveView(searched=spec.searched, budget=spec.budget_env_steps, metric=spec.metric, mode=spec.mode,
                    ending=spec.ending, out=out)


def _log_model(record: Backend, outcome: Outcome, options: RunOptions, *, experiment_id: str,
               parent: str, store_away: bool = False) -> Any:
    """The best trial's policy as an MLflow model on the parent run (tune_runner.tracking.log_model); none while
    the store is away (`store_away`: the search's spool holds calls for it)."""
    from tune_runner.tracking import log_model

    if outcome.best is None:
        return log_model.NOT_LOGGED
    if store_away:
        return log_model.Logged(None, "not logged (the MLflow store was unreachable at the end of the search)")
    return log_model.log_policy(uri=options.mlflow_uri, experiment_id=experiment_id, run_id=parent,
                                record=record, best=outcome.best, register_as=options.register_model)
