"""What a finished search shows on its MLflow parent run, built from the experiment folder:
a learning-curve plot of every trial and the trials table (CSV).

`analysis` is Ray Tune's ExperimentAnalysis (after a search) or tune_runner.results.trials' reader (`tune-rl
report`, no Ray): both give `.trials`, and each trial's history as a dataframe or as rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tune_runner.results.analysis import trial_ending
from tune_runner.spec.experiment import ExperimentSpec

PLOT_FILE, TABLE_FILE = "learning_curves.png", "trials.csv"
ENDING_MARKERS = {"stopped_early": "x", "solved": "*", "errored": "o"}


def trial_status(trial: Any, spec: ExperimentSpec) -> str:
    """done / solved / stopped_early / errored (or Tune's own status, lower case, for unfinished ones)."""
    return trial_ending(trial, ending=spec.ending)


def curve(frame: Any, metric: str) -> tuple[list[float], list[float]]:
    """(env steps, metric) of a trial's progress, finite values only, in env-step order."""
    if frame is None or metric not in getattr(frame, "columns", ()) or "env_steps" not in frame.columns:
        return [], []
    return _points(zip(frame["env_steps"], frame[metric], strict=True))


def trial_curve(analysis: Any, trial_id: str, metric: str) -> tuple[list[float], list[float]]:
    """`curve` of one trial of either reader."""
    if hasattr(analysis, "rows"):  # tune_runner.results.trials: the results as dicts
        rows = analysis.rows(trial_id)
        if not any(metric in row for row in rows) or not any("env_steps" in row for row in rows):
            return [], []
        return _points((row.get("env_steps"), row.get(metric)) for row in rows)
    return curve(analysis.trial_dataframes.get(trial_id), metric)


def _points(pairs: Any) -> tuple[list[float], list[float]]:
    points = sorted((float(x), float(y)) for x, y in pairs if _finite(x) and _finite(y))
    return [x for x, _ in points], [y for _, y in points]


def trials_table(analysis: Any, spec: ExperimentSpec) -> Any:
    """One row per trial: id, status, env steps, last and best metric, iterations, time, searched values."""
    import pandas as pd

    rows = []
    for trial in analysis.trials:
        last = trial.last_result or {}
        _, values = trial_curve(analysis, trial.trial_id, spec.metric)
        best = (max if spec.mode == "max" else min)(values) if values else math.nan
        rows.append({"trial_id": trial.trial_id, "status": trial_status(trial, spec),
                     "env_steps": last.get("env_steps"), spec.metric: last.get(spec.metric),
                     f"best_{spec.metric}": best, "iterations": last.get("training_iteration"),
                     "time_total_s": last.get("time_total_s"),
                     **{name: trial.config.get(name) for name in spec.searched}})
    return pd.DataFrame(rows)


def learning_curves(analysis: Any, spec: ExperimentSpec, *, title: str, path: Path) -> Path:
    """The metric against env steps, one line per trial; a trial that ended before the budget ends
    in a marker (x stopped early, * solved, o errored), and the budget is a dotted line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 5.5), dpi=100)
    FigureCanvasAgg(figure)  # no pyplot: no global backend, nothing left open
    ax = figure.add_subplot()
    for trial in sorted(analysis.trials, key=lambda t: t.trial_id):
        steps, values = trial_curve(analysis, trial.trial_id, spec.metric)
        if not steps:
            continue
        status = trial_status(trial, spec)
        (line,) = ax.plot(steps, values, linewidth=1.4, label=f"{trial.trial_id} ({status.replace('_', ' ')})")
        if status in ENDING_MARKERS:
            ax.plot(steps[-1:], values[-1:], marker=ENDING_MARKERS[status], markersize=10, color=line.get_color())
    ax.axvline(spec.budget_env_steps, linestyle=":", color="grey", linewidth=1)
    if spec.stop_at is not None:
        ax.axhline(spec.stop_at, linestyle="--", color="grey", linewidth=0.8)
    ax.set_xlabel("env steps")
    ax.set_ylabel(spec.metric)
    ax.set_title(f"{title}: {spec.trainable} on {spec.env}  (budget dotted; x stopped early, * solved)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a trial without a curve (errored at once) has no labelled line
        ax.legend(fontsize=7, ncol=2 if len(analysis.trials) > 8 else 1, loc="best")
    figure.tight_layout()
    figure.savefig(path)
    return path


def write(analysis: Any, spec: ExperimentSpec, *, folder: Path, title: str) -> list[Path]:
    """The plot and the CSV table in `folder` (the experiment folder); their paths."""
    table = folder / TABLE_FILE
    trials_table(analysis, spec).to_csv(table, index=False)
    return [learning_curves(analysis, spec, title=title, path=folder / PLOT_FILE), table]


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
