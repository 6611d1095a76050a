"""The tracking store goes away (issue 46), without Ray: the tracker's calls wait in the search's spool, in order,
and reach MLflow once the store is back (or with `tune-rl sync`), so MLflow ends up holding every run, param and
metric point a search without an outage holds. A real SQLite store behind a client that fails as a dead server
does (requests' ConnectionError) while `down`."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import requests

from tune_runner.paths import SPOOL_FILE
from tune_runner.tracking import spool as spooled


class Flaky:
    """An MlflowClient that raises a dead server's error on every call while `down`."""

    def __init__(self, real) -> None:
        self.real, self.down, self.refused = real, False, 0

    def __getattr__(self, name):
        method = getattr(self.real, name)

        def call(*args, **kwargs):
            if self.down:
                self.refused += 1
                raise requests.exceptions.ConnectionError("Max retries exceeded with url: /api/2.0/mlflow/runs/create")
            return method(*args, **kwargs)
        return call


def tracker(tmp_path, name: str, *, spool: bool = True):
    from tune_runner.tracking.callback import MlflowTracking, client, experiment_id

    uri = f"sqlite:///{tmp_path}/{name}.db"
    mlflow = client(uri)
    exp_id = experiment_id(mlflow, "spool", uri)
    parent = mlflow.create_run(exp_id).info.run_id
    callback = MlflowTracking(uri=uri, experiment_id=exp_id, parent_run_id=parent, logged_keys=("lr",),
                              ending=lambda r: "done", flush_every_s=0.0,
                              spool_path=str(tmp_path / name / SPOOL_FILE) if spool else None)
    (tmp_path / name).mkdir()
    flaky = Flaky(mlflow)
    callback._client = flaky  # noqa: SLF001 - the store the writer talks to
    return callback, flaky


def drive(callback, flaky, *, down_at: int | None = None, up_at: int | None = None) -> None:
    """Two trials of 6 results each; the store goes away before result `down_at` and comes back before `up_at`."""
    trials = [SimpleNamespace(trial_id=f"t{i}", config={"lr": 0.1 * (i + 1)}, status="RUNNING") for i in range(2)]
    for trial in trials[:1]:
        callback.on_trial_start(0, trials, trial)
    for step in range(6):
        if step == down_at:
            flaky.down = True
        if step == up_at:
            flaky.down = False
        if step == 2:
            callback.on_trial_start(0, trials, trials[1])  # started while the store may be away
        for trial in trials[:1 + (step >= 2)]:
            callback.on_trial_result(0, trials, trial, {"env_steps": 1000 * (step + 1), "episode_return_mean":
                                                        float(step * 10 + int(trial.trial_id[1])), "loss": 0.5})
            callback._writer.close()  # noqa: SLF001 - each call made before the next result (a deterministic order)
    for trial in trials:
        trial.status = "TERMINATED"
        trial.last_result = {"env_steps": 6000}
        callback.on_trial_complete(0, trials, trial)
    callback.on_experiment_end(trials)


def held(callback) -> dict:
    """What MLflow holds of the search: per trial run, its params and every point of its curves."""
    mlflow = callback._client.real  # noqa: SLF001
    runs = mlflow.search_runs([callback.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = "
                                                                      f"'{callback.parent_run_id}'")
    out = {}
    for run in runs:
        curves = {key: sorted((m.step, m.value) for m in mlflow.get_metric_history(run.info.run_id, key))
                  for key in run.data.metrics}
        out[run.data.tags["tune_rl.trial_id"]] = (dict(run.data.params), curves, run.info.status)
    return out


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch):
    from tune_runner.tracking import callback

    monkeypatch.setattr(callback, "END_WAIT_S", 0.0)
    monkeypatch.setattr(spooled, "RETRY_S", 0.0)


def test_calls_made_while_the_store_is_away_reach_it_once_it_is_back_in_order(tmp_path):
    reference, flaky0 = tracker(tmp_path, "reference")
    drive(reference, flaky0)
    callback, flaky = tracker(tmp_path, "outage")
    drive(callback, flaky, down_at=1, up_at=4)  # away for results 1-3, and when trial t1 started
    assert flaky.refused > 0 and callback.spool.outage is not None and callback.spool.outage.back is not None
    assert not (tmp_path / "outage" / SPOOL_FILE).exists()
    assert held(callback) == held(reference) and len(held(reference)) == 2
    said = callback.spool.outage.said(callback.spool.path, "tune-rl sync outage")
    assert said.startswith("the store was unreachable for ") and "were written when it came back" in said


def test_calls_left_when_the_search_ends_are_written_by_sync(tmp_path, monkeypatch):
    from tune_runner.tuning import sync

    reference, flaky0 = tracker(tmp_path, "reference")
    drive(reference, flaky0)
    callback, flaky = tracker(tmp_path, "left")
    drive(callback, flaky, down_at=3)  # away from result 3 to the end
    callback.call("_close_parent", "FINISHED")
    path = tmp_path / "left" / SPOOL_FILE
    assert path.is_file() and callback.spool.active
    said = callback.spool.outage.said(path, "tune-rl sync left")
    assert said.startswith("the store has been unreachable since") and said.endswith("tune-rl sync left")
    assert held(callback) != held(reference)
    # tune-rl sync, on the store as it is now (up): the folder's spool, replayed on the search's runs
    monkeypatch.setattr(sync, "_tracker", lambda p, uri: _rebuilt(callback, p))
    monkeypatch.setattr("tune_runner.tuning.resume.locate", lambda name, where: tmp_path / "left")
    monkeypatch.setattr("tune_runner.tuning.resume.continued", lambda *a, **k: {"mlflow_uri": callback.uri,
                                                                                 "storage": tmp_path})
    out = io.StringIO()
    assert sync.sync("left", where=None, mlflow_uri=None, out=out) == 0
    assert "MLflow call(s) of left written" in out.getvalue() and not path.exists()
    assert held(callback) == held(reference)
    parent = callback._client.real.get_run(callback.parent_run_id)  # noqa: SLF001
    assert parent.info.status == "FINISHED"


def _rebuilt(callback, path):
    """What sync builds from the spool's header, on the same (now reachable) store."""
    from tune_runner.tracking.callback import MlflowTracking

    header = next(spooled.read(path))[1]
    again = MlflowTracking(uri=callback.uri, experiment_id=header["experiment_id"],
                           parent_run_id=header["parent_run_id"], logged_keys=(), ending=lambda r: "done",
                           spool_path=str(path))
    again._client = callback._client.real  # noqa: SLF001
    return again


def test_without_a_spool_an_unreachable_store_stops_the_tracking_with_its_error(tmp_path):
    callback, flaky = tracker(tmp_path, "nospool", spool=False)
    with pytest.raises(requests.exceptions.ConnectionError):
        drive(callback, flaky, down_at=1)


@pytest.mark.parametrize(("exc", "expected"), [
    (requests.exceptions.ConnectionError("refused"), True),
    (RuntimeError("API request to http://x/api failed with exception HTTPConnectionPool: Max retries exceeded"),
     True),
    (type("OperationalError", (Exception,), {})("database is locked"), True),
    (ValueError("INVALID_PARAMETER_VALUE: Param lr was already logged with a different value"), False),
])
def test_only_an_unreachable_store_is_spooled(exc, expected):
    assert spooled.unreachable(exc) is expected
