"""A search interrupted by tune-rl 0.1.0 as released (tests/fixtures/resume_v0_1_0.tar.gz, made by
make_resume_fixture.py there) resumes to its end with this code: Tune pickled our stopper, spec and callbacks
into it by their module paths of that release (tune_runner.runner.BudgetStopper, tune_runner.progress.LiveView,
...), which must still load after the package's layout changes."""

from __future__ import annotations

import csv
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parent / "fixtures" / "resume_v0_1_0.tar.gz"
WRITTEN_AT = "/tmp/tune-rl-resume-fixture/home"  # TUNE_RL_HOME when it was made: saved in tune_rl_run.yaml
# What Tune pickled into it (tuner.pkl, experiment_state-*.json), by the release's module paths.
PICKLED = {"tune_runner.runner": "BudgetStopper", "tune_runner.spec": "ExperimentSpec",
           "tune_runner.search_space": "Param", "tune_runner.progress": "LiveView",
           "tune_runner.tracking": "MlflowTracking", "tune_runner.progress_csv": "ProgressCSV"}


def unpack(home: Path) -> Path:
    """The fixture's TUNE_RL_HOME moved to `home`: the results folder resumes where it lies; the MLflow store,
    saved as an absolute URI, is pointed at its new place (as a user moving a search would edit the file)."""
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(home.parent / "unpacked", filter="data")
    (home.parent / "unpacked" / "home").rename(home)
    run = home / "results" / "old" / "tune_rl_run.yaml"
    run.write_text(run.read_text().replace(WRITTEN_AT, str(home)))
    return home / "results" / "old"


def test_the_fixture_holds_the_old_module_paths(tmp_path):
    exp = unpack(tmp_path / "home")
    pickled = (exp / "tuner.pkl").read_bytes()
    for module, name in PICKLED.items():
        assert module.encode() in pickled and name.encode() in pickled, module


def test_a_search_interrupted_by_the_released_version_resumes_to_its_end(ray_session, cli, tmp_path, monkeypatch):
    """In the suite's Ray, in-process: the driver unpickles the old paths as a fresh `tune-rl resume` does (the
    shims load with the package), and every trial actor is a fresh process either way."""
    home = tmp_path / "home"
    exp = unpack(home)
    monkeypatch.setenv("TUNE_RL_HOME", str(home))
    proc = cli("resume", "old")
    assert proc.status == 0, proc.out + proc.err
    assert "resuming:" in proc.out
    from ray.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis(str(exp))
    assert len(analysis.trials) == 2 and {t.status for t in analysis.trials} == {"TERMINATED"}
    for progress in exp.glob("*/progress.csv"):
        with progress.open() as f:
            steps = [int(float(row["env_steps"])) for row in csv.DictReader(f)]
        assert steps[-1] == 10_000 and steps.count(1_000) == 1, (progress, steps)  # continued, not restarted
    assert (exp / "tune_rl_finished.json").is_file()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("old").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert (len(parents), len(runs) - len(parents)) == (1, 2)  # the same parent run continued
