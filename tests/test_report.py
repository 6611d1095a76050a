"""The parent run's plot and trials table, built from synthetic trials and progress tables (no Ray)."""

from __future__ import annotations

import math

import pandas as pd

from tests.mlflow_helpers import FakeAnalysis, synthetic_trials
from tune_runner import report
from tune_runner.spec import load_spec


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
