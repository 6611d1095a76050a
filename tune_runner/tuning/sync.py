"""`tune-rl sync NAME`: write to MLflow what a search spooled while its store was away (tracking.spool).

A search whose store was still unreachable when it ended leaves its calls in its folder and says so in its
summary, with this command. It finds the search and its store as `tune-rl resume` does (the saved run options;
--mlflow-uri restates a store saved without its secret), rebuilds the search's tracker on the runs the store
holds, and runs the spooled calls in their order: the runs created while the store was away are created, their
params and every metric point follow, and the parent run gets its outcome and its end. Then MLflow holds what
the search's folder holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from tune_runner import storage
from tune_runner.errors import ExitStatus, UserError
from tune_runner.paths import SPOOL_FILE
from tune_runner.tracking.uri import redacted


def sync(name: str, *, where: storage.Storage | None, mlflow_uri: str | None, out: TextIO) -> ExitStatus:
    """Write search `name`'s spooled MLflow calls; one line says what was written. Not while the search itself
    runs (it writes its spool): its run lock is taken for the while (resume.hold)."""
    from tune_runner.tuning import resume

    folder = resume.locate(name, where=where)
    resume.hold(folder)
    try:
        return _sync(folder, where=where, mlflow_uri=mlflow_uri, out=out)
    finally:
        resume.release()


def _sync(folder: Path, *, where: storage.Storage | None, mlflow_uri: str | None, out: TextIO) -> ExitStatus:
    from tune_runner.tracking import spool as spooled
    from tune_runner.tuning import resume

    path = folder / SPOOL_FILE
    if not path.is_file():
        print(f"sync       nothing to write: {folder.name} holds no MLflow calls that waited for the store",
              file=out)
        return ExitStatus.OK
    fields = resume.continued(resume.read_run(folder), folder=folder, where=where, mlflow_uri=mlflow_uri,
                              num_cpus=None)
    uri = fields["mlflow_uri"]
    tracker = _tracker(path, uri)
    again = resume.command(folder.name, storage=fields["storage"], mlflow_uri=uri, verb="sync")
    try:
        tracker.mlflow.get_experiment(tracker.experiment_id)
        _known_runs(tracker)
    except Exception as exc:
        if spooled.unreachable(exc):
            raise UserError(f"--mlflow-uri {redacted(uri)}: unreachable ({type(exc).__name__}); start the store, "
                            f"then run: {again}") from None
        raise
    calls = tracker.spool.calls()
    left = spooled.replay(tracker, calls)
    tracker.spool.keep(left)
    if left:
        raise UserError(f"--mlflow-uri {redacted(uri)}: went away again after {len(calls) - len(left)} of "
                        f"{len(calls)} call(s) (the rest wait in {path}); run again: {again}")
    print(f"sync       {len(calls)} MLflow call(s) of {folder.name} written to {redacted(uri)} (parent run "
          f"{tracker.parent_run_id})", file=out)
    return ExitStatus.OK


def _tracker(path: Path, uri: str) -> Any:
    """The search's tracker as its spool's header names it."""
    from tune_runner.tracking import spool as spooled
    from tune_runner.tracking.callback import MlflowTracking

    header = next(spooled.read(path), (None, None))
    if header[0] != "header" or not isinstance(header[1], dict):
        raise UserError(f"{path}: not a spool of MLflow calls (no header); it was damaged: delete it, and the "
                        f"calls in it are lost")
    tracker = MlflowTracking(uri=uri, experiment_id=header[1]["experiment_id"],
                             parent_run_id=header[1]["parent_run_id"], logged_keys=(), ending=lambda _: "done",
                             spool_path=str(path))
    return tracker


def _known_runs(tracker: Any) -> None:
    """The runs of the search the store already holds (created before it went away), for the calls that follow."""
    from tune_runner.tracking.callback import children, member_runs

    tracker.runs.update(children(tracker.mlflow, tracker.experiment_id, tracker.parent_run_id))
    tracker.continue_members(member_runs(tracker.mlflow, tracker.experiment_id, tracker.parent_run_id))
