"""A search's MLflow parent run, from open to close: its tags and params, the spec it ran, the outcome
(counts, best, robust verdict, best.yaml and the report's files), and its end status. The report that
`tune-rl report` draws later goes to the same run (log_report, ReportLogger).

The child runs, one per trial, are tune_runner.tracking.callback's; the policy model logged on this
run is tune_runner.tracking.log_model's. Nothing here imports MLflow or Ray at module level: `tune-rl
report` imports this module in its own process and does the MLflow work in a child (ReportLogger).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_runner.paths import REPORT_FOLDER, SPEC_FILE
from tune_runner.spec.reserved import MEMBERS_KEY
from tune_runner.tracking import uri as mlflow_uri

if TYPE_CHECKING:  # the report's child process imports this module: only what it uses
    from tune_runner.spec.experiment import ExperimentSpec


def open_run(mlflow: Any, experiment_id: str, spec: ExperimentSpec, *, name: str, exp_path: Path,
             search_id: str | None = None) -> str:
    """A new parent run for the search `name` in `exp_path`, with its space's settings as params and
    its spec as an artifact; its run id."""
    from mlflow.entities import Param

    tags = {"tune_rl.space": spec.name, "tune_rl.experiment_path": str(exp_path), "tune_rl.status": "running",
            "mlflow.note.content": spec.description}
    if search_id:
        tags["tune_rl.search_id"] = search_id
    run = mlflow.create_run(experiment_id, run_name=name, tags=tags)
    params = {"space": spec.name, "trainable": spec.trainable, "env": spec.env,
              "searcher": spec.searcher.name, "scheduler": spec.scheduler.name,
              "budget_env_steps": spec.budget_env_steps, "num_samples": spec.num_samples,
              "metric": spec.metric, "mode": spec.mode}
    params.update({f"space.{p.name}": p.describe() for p in spec.space})
    if spec.configs_per_trial > 1:  # its configs are members, a run each under their trial's (dashboard_link)
        params[MEMBERS_KEY] = spec.configs_per_trial
    limit = mlflow_uri.MAX_PARAM_LENGTH
    mlflow.log_batch(run.info.run_id, params=[Param(k, str(v)[:limit]) for k, v in params.items()])
    log_spec(mlflow, run.info.run_id, spec)
    return run.info.run_id


def reopen(mlflow: Any, parent: str, spec: ExperimentSpec) -> None:
    """A resumed search's parent run, running again."""
    mlflow.update_run(parent, status="RUNNING")
    mlflow.set_tag(parent, "tune_rl.status", "running")
    log_spec(mlflow, parent, spec)  # a search started before the spec was logged gets it now


def log_spec(mlflow: Any, parent: str, spec: ExperimentSpec) -> None:
    """The search's validated spec as an artifact of its parent run, the same YAML as the folder's
    tune_rl_spec.yaml: what `tune-rl best runs:/<parent>` rebuilds the search from, without the folder."""
    from tune_runner.spec.saved import spec_text

    mlflow.log_text(parent, spec_text(spec), SPEC_FILE)


def close(mlflow: Any, parent: str, *, status: str) -> None:
    """End the parent run: FINISHED, FAILED or KILLED (an interrupted search, resumable)."""
    mlflow.set_tag(parent, "tune_rl.status", status.lower())
    mlflow.set_terminated(parent, status=status)


def log_outcome(mlflow: Any, parent: str, *, spec: ExperimentSpec, outcome: Any) -> None:
    """A finished search's outcome (tune_runner.tuning.runner.Outcome) on its parent run: trial counts, time,
    the best trial and its searched values, the PBT audit, the robust verdict, best.yaml and the report."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    values = {f"trials_{k.replace(' ', '_')}": v for k, v in outcome.counts.items()}
    values["search_seconds"] = outcome.seconds
    params = []
    if outcome.best is not None:
        values[f"best_{spec.metric}"] = outcome.best.value
        mlflow.set_tag(parent, "tune_rl.best_trial", outcome.best.trial_id)
        chosen = {k: outcome.best.config[k] for k in spec.searched if k in outcome.best.config}
        params = [Param(f"best.{k}", v) for k, v in mlflow_uri.flat_params(chosen).items()]
    if outcome.audit:
        mlflow.set_tag(parent, "tune_rl.pbt_audit", outcome.audit)
    if outcome.verdict is not None:
        values.update(robust_metrics(outcome.verdict))
        mlflow.set_tag(parent, "tune_rl.robust_verdict", outcome.verdict.sentence())
        if outcome.verdict.target is not None:
            from tune_runner.results.robust import headline

            mlflow.set_tag(parent, "tune_rl.robust_summary", headline(outcome.verdict.winner, outcome.verdict.target))
    mlflow.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()
                                      if math.isfinite(float(v))], params=params)
    for path in (outcome.export_path, *outcome.report):
        if path is not None:
            mlflow.log_artifact(parent, str(path))


def robust_metrics(verdict: Any) -> dict[str, float]:
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


def log_report(uri: str, experiment: str, exp_path: Path, folder: Path, *, search_id: str | None = None) \
        -> str | None:
    """Log the report folder to the search's MLflow parent run (found by its search id or experiment path);
    the run's id, None when there is no such run."""
    mlflow, run_id = _find(uri, experiment, exp_path, search_id=search_id)
    if run_id is not None:
        mlflow.log_artifacts(run_id, str(folder), artifact_path=REPORT_FOLDER)
    return run_id


