"""MLflow tracking: one parent run per search, one child run per trial, metrics in batches.

Ray's stock MLflowLoggerCallback sends one request per metric (about a second per
iteration on SQLite here); we send one `log_batch` per trial result instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.tune import Callback

# client, find_parent and tag_filter live in mlflow_uri (no Ray import: `tune-rl report` logs with them)
# flat_params too (tune_runner.tracked types a trial's params back with it)
from tune_runner.mlflow_uri import (  # noqa: F401
    MAX_PARAM_LENGTH,
    artifact_location,
    client,
    find_parent,
    flat_params,
    tag_filter,
)

# Tune's bookkeeping keys: not worth a metric curve each.
NOT_METRICS = frozenset({
    "timestamp", "pid", "time_this_iter_s", "iterations_since_restore", "time_since_restore",
    "done", "date", "hostname", "node_ip", "trial_id", "experiment_tag", "checkpoint_dir_name",
    "should_checkpoint", "env_steps", "node_id"})
# MLflow 3's UI opens an experiment without a kind as a GenAI one (traces); ours are model training (runs).
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def experiment_id(mlflow: Any, name: str, uri: str) -> str:
    """The MLflow experiment named `name`, created if needed."""
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = artifact_location(uri)
    if location:
        location = f"{location}/{name}"
    try:
        return mlflow.create_experiment(name, artifact_location=location, tags=EXPERIMENT_TAGS)
    except Exception:  # noqa: BLE001 - a concurrent search created it first
        found = mlflow.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def metrics_of(result: dict[str, Any], *, step: int, now_ms: int) -> list[Any]:
    """The numeric, finite values of a trial result as MLflow metrics at `step` env steps; a seed's own curves
    (`seed_<i>/<name>`, tune_runner.spec.seeds) beside the aggregate, less the same bookkeeping."""
    from mlflow.entities import Metric

    return [Metric(key, float(value), now_ms, step) for key, value in result.items()
            if key.rpartition("/")[2] not in NOT_METRICS and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)]


class MlflowTracking(Callback):
    """Child runs per trial under a parent run that the runner opened."""

    def __init__(self, *, uri: str, experiment_id: str, parent_run_id: str, logged_keys: tuple[str, ...],
                 ending: Callable[[dict], str]) -> None:
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.logged_keys = logged_keys
        self.ending = ending
        self.runs: dict[str, str] = {}
        self._client: Any = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None  # Tune pickles callbacks with the experiment state
        return state

    @property
    def mlflow(self) -> Any:
        if self._client is None:
            self._client = client(self.uri)
        return self._client

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id in self.runs:
            return
        run = self.mlflow.create_run(self.experiment_id, run_name=trial.trial_id, tags={
            "mlflow.parentRunId": self.parent_run_id, "tune_rl.trial_id": trial.trial_id,
            "tune_rl.status": "running"})
        self.runs[trial.trial_id] = run.info.run_id
        from mlflow.entities import Param

        chosen = {k: trial.config[k] for k in self.logged_keys if k in trial.config}
        self.mlflow.log_batch(run.info.run_id, params=[Param(k, v) for k, v in flat_params(chosen).items()])

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        run_id = self.runs.get(trial.trial_id)
        if run_id is None:
            return
        step = int(result.get("env_steps", result.get("training_iteration", 0)))
        self.mlflow.log_batch(run_id, metrics=metrics_of(result, step=step, now_ms=int(time.time() * 1000)))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        ending = self.ending(trial.last_result or {})
        self._finish(trial, "stopped_early" if ending == "stopped_early" else "terminated", "FINISHED")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._finish(trial, "errored", "FAILED", error=last_error_line(trial))

    def _finish(self, trial: Any, status: str, mlflow_status: str, *, error: str = "") -> None:
        run_id = self.runs.get(trial.trial_id)
        if run_id is None:
            return
        self.mlflow.set_tag(run_id, "tune_rl.status", status)
        if error:
            self.mlflow.set_tag(run_id, "tune_rl.error", error[:MAX_PARAM_LENGTH])
        self.mlflow.set_terminated(run_id, status=mlflow_status)


def last_error_line(trial: Any) -> str:
    """The last non-empty line of a trial's error, for tags and the live view."""
    text = ""
    path = getattr(trial, "error_file", None)
    if path and Path(path).is_file():
        text = Path(path).read_text(errors="replace")
    text = text or str(getattr(trial, "error_msg", "") or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


def children(mlflow: Any, experiment_id: str, parent: str) -> dict[str, str]:
    """trial id -> child run id of a parent run, so a resumed search logs into the same runs."""
    runs = mlflow.search_runs([experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
                              max_results=10_000)
    return {r.data.tags["tune_rl.trial_id"]: r.info.run_id for r in runs if "tune_rl.trial_id" in r.data.tags}
