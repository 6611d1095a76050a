"""A Tune experiment's trials read straight from Tune's own files, without importing Ray or pandas.

Ray Tune's `ExperimentAnalysis` costs about 2 s to import (Ray, Ray Data, pandas) before it reads a
byte; `tune-rl best` and `report` only read. This reader takes what ExperimentAnalysis takes, from
the same files:

    experiment_state-<time>.json   the newest one (by name, as Tune picks it): per trial its id,
                                   status, config, folder, last result and `metric_analysis`, Tune's
                                   running summary (max, min, last, last-5/10-avg) of every metric
    <trial folder>/result.json     the trial's history, one JSON result per line (progress.csv when
                                   there is no result.json), nested keys joined with "/"

and picks the best trial by Tune's own rule (`get_best_trial`). tests/test_e2e.py checks it against
ExperimentAnalysis on a real search. A state holding a value Tune had to pickle (a config value that
is not JSON) cannot be read here: `read` raises `Unreadable` and the caller falls back to Ray.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from numbers import Number
from pathlib import Path
from typing import Any

PICKLED = "CLOUDPICKLE_FALLBACK"  # Tune's marker for a value it could only pickle
RAY_SCOPES = ("last", "avg", "last-5-avg", "last-10-avg")  # read from metric_analysis; "all" reads max/min


class Unreadable(Exception):
    """The experiment state holds something only Ray can decode."""


@dataclass
class TrialRecord:
    """What the CLI reads of a Tune trial; the same attribute names as Ray's `Trial`."""

    trial_id: str
    status: str
    config: dict
    last_result: dict
    metric_analysis: dict
    path: str
    error_filename: str | None = None
    error_msg: str = ""

    @property
    def error_file(self) -> str | None:
        return str(Path(self.path, self.error_filename)) if self.error_filename else None


@dataclass
class Results:
    """The trials of one experiment folder; histories are read on first use."""

    path: Path
    trials: list[TrialRecord]
    _histories: dict[str, list[dict]] = field(default_factory=dict, repr=False)

    def rows(self, trial_id: str) -> list[dict]:
        """The trial's results in order, as flat dicts ({} rows for an unreadable file, as Ray's empty frame)."""
        if trial_id not in self._histories:
            trial = next(t for t in self.trials if t.trial_id == trial_id)
            self._histories[trial_id] = _read_history(Path(trial.path)) if _reported(trial) else []
        return self._histories[trial_id]

    def history(self, trial_id: str, metric: str) -> list[Any]:
        """The trial's values of `metric`, in order (None where a result lacks it)."""
        return [row.get(metric) for row in self.rows(trial_id)] \
            if any(metric in row for row in self.rows(trial_id)) else []

    def get_best_trial(self, metric: str, mode: str, scope: str = "last",
                       filter_nan_and_inf: bool = True) -> TrialRecord | None:
        """Ray Tune's `ExperimentAnalysis.get_best_trial`, rule for rule: one trial is the best whatever
        it reported; else each trial's `metric_analysis[metric]` under `scope` (`all`: its max or min),
        NaN and inf skipped, and the first trial wins a tie."""
        if len(self.trials) == 1:
            return self.trials[0]
        best, best_score = None, None
        for trial in self.trials:
            summary = trial.metric_analysis.get(metric)
            if summary is None:
                continue
            value = summary[scope] if scope in RAY_SCOPES else summary[mode]
            if filter_nan_and_inf and _nan_or_inf(value):
                continue
            if best_score is None or (mode == "max" and best_score < value) or (mode == "min" and best_score > value):
                best, best_score = trial, value
        return best


def from_state(path: Path, trial_data: list) -> Results:
    """The trials of the experiment folder `path` from its newest experiment state's `trial_data`, as
    `analysis.read` has read and checked it (Unreadable: use Ray)."""
    return Results(path, [_trial(path, *pair) for pair in trial_data])


def _trial(folder: Path, trial_json: str, metadata_json: str) -> TrialRecord:
    trial, metadata = json.loads(trial_json), json.loads(metadata_json)
    config, last = trial.get("config") or {}, dict(metadata.get("last_result") or {})
    analysis = metadata.get("metric_analysis") or {}
    for name, value in (("config", config), ("last result", last), ("metric_analysis", analysis)):
        if _pickled(value):
            raise Unreadable(f"trial {trial.get('trial_id')}: its {name} holds a value Tune pickled")
    status = "PENDING" if trial["status"] == "RUNNING" else trial["status"]  # as Trial.__setstate__ reads it
    last.setdefault("trial_id", trial["trial_id"])
    return TrialRecord(trial_id=trial["trial_id"], status=status, config=config, last_result=last,
                       metric_analysis=analysis, path=str(folder / trial["relative_logdir"]),
                       error_filename=metadata.get("error_filename"))


def _reported(trial: TrialRecord) -> bool:
    return any(key != "trial_id" for key in trial.last_result)


def _read_history(folder: Path) -> list[dict]:
    """result.json if there is one (as Ray prefers it), else progress.csv; [] when neither reads."""
    try:
        if (folder / "result.json").is_file():
            text = (folder / "result.json").read_text(encoding="utf-8").rstrip("\n")
            return [flatten(json.loads(line)) for line in text.split("\n")] if text else []
        with (folder / "progress.csv").open(newline="", encoding="utf-8") as f:
            return [{k: _csv_value(v) for k, v in row.items()} for row in csv.DictReader(f)]
    except (OSError, ValueError):
        return []  # Ray logs a warning and gives an empty frame


def flatten(row: dict, prefix: str = "") -> dict:
    """Nested dicts as "a/b" keys, as pandas.json_normalize(sep="/") makes the columns."""
    flat: dict = {}
    for key, value in row.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _csv_value(text: str | None) -> Any:
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _nan_or_inf(value: Any) -> bool:
    return isinstance(value, Number) and not math.isfinite(value)


def _pickled(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("_type") == PICKLED or any(_pickled(v) for v in value.values())
    if isinstance(value, list):
        return any(_pickled(v) for v in value)
    return False