def _find(uri: str, experiment: str, exp_path: Path, *, search_id: str | None) -> tuple[Any, str | None]:
    """An MLflow client of the store and the search's parent run id (None: no such run)."""
    mlflow = mlflow_uri.client(uri)
    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        return mlflow, None
    return mlflow, mlflow_uri.find_parent(mlflow, found.experiment_id, search_id=search_id, exp_path=exp_path)


# The parent run as MLflow's SQLite schema holds it (tables runs, experiments, tags, unchanged since MLflow 1):
# the newest active run of the experiment with the tag, which is not a child run, as find_parent picks it.
PARENT_QUERY = """
SELECT r.run_uuid, r.artifact_uri FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id
JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? AND t.value = ?
WHERE e.name = ? AND e.lifecycle_stage = 'active' AND r.lifecycle_stage = 'active'
  AND NOT EXISTS (SELECT 1 FROM tags c WHERE c.run_uuid = r.run_uuid AND c.key = 'mlflow.parentRunId')
ORDER BY r.start_time DESC LIMIT 1"""


def local_parent(uri: str, experiment: str, exp_path: Path, *, search_id: str | None) \
        -> tuple[str, Path | None] | None:
    """The search's parent run in a SQLite store whose artifacts lie in a local folder, read with the standard
    library: (run id, its artifact folder), or ("", None) when the store has no such run. None when this cannot
    tell (another store, artifacts behind a server, a schema it does not know): MLflow's client must answer."""
    import sqlite3
    import urllib.parse

    path = mlflow_uri.sqlite_path(uri) if uri.lower().startswith("sqlite:") else None
    if path is None or not path.is_file():
        return None
    key, value = ("tune_rl.search_id", search_id) if search_id else ("tune_rl.experiment_path", str(exp_path))
    try:
        with contextlib.closing(mlflow_uri.read_sqlite(path)) as db:
            row = db.execute(PARENT_QUERY, (key, value, experiment)).fetchone()
    except sqlite3.Error:
        return None
    if row is None:
        return "", None
    run_id, artifact_uri = row
    parts = urllib.parse.urlsplit(artifact_uri or "")
    if parts.scheme not in ("", "file") or parts.netloc not in ("", "localhost"):
        return None
    return run_id, Path(urllib.parse.unquote(parts.path))


def copy_report(folder: Path, artifacts: Path) -> None:
    """What MLflow's local artifact repository does for log_artifacts(run, folder, REPORT_FOLDER)."""
    import shutil

    shutil.copytree(folder, artifacts / REPORT_FOLDER, dirs_exist_ok=True)


class ReportLogger:
    """`log_report` begun in a child process, so that importing MLflow, opening its store and finding
    the parent run (about half of `tune-rl report`, none of it needed to draw) overlap the rendering.

    The child finds the run at once, then waits for `finish(folder)` on its stdin (or an empty line:
    nothing to log) and answers with one JSON line on stdout. A SQLite store with local artifacts, the
    default, needs no child: the run is read with sqlite3 and the files copied where MLflow keeps them.
    """

    def __init__(self, uri: str, experiment: str, exp_path: Path, *, search_id: str | None = None) -> None:
        import subprocess
        import sys

        self._local = local_parent(uri, experiment, exp_path, search_id=search_id)
        self._proc = None
        if self._local is None:
            job = json.dumps({"uri": uri, "experiment": experiment, "exp_path": str(exp_path),
                              "search_id": search_id})
            self._proc = subprocess.Popen([sys.executable, "-c", CHILD, job], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, folder: Path | None) -> str | None:
        """Log `folder` (None: log nothing) and wait; the parent run id, None when there is none."""
        if self._proc is None:
            run_id, artifacts = self._local
            if folder is None or artifacts is None:
                return None
            copy_report(folder, artifacts)
            return run_id
        out, err = self._proc.communicate(f"{folder or ''}\n")
        return mlflow_uri.child_answer(out, err, doing="logging the report to MLflow")["run_id"]

    def cancel(self) -> None:
        """Stop the child without logging (the report failed)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


CHILD = "from tune_runner.tracking.parent import _log_from_child; _log_from_child()"


def _log_from_child() -> None:
    """The child of ReportLogger: argv[1] is its job as JSON; stdin names the folder once it is written."""
    import sys

    def work() -> dict[str, Any]:
        job = json.loads(sys.argv[1])
        mlflow, run_id = _find(job["uri"], job["experiment"], Path(job["exp_path"]), search_id=job["search_id"])
        folder = sys.stdin.readline().strip()
        if folder and run_id is not None:
            mlflow.log_artifacts(run_id, folder, artifact_path=REPORT_FOLDER)
        return {"run_id": run_id if folder else None}

    mlflow_uri.answer_in_child(work)
