"""MLflow tracking: one parent run per search, one child run per trial, metrics in batches.

A population trial's members (configs_per_trial, issue 43) get a run each, nested under their trial's run (tag
`mlflow.parentRunId` the trial's run, `tune_rl.member_id` the member, `tune_rl.search_run_id` the search's parent
run): named by the member's id, with the trial's params plus the member's own values and seed, its curves (the
`member_<j>/<name>` of the reports while it held slot j, under plain names) at its own env steps, and ended when
it leaves its slot (tracking.members) or its trial ends. The trial's run keeps the trial-level params and the plain
curves (the best member's) and the counts; the `member_<j>/...` keys are not sent twice. What reads a search's
trials from MLflow looks one level down (the parent's children, tracked._trials, children below): it meets no
member.

Ray's stock MLflowLoggerCallback sends one request per metric (about a second per
iteration on SQLite here). We gather each trial's results and send them as one `log_batch`
at most every FLUSH_EVERY_S, from a thread of our own: on SQLite a write per result cost
the driver 15-25 ms of CPU and a commit while Tune's loop waited, and every trial waits
for that loop between its iterations (bench/search_e2e.py). A trial's run is complete in
MLflow when the trial ends; a curve in the UI lags the trial by at most FLUSH_EVERY_S.

MLflow's SQL store spends about 0.5-0.9 ms of CPU per metric row (its ORM), so rows are what costs. The PBT
audit's `applied/<key>` and `requested/<key>` (tune_runner.trainables.audit: every result carries them, 10 of the 21
numbers a ppo_small result has) change only when PBT exploits; they are sent where their value changes, with
the last point before each change, and their last point when the trial ends: the curve MLflow draws is the
same line, from a handful of rows instead of one per result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ray.tune import Callback

from tune_runner.spec.seed_keys import member_seed
from tune_runner.tracking.members import Member, Turnover, is_member_key
from tune_runner.tracking.spool import Spool, Writer

# client, find_parent and tag_filter live in mlflow_uri (no Ray import: `tune-rl report` logs with them)
# flat_params too (tune_runner.tracked types a trial's params back with it)
from tune_runner.tracking.uri import (  # noqa: F401
    MAX_PARAM_LENGTH,
    MEMBER_TAG,
    SEARCH_TAG,
    artifact_location,
    client,
    find_parent,
    flat_params,
    member_runs,
    tag_filter,
)
from tune_runner.trainables.audit import PREFIX_APPLIED, PREFIX_REQUESTED

# Tune's bookkeeping keys: not worth a metric curve each.
NOT_METRICS = frozenset({
    "timestamp", "pid", "time_this_iter_s", "iterations_since_restore", "time_since_restore",
    "done", "date", "hostname", "node_ip", "trial_id", "experiment_tag", "checkpoint_dir_name",
    "should_checkpoint", "env_steps", "node_id"})
STEPWISE = (PREFIX_APPLIED, PREFIX_REQUESTED)  # curves sent at their changes only (see the module's docstring)
FLUSH_EVERY_S = 1.0  # the most a child run's metrics wait in the driver before they are sent
MAX_BATCH = 1000  # MLflow's limit of metrics in one log_batch
END_WAIT_S, END_TRY_S = 20.0, 5.0  # at the end of a search, how long (and how often) the store is tried again
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
    (`seed_<i>/<name>`, tune_runner.spec.seed_keys) beside the aggregate, less the same bookkeeping."""
    from mlflow.entities import Metric

    return [Metric(key, float(value), now_ms, step) for key, value in result.items()
            if key.rpartition("/")[2] not in NOT_METRICS and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)]


