"""The live view's lines and the MLflow helpers, driven with synthetic trials (no Ray, no training)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from tune_runner.errors import UserError
from tune_runner.tracking.callback import flat_params, metrics_of
from tune_runner.tracking.uri import artifact_location, check_uri
from tune_runner.tuning.progress import LiveView, fmt_value


def trial(i: int, **result) -> SimpleNamespace:
    return SimpleNamespace(trial_id=f"abc_{i:05d}", config={"lr": 0.00123, "gamma": 0.99, "num_envs": 8},
                           last_result=result, status="RUNNING", error_file=None, error_msg="boom\nValueError: bad")


def view(**kwargs) -> tuple[LiveView, io.StringIO]:
    out = io.StringIO()
    return LiveView(searched=("lr", "gamma"), budget=1000, metric="episode_return_mean", out=out, **kwargs), out


def test_start_line_shows_only_searched_values():
    live, out = view()
    live.on_trial_start(0, [], trial(1))
    line = out.getvalue()
    assert "abc_00001 started" in line and "lr=1.23e-03 gamma=0.99" in line and "num_envs" not in line


def test_progress_once_per_quarter_then_done_or_stopped():
    live, out = view()
    t = trial(1)
    for steps in (100, 250, 300, 500, 760):
        live.on_trial_result(0, [], t, {"env_steps": steps, "episode_return_mean": steps / 10, "sps": 1234.0})
    lines = out.getvalue().splitlines()
    assert [line.split()[2] for line in lines] == ["25%", "50%", "75%"]
    t.last_result = {"env_steps": 1000, "episode_return_mean": 99.0}
    live.on_trial_complete(0, [], t)
    early = trial(2, env_steps=500, episode_return_mean=20.0)
    live.on_trial_complete(0, [], early)
    error = trial(3)
    live.on_trial_error(0, [], error)
    tail = out.getvalue().splitlines()[-3:]
    assert " done " in tail[0] and "return      99" in tail[0]
    assert " stopped " in tail[1] and "(early, by the scheduler)" in tail[1]
    assert " ERROR " in tail[2] and tail[2].endswith("ValueError: bad")


def test_heartbeat_after_silence_summarises():
    live, out = view(heartbeat_s=0.0)
    trials = [trial(1, env_steps=300, episode_return_mean=40.0), trial(2, env_steps=200, episode_return_mean=55.5)]
    trials[1].status = "PENDING"
    live.on_step_end(0, trials)
    assert "1 pending, 1 running; best 55.5; 500 env steps in all" in out.getvalue()


def test_fmt_value():
    assert fmt_value(0.00123) == "1.23e-03" and fmt_value(0.99) == "0.99" and fmt_value(256) == "256"


def test_flat_params_and_metrics():
    assert flat_params({"lr": 0.1, "replay_buffer_config": {"capacity": 5}}) == {
        "lr": "0.1", "replay_buffer_config.capacity": "5"}
    metrics = metrics_of({"episode_return_mean": 10.0, "pid": 3, "env_steps": 400, "x": float("nan"), "ok": True,
                          "policy_loss": -1}, step=400, now_ms=1)
    assert {(m.key, m.value, m.step) for m in metrics} == {("episode_return_mean", 10.0, 400),
                                                          ("policy_loss", -1.0, 400)}


def test_sqlite_artifacts_sit_beside_the_database(tmp_path):
    assert artifact_location(f"sqlite:///{tmp_path}/m.db") == (tmp_path / "mlartifacts").as_uri()
    assert artifact_location("http://127.0.0.1:5000") is None


def test_check_uri(tmp_path):
    from tune_runner.tracking.callback import client

    check_uri(f"sqlite:///{tmp_path}/new/m.db")
    assert not (tmp_path / "new").exists()  # a check writes nothing: a later refusal would leave it
    client(f"sqlite:///{tmp_path}/new/m.db")  # opening the store for the search makes its folder
    assert (tmp_path / "new").is_dir()
    with pytest.raises(UserError, match="unreachable"):
        check_uri("http://127.0.0.1:9")


def test_every_hook_we_define_is_one_tune_calls():
    # A misspelled hook (on_step instead of on_step_end) is silently never called.
    from ray.tune import Callback

    from tune_runner.tracking.callback import MlflowTracking

    for cls in (LiveView, MlflowTracking):
        hooks = [name for name in vars(cls) if name.startswith("on_")]
        assert hooks and all(hasattr(Callback, name) for name in hooks), (cls, hooks)


def done(result: dict) -> str:
    return "done"


def tracked(tmp_path, **kwargs):
    """An MlflowTracking on a fresh SQLite store under a parent run; (callback, client)."""
    from tune_runner.tracking.callback import MlflowTracking, client, experiment_id

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow = client(uri)
    exp_id = experiment_id(mlflow, "tracked", uri)
    parent = mlflow.create_run(exp_id).info.run_id
    callback = MlflowTracking(uri=uri, experiment_id=kwargs.pop("experiment_id", exp_id), parent_run_id=parent,
                              logged_keys=("lr", "gamma"), ending=done, **kwargs)
    return callback, mlflow


def test_child_runs_get_every_result_in_batches_sent_off_tunes_loop(tmp_path):
    callback, mlflow = tracked(tmp_path, flush_every_s=3600.0)
    trials = [trial(1), trial(2)]
    for t in trials:
        callback.on_trial_start(0, trials, t)
    for step in range(1, 31):
        for t in trials:
            callback.on_trial_result(0, trials, t, {"env_steps": 100 * step, "episode_return_mean": float(step)})
    callback._writer.close()  # every call made so far has landed: the runs, not yet their metrics
    first = callback.runs["abc_00001"]
    assert mlflow.get_run(first).data.params == {"lr": "0.00123", "gamma": "0.99"}
    assert mlflow.get_metric_history(first, "episode_return_mean") == []
    callback.on_trial_complete(0, trials, trials[0])
    callback.on_step_end(1, trials)  # not due: the other trial's metrics wait
    callback.on_experiment_end(trials)
    for t in trials:
        run = mlflow.get_run(callback.runs[t.trial_id])
        history = mlflow.get_metric_history(run.info.run_id, "episode_return_mean")
        assert sorted((m.step, m.value) for m in history) == [(100 * s, float(s)) for s in range(1, 31)]
        assert run.data.tags["mlflow.parentRunId"] == callback.parent_run_id
    assert mlflow.get_run(first).info.status == "FINISHED"
    assert mlflow.get_run(first).data.tags["tune_rl.status"] == "terminated"
    assert mlflow.get_run(callback.runs["abc_00002"]).info.status == "RUNNING"  # never ended: still running


def test_audit_curves_are_sent_at_their_changes_and_draw_the_same_steps(tmp_path):
    """applied/<key> and requested/<key> (PBT's audit, in every result) change only at an exploit: the rows sent
    are the first point, the last before each change, each change and the last; a trial still running when
    the search ends gets its last point too. The other metrics keep a row per result."""
    callback, mlflow = tracked(tmp_path)
    trials = [trial(1), trial(2)]
    lrs = [1e-3] * 5 + [2e-3] * 4 + [5e-4]  # PBT exploited trial 1 at step 6 and step 10
    for t in trials:
        callback.on_trial_start(0, trials, t)
    for step, lr in enumerate(lrs, start=1):
        for t in trials:
            callback.on_trial_result(0, trials, t, {"env_steps": step, "episode_return_mean": float(step),
                                                    "applied/lr": lr, "requested/lr": lr, "applied/gamma": 0.99})
    callback.on_trial_complete(0, trials, trials[0])
    callback.on_experiment_end(trials)  # trial 2 still running: paused, or the search interrupted
    for t in trials:
        run_id = callback.runs[t.trial_id]
        history = {key: [(m.step, m.value) for m in sorted(mlflow.get_metric_history(run_id, key),
                                                            key=lambda m: m.step)]
                   for key in ("applied/lr", "requested/lr", "applied/gamma", "episode_return_mean")}
        assert history["applied/lr"] == history["requested/lr"] == [(1, 1e-3), (5, 1e-3), (6, 2e-3), (9, 2e-3),
                                                                    (10, 5e-4)], history
        assert history["applied/gamma"] == [(1, 0.99), (10, 0.99)]
        assert history["episode_return_mean"] == [(s, float(s)) for s in range(1, 11)]


def test_a_failed_mlflow_write_stops_the_search_at_the_next_hook(tmp_path):
    from mlflow.exceptions import MlflowException

    callback, _ = tracked(tmp_path, experiment_id="424242")  # no such experiment: create_run fails
    trials = [trial(1)]
    callback.on_trial_start(0, trials, trials[0])
    with pytest.raises(MlflowException):
        callback.on_experiment_end(trials)
    with pytest.raises(MlflowException):  # and at every hook after
        callback.on_step_end(1, trials)


def test_tracking_pickles_without_its_thread_and_unsent_metrics(tmp_path):
    import pickle

    callback, _ = tracked(tmp_path)
    trials = [trial(1)]
    callback.on_trial_start(0, trials, trials[0])
    callback.on_trial_result(0, trials, trials[0], {"env_steps": 100, "episode_return_mean": 1.0})
    copy = pickle.loads(pickle.dumps(callback))
    assert copy._pending == {} and copy.flush_every_s == callback.flush_every_s and copy.uri == callback.uri
    callback.on_experiment_end(trials)
