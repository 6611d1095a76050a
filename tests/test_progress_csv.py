"""progress.csv keeps a column for a key that first appears in a later result (a loss before the first
gradient step is absent), and a resumed trial appends under its file's own header. No Ray: Tune's
logger callbacks only need a trial with a local folder."""

from __future__ import annotations

import csv
from pathlib import Path

from tune_runner.tuning.progress_csv import ProgressCSV


class FolderTrial:
    """What a logger callback reads of a Trial: its folder, and whether it restored a checkpoint."""

    def __init__(self, folder: Path) -> None:
        self.local_path, self.checkpoint = str(folder), None

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)


def rows(folder: Path) -> list[dict]:
    with (folder / "progress.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_key_that_appears_later_gets_its_column_and_earlier_rows_stay(tmp_path):
    trial, log = FolderTrial(tmp_path), ProgressCSV()
    log.log_trial_result(1, trial, {"env_steps": 990, "episode_return_mean": 20.5, "config": {"lr": 1}})
    log.log_trial_result(2, trial, {"env_steps": 1980, "episode_return_mean": 25.0, "qf_loss": 0.25})
    log.log_trial_result(3, trial, {"env_steps": 2970, "episode_return_mean": 30.0, "qf_loss": 0.5,
                                    "nested": {"a": 1}})
    log.log_trial_end(trial)
    got = rows(tmp_path)
    assert [r["env_steps"] for r in got] == ["990", "1980", "2970"]
    assert [r["qf_loss"] for r in got] == ["", "0.25", "0.5"]
    assert [r["nested/a"] for r in got] == ["", "", "1"]
    assert "config" not in got[0] and "config/lr" not in got[0]


def test_a_resumed_trial_appends_under_the_header_its_file_has(tmp_path):
    trial, first = FolderTrial(tmp_path), ProgressCSV()
    first.log_trial_result(1, trial, {"env_steps": 1000, "qf_loss": 0.5, "episode_return_mean": 10.0})
    first.log_trial_end(trial)
    resumed = ProgressCSV()  # a fresh callback, as after tune-rl resume; the keys come in another order
    resumed.log_trial_result(2, trial, {"episode_return_mean": 12.0, "env_steps": 2000, "qf_loss": 0.25, "kl": 1})
    resumed.log_trial_end(trial)
    got = rows(tmp_path)
    assert [(r["env_steps"], r["qf_loss"], r["episode_return_mean"]) for r in got] == \
        [("1000", "0.5", "10.0"), ("2000", "0.25", "12.0")]
    assert [r["kl"] for r in got] == ["", "1"]