class MlflowTracking(Callback):
    """Child runs per trial under a parent run that the runner opened.

    Every MLflow call runs on one writer thread, in the order the hooks made them (a run is
    created before its metrics, its metrics sent before it ends); an error there is raised
    in Tune's loop at the next hook."""

    def __init__(self, *, uri: str, experiment_id: str, parent_run_id: str, logged_keys: tuple[str, ...],
                 ending: Callable[[dict], str], flush_every_s: float = FLUSH_EVERY_S,
                 spool_path: str | None = None) -> None:
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.logged_keys = logged_keys
        self.ending = ending
        self.flush_every_s = flush_every_s
        self.runs: dict[str, str] = {}  # trial id -> child run id, filled in by the writer
        self.member_runs: dict[str, str] = {}  # member id -> its run id (under its trial's), filled in by the writer
        self._client: Any = None
        self.spool_path = spool_path  # where calls wait while the store is away (tracking.spool); None: nowhere
        self._writer = self._new_writer()
        # Keyed by run: a trial's id, or a member's (`<trial id>-<n>`, never a trial's).
        self._pending: dict[str, list] = {}  # run key -> metrics not handed to the writer yet
        self._held: dict[str, dict[str, tuple[Any, bool]]] = {}  # run key -> STEPWISE key -> (last point, sent)
        self._members: dict[str, Turnover] = {}  # trial id -> its live members (population trials)
        # A resumed search's members whose runs were RUNNING (live when it was interrupted) -> their trial ids,
        # until each comes back to a slot or is settled (`_settle`)
        self.unsettled: dict[str, str] = {}
        self._flushed = time.monotonic()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # Tune pickles callbacks with the experiment state: no client, thread or unsent metrics.
        state.update(_client=None, _writer=None, _pending={}, _held={}, _members={})
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("flush_every_s", FLUSH_EVERY_S)  # pickled by a version before the writer
        self.__dict__.setdefault("member_runs", {})  # pickled by a version before member runs
        self.__dict__.setdefault("unsettled", {})
        self.__dict__.setdefault("spool_path", None)
        self._writer, self._pending, self._held, self._flushed = self._new_writer(), {}, {}, time.monotonic()
        self._members = {}

    def _new_writer(self) -> Writer:
        header = {"uri": self.uri, "experiment_id": self.experiment_id, "parent_run_id": self.parent_run_id}
        return Writer(Spool(Path(self.spool_path), header) if self.spool_path else None)

    @property
    def spool(self) -> Spool | None:
        """The search's spool (what waits for the store, and the outage it waited through), if it has one."""
        return self._writer.spool

    @property
    def mlflow(self) -> Any:
        if self._client is None:
            self._client = client(self.uri)
        return self._client

    def _chosen(self, trial: Any) -> dict[str, Any]:
        """The trial's config values its run's params hold: the space's fixed and searched keys."""
        return {k: trial.config[k] for k in self.logged_keys if k in trial.config}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id in self.runs or trial.trial_id in self._pending:
            return
        self._pending[trial.trial_id] = []
        self._writer.submit(self._create_run, trial.trial_id, flat_params(self._chosen(trial)))

    def _create_run(self, trial_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        if trial_id not in self.runs:  # created already by a try the store dropped before the params (spool)
            run = self.mlflow.create_run(self.experiment_id, run_name=trial_id, tags={
                "mlflow.parentRunId": self.parent_run_id, "tune_rl.trial_id": trial_id, "tune_rl.status": "running"})
            self.runs[trial_id] = run.info.run_id
        self.mlflow.log_batch(self.runs[trial_id], params=[Param(k, v) for k, v in params.items()])

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if trial.trial_id not in self._pending:
            if trial.trial_id not in self.runs:  # a trial we never saw start
                return
            self._pending[trial.trial_id] = []  # a resumed search's trial, its run known
        step = int(result.get("env_steps", result.get("training_iteration", 0)))
        now_ms = int(time.time() * 1000)
        if trial.trial_id in self._members or any(is_member_key(key) for key in result):
            self._track_members(trial, result, step=step, now_ms=now_ms)
            result = {k: v for k, v in result.items() if not is_member_key(k)}  # the members' runs hold them
        self._queue(trial.trial_id, metrics_of(result, step=step, now_ms=now_ms))
        if time.monotonic() - self._flushed >= self.flush_every_s:
            self._flush()

    def _queue(self, key: str, metrics: list) -> None:
        """A run's metrics of one result into its pending ones; STEPWISE curves at their changes only."""
        pending = self._pending.setdefault(key, [])
        held = self._held.setdefault(key, {})
        for metric in metrics:
            if not metric.key.startswith(STEPWISE):
                pending.append(metric)
                continue
            last, sent = held.get(metric.key, (None, True))
            if last is not None and last.value == metric.value:
                held[metric.key] = (metric, False)  # the same value: sent later if it is the last before a change
                continue
            if not sent:
                pending.append(last)  # the old value's last point: a step in the curve, not a ramp
            pending.append(metric)
            held[metric.key] = (metric, True)

    # ---- a population trial's members ------------------------------------------------------------

    def _track_members(self, trial: Any, result: dict, *, step: int, now_ms: int) -> None:
        """End the runs of the members that left their slots, start those of the new ones, queue each live
        member's metrics at its own env steps."""
        turnover = self._members.setdefault(trial.trial_id, Turnover())
        started, ended = turnover.update(result, ending=self.ending)
        for member in ended:
            self._end_member(member, *self._status_of(member.last))
        for member in started:
            self.unsettled.pop(member.id, None)
            self._start_member(trial, member)
        for member in turnover.live.values():
            own = {**member.last, "training_iteration": member.reports}  # its own reports, as a trial's count
            self._queue(member.id, metrics_of(own, step=int(member.last.get("env_steps", step)), now_ms=now_ms))

    def _status_of(self, last: dict) -> tuple[str, str]:
        """How a member whose last metrics are `last` ended: its tune_rl.status and MLflow status."""
        ending = self.ending(last)
        return ("stopped_early" if ending == "stopped_early" else "terminated"), "FINISHED"

    def _start_member(self, trial: Any, member: Member) -> None:
        self._pending.setdefault(member.id, [])
        if member.id in self.member_runs:  # a resumed search's member, its run known
            return
        params = {**self._chosen(trial), **member.values, "seed": member_seed(trial.config, member.slot)}
        self._writer.submit(self._create_member_run, trial.trial_id, member.id, member.slot, flat_params(params))

    def _create_member_run(self, trial_id: str, member_id: str, slot: int, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        if member_id not in self.member_runs:  # as _create_run
            run = self.mlflow.create_run(self.experiment_id, run_name=member_id, tags={
                "mlflow.parentRunId": self.runs[trial_id], MEMBER_TAG: member_id, "tune_rl.trial_id": trial_id,
                "tune_rl.slot": str(slot), SEARCH_TAG: self.parent_run_id, "tune_rl.status": "running"})
            self.member_runs[member_id] = run.info.run_id
        self.mlflow.log_batch(self.member_runs[member_id], params=[Param(k, v) for k, v in params.items()])

    def _end_member(self, member: Member, status: str, mlflow_status: str, error: str = "") -> None:
        self._release_held(member.id)
        self._flush(only=member.id)
        self._pending.pop(member.id, None)
        self._writer.submit(self._end_run, member.id, status, mlflow_status, error)

    def continue_members(self, runs: Iterable[Any]) -> None:
        """A resumed search's member runs (uri.member_runs): each member logs on in its own run when it comes back
        to a slot; those still RUNNING (live when the search was interrupted) are settled if it does not."""
        for run in runs:
            member = run.data.tags.get(MEMBER_TAG)
            if member is not None:
                self.member_runs[member] = run.info.run_id
                if run.info.status == "RUNNING":
                    self.unsettled[member] = run.data.tags.get("tune_rl.trial_id", "")

    def _settle(self, trial_id: str | None = None) -> None:
        """End the runs of the resumed search's members (of trial `trial_id`, or of any) that were live when it
        was interrupted and never came back to a slot: their trial went back to a checkpoint from before them,
        and the board gave the slot to another. Their ending is read from the metrics their runs last logged."""
        for member, owner in list(self.unsettled.items()):
            if trial_id is None or owner == trial_id:
                del self.unsettled[member]
                self._writer.submit(self._end_unsettled, member)

    def _end_unsettled(self, member: str) -> None:
        run_id = self.member_runs[member]
        status = self._status_of(dict(self.mlflow.get_run(run_id).data.metrics))
        self.mlflow.set_tag(run_id, "tune_rl.note", "not trained after the search was resumed: its trial went "
                                                    "back to a checkpoint from before it")
        self._end_run(member, *status, "")

    def _end_members(self, trial_id: str, *, error: str | None = None) -> None:
        """A population trial's live members end with it: as their last rows say, or errored with it."""
        turnover = self._members.pop(trial_id, None)
        if turnover is None:
            return
        for member in turnover.end_all(ending=self.ending):
            if error is None:
                self._end_member(member, *self._status_of(member.last))
            else:
                self._end_member(member, "errored", "FAILED", error)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._writer.raise_error()
        if time.monotonic() - self._flushed >= self.flush_every_s:
            self._flush()

    def _release_held(self, key: str) -> None:
        """A run's held STEPWISE points that were not sent (the ends of their curves) into its pending metrics."""
        held = self._held.pop(key, {})
        unsent = [metric for metric, sent in held.values() if not sent]
        if unsent and key in self._pending:
            self._pending[key].extend(unsent)

    def _flush(self, only: str | None = None) -> None:
        """Hand the gathered metrics (of every run, or of run `only`) to the writer: one log_batch a run."""
        for key in [only] if only is not None else list(self._pending):
            metrics = self._pending.get(key)
            for start in range(0, len(metrics or ()), MAX_BATCH):
                self._writer.submit(self._log_metrics, key, metrics[start:start + MAX_BATCH])
            if metrics:
                self._pending[key] = []
        if only is None:
            self._flushed = time.monotonic()

    def _run_id(self, key: str) -> str:
        return self.runs[key] if key in self.runs else self.member_runs[key]

    def _log_metrics(self, key: str, metrics: list) -> None:
        self.mlflow.log_batch(self._run_id(key), metrics=metrics)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # A population trial ends itself once its members have ended (the scheduler stops members, not it): its
        # last result is its best member's, whose ending is not the trial's.
        population = trial.trial_id in self._members
        self._end_members(trial.trial_id)
        self._settle(trial.trial_id)
        ending = "done" if population else self.ending(trial.last_result or {})
        self._finish(trial, "stopped_early" if ending == "stopped_early" else "terminated", "FINISHED")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        error = last_error_line(trial)
        self._end_members(trial.trial_id, error=error)
        self._settle(trial.trial_id)
        self._finish(trial, "errored", "FAILED", error=error)

    def _finish(self, trial: Any, status: str, mlflow_status: str, *, error: str = "") -> None:
        if trial.trial_id not in self._pending and trial.trial_id not in self.runs:
            return
        self._release_held(trial.trial_id)
        self._flush(only=trial.trial_id)
        self._pending.pop(trial.trial_id, None)
        self._writer.submit(self._end_run, trial.trial_id, status, mlflow_status, error)

    def _end_run(self, key: str, status: str, mlflow_status: str, error: str) -> None:
        run_id = self._run_id(key)
        self.mlflow.set_tag(run_id, "tune_rl.status", status)
        if error:
            self.mlflow.set_tag(run_id, "tune_rl.error", error[:MAX_PARAM_LENGTH])
        self.mlflow.set_terminated(run_id, status=mlflow_status)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """Everything sent before Tune returns: the runner reads and closes the runs next. A search that ended
        (not interrupted) leaves no member run RUNNING."""
        if all(getattr(trial, "status", None) in ("TERMINATED", "ERROR") for trial in trials):
            self._settle()
        for key in list(self._held):
            self._release_held(key)
        self._flush()
        self._writer.close()
        waited = 0.0
        while self.spool is not None and self.spool.active and waited < END_WAIT_S:  # the store's last chance
            self._writer.retry(self, now=True)  # before the runner asks for it (the writer thread has ended)
            if self.spool.active:
                time.sleep(END_TRY_S)
                waited += END_TRY_S

    def call(self, name: str, *args: Any) -> None:
        """One of the tracker's calls made now, on the caller's thread, after the writer has closed (the
        parent run's outcome and end): spooled behind the others while the store is away."""
        self._writer._run(getattr(self, name), *args)  # noqa: SLF001 - the writer's own rule, run here
        self._writer.raise_error()

    def _log_outcome(self, spec: Any, outcome: Any) -> None:
        from tune_runner.tracking import parent

        parent.log_outcome(self.mlflow, self.parent_run_id, spec=spec, outcome=outcome)

    def _close_parent(self, status: str) -> None:
        from tune_runner.tracking import parent

        parent.close(self.mlflow, self.parent_run_id, status=status)


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
