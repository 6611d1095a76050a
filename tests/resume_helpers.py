"""An interrupted search's folder as `tune-rl search` leaves it, built without Ray (Tune's own state files
as stubs: a resume checks that they are there before it starts anything)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from tune_runner.spec.experiment import load_spec
from tune_runner.tuning import resume, runner


def options(home: Path, **changes) -> runner.RunOptions:
    """Every saved option away from its default, as a user's search might set them."""
    base = runner.RunOptions(storage=home / "elsewhere", mlflow_uri=f"sqlite:///{home / 'other' / 'm.db'}",
                             max_failures=5, export=False, reevaluate=False, top=4, seeds=6,
                             register_model="cartpole-ppo", num_cpus=2, num_gpus=0.5, cpus_per_trial=0.5,
                             gpus_per_trial=0.25, search_id=resume.new_search_id())
    return replace(base, **changes)


def saved_search(opts: runner.RunOptions, name: str = "exp", *, tune_state: bool = True) -> Path:
    """The folder of search `name` interrupted after Tune saved its state."""
    folder = runner.local_folder(opts.storage, name)
    resume.save(folder, spec=load_spec("oracle"), options=opts)
    if tune_state:
        (folder / "tuner.pkl").write_bytes(b"stub")
        (folder / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    return folder


def record_runs(monkeypatch) -> list:
    """runner.run replaced by a recorder of (spec, options): what a resume would start, without starting it
    (Ray and the MLflow runs are started only inside runner.run)."""
    calls: list = []

    def run(spec, opts, **_):
        calls.append((spec, opts))
        return runner.Outcome(runner.local_folder(opts.storage, opts.name), best=None, export_path=None,
                              counts=Counter(), seconds=0.0)  # ended with no trial: no best, status 0

    monkeypatch.setattr(runner, "run", run)
    return calls
