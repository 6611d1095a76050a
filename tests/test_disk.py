"""A full disk under a search (issue 46), without Ray running: DiskGuard stops the search (Tune's own Ctrl-C) once
the results folder's free space is below twice its trials' newest checkpoints, twice Tune's state and a floor, or a
trial ran out of space, and says what to free and how to continue."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from tune_runner.tuning import disk


@pytest.fixture
def guard(tmp_path, monkeypatch):
    stopped = []
    monkeypatch.setattr(disk.os, "kill", lambda pid, sig: stopped.append(sig))
    monkeypatch.setattr(disk, "CHECK_EVERY_S", 0.0)
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "experiment_state-x.json").write_bytes(b"x" * 1000)
    checkpoint = tmp_path / "checkpoint_000001"
    checkpoint.mkdir()
    (checkpoint / "learner.pkl").write_bytes(b"x" * 3 * 2**20)
    made = disk.DiskGuard(exp)
    made.on_checkpoint(0, [], SimpleNamespace(trial_id="t1"), SimpleNamespace(path=str(checkpoint)))
    return made, stopped


def test_free_space_below_what_the_search_needs_stops_it_once(guard, monkeypatch):
    made, stopped = guard
    needed = disk.FLOOR + 2 * 3 * 2**20 + 2 * 1000
    assert made.needed() == needed
    monkeypatch.setattr(disk, "free_bytes", lambda folder: needed)
    made.on_step_end(0, [])
    assert stopped == [] and made.tripped is None  # exactly enough: it goes on
    monkeypatch.setattr(disk, "free_bytes", lambda folder: needed - 1)
    made.on_step_end(0, [])
    made.on_step_end(0, [])
    assert stopped == [signal.SIGINT] and made.tripped == (needed - 1, needed)
    said = made.said("tune-rl resume exp --storage /full")
    assert said.startswith(f"{made.folder}: ") and "free, the search needs about 10.0 MB" in said
    assert said.endswith("then run: tune-rl resume exp --storage /full") and "\n" not in said


def test_a_trial_that_ran_out_of_space_stops_the_search(guard, monkeypatch, tmp_path):
    made, stopped = guard
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 10**12)
    error = tmp_path / "error.txt"
    error.write_text("Traceback ...\nOSError: [Errno 28] No space left on device: 'learner.pkl.tmp'\n")
    made.on_trial_error(0, [], SimpleNamespace(error_file=str(error), error_msg=None))
    assert stopped == [signal.SIGINT]
    other = disk.DiskGuard(made.folder)
    error.write_text("RuntimeError: out of memory\n")
    other.on_trial_error(0, [], SimpleNamespace(error_file=str(error), error_msg=None))
    assert other.tripped is None


def test_free_bytes_reads_the_nearest_folder_that_exists(tmp_path):
    assert disk.free_bytes(tmp_path / "not" / "yet") == disk.free_bytes(tmp_path) > 0
    assert Path(tmp_path).exists()


@pytest.mark.parametrize("fails", [False, True], ids=["written", "disk-full"])
def test_tunes_state_is_never_left_cut_short(tmp_path, monkeypatch, fails):
    """Our TuneController writes Tune's state over the last one so that a write the disk cuts short leaves the last
    whole state in place (Tune's own writes it with open('w') and json.dump)."""
    import ray.tune.tune as tune_run
    from ray.tune.execution.tune_controller import TuneController

    from tune_runner.tuning.warm import WarmTrials, _controller_class

    def tunes_own(self):  # what Tune's save_to_dir does with the file, and a disk that fills half way
        path = Path(self._storage.experiment_driver_staging_path, self.experiment_state_file_name)
        with open(path, "w") as f:
            f.write('{"trial_data": [1, 2')
            if fails:
                raise OSError(28, "No space left on device")
            f.write(', 3]}')

    monkeypatch.setattr(TuneController, "save_to_dir", tunes_own)
    with _controller_class(WarmTrials(0), keep=False):
        ours = tune_run.TuneController.__new__(tune_run.TuneController)
    ours._storage = SimpleNamespace(experiment_driver_staging_path=str(tmp_path))  # noqa: SLF001
    ours._session_str = "s"  # noqa: SLF001
    state = tmp_path / ours.experiment_state_file_name
    state.write_text('{"trial_data": [1]}')
    if fails:
        with pytest.raises(OSError):
            ours.save_to_dir()
        assert state.read_text() == '{"trial_data": [1]}'  # the last whole state, not the half-written one
    else:
        ours.save_to_dir()
        assert state.read_text() == '{"trial_data": [1, 2, 3]}'
    assert sorted(p.name for p in tmp_path.iterdir()) == [state.name]  # nothing left beside it
