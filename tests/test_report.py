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


@pytest.mark.e2e  # two child processes import MLflow (about 4 s each)
def test_the_parent_logger_logs_the_report_from_its_own_process_or_nothing_when_cancelled(tmp_path):
    from tune_runner.tracking import callback as tracking
    from tune_runner.tracking import parent as parent_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, "oracle", uri)
    parent = parent_run.open_run(client, exp_id, load_spec("oracle"), name="exp", exp_path=tmp_path / "exp",
                                 search_id="ab" * 16)
    folder = tmp_path / "exp" / "report"
    folder.mkdir(parents=True)
    (folder / "index.html").write_text("<html></html>")

    cancelled = parent_run.ReportLogger(uri, "oracle", tmp_path / "exp", search_id="ab" * 16)
    cancelled.cancel()
    assert client.list_artifacts(parent, "report") == []
    logger = parent_run.ReportLogger(uri, "oracle", tmp_path / "exp", search_id="ab" * 16)
    assert logger.finish(folder) == parent
    assert [a.path for a in client.list_artifacts(parent, "report")] == ["report/index.html"]
    with pytest.raises(RuntimeError, match=r"^logging the report to MLflow failed: \w+"):
        parent_run.ReportLogger("sqlite:////proc/nope/mlflow.db", "oracle", tmp_path / "exp").finish(folder)


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
