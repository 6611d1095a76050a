"""Checkpoint files are written atomically: a full disk leaves the previous checkpoint, never half of one."""

from __future__ import annotations

import errno
import os

import pytest

from tune_runner.files import write_atomically


def test_a_full_disk_simulated_by_a_failing_fsync_keeps_the_old_file_and_names_the_folder(tmp_path, monkeypatch):
    target = tmp_path / "learner.pkl"
    write_atomically(target, b"old state")

    def full(fd: int) -> None:  # what a full disk does to a write that the kernel buffered: ENOSPC at flush time
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as error:
        write_atomically(target, b"new state that does not fit")
    assert target.read_bytes() == b"old state"
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left behind
    message = str(error.value)
    assert "checkpoint not written to" in message and str(tmp_path) in message and "No space left" in message


def test_a_real_write_replaces_the_whole_file(tmp_path):
    target = tmp_path / "oracle.json"
    write_atomically(target, b"1" * 10_000)
    write_atomically(target, b"2")
    assert target.read_bytes() == b"2"
