"""Each trial's progress.csv, with a column for every key any of its results had.

Ray's CSVLoggerCallback fixes the columns at a trial's first result and drops keys that appear
later. Ours report a loss only once a gradient step ran (DQN's first iteration usually has none,
and a user agent may add keys later), so with Ray's logger `qf_loss` would never reach the file.
Here a new key widens the header: the file is rewritten once with the new column, earlier rows
empty in it. A resumed trial keeps the columns its file already has.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from ray.air.constants import EXPR_PROGRESS_FILE
from ray.tune.logger import CSVLoggerCallback
from ray.tune.utils import flatten_dict


class ProgressCSV(CSVLoggerCallback):
    """progress.csv per trial, widened when a result brings a key the header lacks."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._trial_files:
            self._setup_trial(trial)
        keys = list(flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/"))
        path = Path(trial.local_path, EXPR_PROGRESS_FILE)
        writer = self._trial_csv[trial]
        if writer is None and self._trial_continue[trial]:
            writer = self._open(trial, path, _header(path))  # a resumed trial: keep the file's columns
        if writer is not None and any(k not in writer.fieldnames for k in keys):
            fields = [*writer.fieldnames, *(k for k in keys if k not in writer.fieldnames)]
            self._trial_files[trial].close()
            _rewrite(path, fields)
            self._open(trial, path, fields)
        super().log_trial_result(iteration, trial, result)

    def _open(self, trial: Any, path: Path, fields: list[str]) -> csv.DictWriter:
        self._trial_files[trial] = path.open("a", newline="")
        self._trial_csv[trial] = csv.DictWriter(self._trial_files[trial], fields)
        return self._trial_csv[trial]


def _header(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return next(csv.reader(f), [])


def _rewrite(path: Path, fields: list[str]) -> None:
    """The file again with `fields` as its header (a superset of the old one), atomically."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
