"""The parent run's plot and trials table, built from synthetic trials and progress tables (no Ray)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.mlflow_helpers import FakeAnalysis, synthetic_trials
from tune_runner.results import summary as report
from tune_runner.spec.experiment import load_spec


def analysis_with_an_errored_trial():
    spec = load_spec("oracle", overrides=["budget=5000"])
    trials, frames = synthetic_trials(spec, count=3)
    trials[1].status = "ERROR"
    frames[trials[1].trial_id].loc[2, "episode_return_mean"] = float("nan")
    return spec, FakeAnalysis(trials, frames)


def test_trials_table_has_one_row_per_trial_with_status_values_and_searched_params():
    spec, fake = analysis_with_an_errored_trial()
    table = report.trials_table(fake, spec)
    assert list(table["trial_id"]) == ["fake_00000", "fake_00001", "fake_00002"]
    assert list(table["status"]) == ["stopped_early", "errored", "done"]
    assert list(table["env_steps"]) == [2500, 5000, 5000]
    assert table.loc[2, "episode_return_mean"] == 300.0 and table.loc[2, "best_episode_return_mean"] == 300.0
    assert {"lr", "x", "activation", "iterations", "time_total_s"} <= set(table.columns)
    assert "optimum" not in table.columns  # fixed values are the same for every trial


def test_curve_keeps_finite_points_in_env_step_order():
    frame = pd.DataFrame({"env_steps": [300, 100, 200, 400], "episode_return_mean": [3.0, 1.0, math.nan, None]})
    assert report.curve(frame, "episode_return_mean") == ([100.0, 300.0], [1.0, 3.0])
    assert report.curve(frame, "missing") == ([], [])
    assert report.curve(None, "episode_return_mean") == ([], [])


def test_write_gives_a_png_plot_and_a_csv_that_reads_back(tmp_path):
    spec, fake = analysis_with_an_errored_trial()
    plot, table = report.write(fake, spec, folder=tmp_path, title="demo")
    assert plot.name == report.PLOT_FILE and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.stat().st_size > 10_000  # lines, legend and labels, not an empty canvas
    again = pd.read_csv(table)
    assert list(again["status"]) == ["stopped_early", "errored", "done"] and len(again) == 3


def test_importances_are_fitted_once_per_set_of_trials_and_again_when_one_changes(tmp_path, monkeypatch):
    import optuna

    from tune_runner.results import report as html_report

    spec = load_spec("oracle", overrides=["budget=5000"])
    trials, frames = synthetic_trials(spec, count=6, stop_early=())
    fake, cache = FakeAnalysis(trials, frames), tmp_path / html_report.IMPORTANCES_FILE
    scores = html_report.importances(fake, spec, cache=cache)
    assert set(scores) == {"lr", "x", "activation"} and math.isclose(sum(scores.values()), 1.0)

    class NotAgain(optuna.importance.FanovaImportanceEvaluator):
        def evaluate(self, *args, **kwargs):
            raise AssertionError("fitted again")

    monkeypatch.setattr(optuna.importance, "FanovaImportanceEvaluator", NotAgain)
    assert html_report.importances(fake, spec, cache=cache) == scores  # the same trials: the saved scores
    trials[2].last_result = {**trials[2].last_result, "episode_return_mean": 5.0}
    with pytest.raises(AssertionError, match="fitted again"):  # one trial's value changed: fitted anew
        html_report.importances(fake, spec, cache=cache)
    cache.write_text("{not json")
    with pytest.raises(AssertionError, match="fitted again"):  # a damaged cache is only a cache
        html_report.importances(fake, spec, cache=cache)


@pytest.mark.e2e  # the child processes import MLflow (about 4 s each)
@pytest.mark.parametrize("way", ["sqlite-read", "mlflow-child"])
def test_the_report_logger_logs_the_report_to_the_parent_run_or_nothing_when_cancelled(way, tmp_path, monkeypatch):
    from tune_runner.tracking import callback as tracking
    from tune_runner.tracking import parent as parent_run

    if way == "mlflow-child":  # what a server or another database gets: MLflow's client, in a child process
        monkeypatch.setattr(parent_run, "local_parent", lambda *args, **kwargs: None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, "oracle", uri)
    parent = parent_run.open_run(client, exp_id, load_spec("oracle"), name="exp", exp_path=tmp_path / "exp",
                                 search_id="ab" * 16)
    # A newer child run with the same search id, and another search's parent: neither is the one.
    client.create_run(exp_id, run_name="trial", tags={"tune_rl.search_id": "ab" * 16, "mlflow.parentRunId": parent})
    client.create_run(exp_id, run_name="other", tags={"tune_rl.search_id": "cd" * 16})
    folder = tmp_path / "exp" / "report"
    (folder / "plots").mkdir(parents=True)
    (folder / "index.html").write_text("<html></html>")
    (folder / "plots" / "curves.png").write_bytes(b"png")

    cancelled = parent_run.ReportLogger(uri, "oracle", tmp_path / "exp", search_id="ab" * 16)
    cancelled.cancel()
    assert client.list_artifacts(parent, "report") == []
    logger = parent_run.ReportLogger(uri, "oracle", tmp_path / "exp", search_id="ab" * 16)
    assert (logger._proc is None) == (way == "sqlite-read")
    assert logger.finish(folder) == parent
    assert [a.path for a in client.list_artifacts(parent, "report")] == ["report/index.html", "report/plots"]
    assert [a.path for a in client.list_artifacts(parent, "report/plots")] == ["report/plots/curves.png"]
    assert parent_run.ReportLogger(uri, "oracle", tmp_path / "exp", search_id="ef" * 16).finish(folder) is None
    assert parent_run.ReportLogger(uri, "no-such-space", tmp_path / "exp", search_id="ab" * 16).finish(folder) is None
    with pytest.raises(RuntimeError, match=r"^logging the report to MLflow failed: \w+"):
        parent_run.ReportLogger("sqlite:////proc/nope/mlflow.db", "oracle", tmp_path / "exp").finish(folder)


def test_the_sqlite_read_leaves_stores_it_cannot_vouch_for_to_mlflow(tmp_path):
    import sqlite3

    from tune_runner.tracking.parent import local_parent

    exp = tmp_path / "exp"
    assert local_parent("http://127.0.0.1:5000", "x", exp, search_id=None) is None
    assert local_parent("postgresql://u@h/db", "x", exp, search_id=None) is None
    assert local_parent(f"sqlite:///{tmp_path / 'none.db'}", "x", exp, search_id=None) is None  # no file
    (tmp_path / "other.db").write_bytes(b"not a database at all, not even close to one")
    assert local_parent(f"sqlite:///{tmp_path / 'other.db'}", "x", exp, search_id=None) is None
    with sqlite3.connect(tmp_path / "odd.db") as db:  # a schema this query does not know
        db.execute("CREATE TABLE runs (id TEXT)")
    assert local_parent(f"sqlite:///{tmp_path / 'odd.db'}", "x", exp, search_id=None) is None
    # MLflow's tables, reduced to the columns read: artifacts behind a server or in a bucket go through MLflow.
    with sqlite3.connect(tmp_path / "m.db") as db:
        db.executescript("""
            CREATE TABLE experiments (experiment_id INTEGER, name TEXT, lifecycle_stage TEXT);
            CREATE TABLE runs (run_uuid TEXT, experiment_id INTEGER, artifact_uri TEXT, lifecycle_stage TEXT,
                               start_time INTEGER);
            CREATE TABLE tags (run_uuid TEXT, key TEXT, value TEXT);
            INSERT INTO experiments VALUES (1, 'x', 'active');""")
        db.execute("INSERT INTO tags VALUES ('r1', 'tune_rl.experiment_path', ?)", (str(exp),))
    for artifact_uri, expected in (("mlflow-artifacts:/1/r1/artifacts", None), ("s3://bucket/1/r1", None),
                                   (f"file://{tmp_path}/a%20b", ("r1", tmp_path / "a b")),
                                   (str(tmp_path / "plain"), ("r1", tmp_path / "plain"))):
        with sqlite3.connect(tmp_path / "m.db") as db:
            db.execute("DELETE FROM runs")
            db.execute("INSERT INTO runs VALUES ('r1', 1, ?, 'active', 5)", (artifact_uri,))
        assert local_parent(f"sqlite:///{tmp_path / 'm.db'}", "x", exp, search_id=None) == expected, artifact_uri


def _trial(trial_id: str, status: str, value: float | None, **config: float):
    from types import SimpleNamespace

    last = {} if value is None else {"episode_return_mean": value, "env_steps": 1000}
    return SimpleNamespace(trial_id=trial_id, status=status, last_result=last, config=config)


def test_a_paused_trial_is_stopped_early_in_the_summary_and_the_search_counts_alike():
    # HyperBand can end a search with a trial PAUSED in an unfilled bracket; the summary table and the
    # search's counts used to disagree on it ('paused' against 'stopped early').
    from types import SimpleNamespace

    from tune_runner.results import analysis, summary
    from tune_runner.spec.experiment import load_spec

    spec = load_spec("oracle")
    trials = [_trial("a", "PAUSED", 10.0), _trial("b", "ERROR", None), _trial("c", "RUNNING", 5.0)]
    counts = analysis.statuses(SimpleNamespace(trials=trials), ending=spec.ending)
    assert counts == {"stopped early": 1, "errored": 1, "running": 1}
    assert [summary.trial_status(t, spec) for t in trials] == ["stopped_early", "errored", "running"]


def test_warm_start_takes_the_top_configs_by_the_same_ranking_as_the_robust_candidates():
    from types import SimpleNamespace

    from tune_runner.results import analysis, robust

    trials = [_trial("a", "TERMINATED", 3.0, lr=0.1), _trial("b", "TERMINATED", float("nan"), lr=0.2),
              _trial("c", "TERMINATED", 7.0, lr=0.3), _trial("d", "ERROR", None, lr=0.4)]
    loaded = SimpleNamespace(trials=trials)
    tops = analysis.top_configs(loaded, metric="episode_return_mean", mode="max", k=3, keys=("lr",))
    assert tops == [{"lr": 0.3}, {"lr": 0.1}]  # NaN and no value left out, best first
    picks = robust.candidates(loaded, metric="episode_return_mean", mode="max", k=3)
    assert [p.config["lr"] for p in picks] == [t["lr"] for t in tops]
    assert analysis.top_configs(loaded, metric="episode_return_mean", mode="min", k=1, keys=("lr",)) == [{"lr": 0.1}]
