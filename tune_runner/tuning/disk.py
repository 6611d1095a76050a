"""A full disk under a search (issue 46): stop before it cuts a file short, and say what to free.

A search writes into its results folder as it goes: each trial's checkpoints (a new one is written before the old
one is deleted), its result rows, Ray Tune's experiment state every 2 s. Run out of space in the middle of one of
those and a trial errors with "No space left on device", Tune's state file is cut short, and the search ends with
an error no one can act on. `DiskGuard` watches the folder's free space against what the search needs to go on
(twice the newest checkpoint of every trial that writes them, twice Tune's state, and a floor): when the free
space falls below it, or a trial reports ENOSPC, it stops the search as Ctrl-C does (the state saved, the trials
resumable), and the runner says in one line which folder, how much is free, how much the search needs, and the
command that continues it once space is freed.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

FLOOR = 4 * 2**20  # bytes a search keeps free beyond its estimate: result rows, logs, MLflow's spool
CHECK_EVERY_S = 1.0
NO_SPACE = "No space left on device"


def folder_bytes(path: Path) -> int:
    """The bytes of the files under `path` (0 where it is gone)."""
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def free_bytes(folder: Path) -> int:
    """The free space where `folder` is (or will be: its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def fmt_bytes(n: float) -> str:
    return f"{n / 2**20:.1f} MB" if n < 2**30 else f"{n / 2**30:.2f} GB"


def _callback_class() -> type:
    from ray.tune import Callback

    class DiskGuard(Callback):
        """Stops the search (SIGINT to this process: Tune's own Ctrl-C, which saves its state) once the results
        folder's free space is below what the search needs to go on (`needed`), or a trial ran out of it."""

        def __init__(self, folder: Path) -> None:
            self.folder = folder
            self.checkpoints: dict[str, int] = {}  # trial id -> bytes of its newest checkpoint
            self.tripped: tuple[int, int] | None = None  # (free, needed) when it stopped the search
            self.checked = 0.0

        def __getstate__(self) -> dict:
            return {**self.__dict__, "tripped": None}

        def needed(self) -> int:
            state = sum(os.path.getsize(p) for p in self.folder.glob("*state*") if p.is_file()) \
                if self.folder.is_dir() else 0
            return FLOOR + 2 * sum(self.checkpoints.values()) + 2 * state

        def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
            path = getattr(checkpoint, "path", None)
            if path:
                self.checkpoints[trial.trial_id] = folder_bytes(Path(path))

        def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
            if self.tripped is not None or time.monotonic() - self.checked < CHECK_EVERY_S:
                return
            self.checked = time.monotonic()
            free, needed = free_bytes(self.folder), self.needed()
            if free < needed:
                self._stop(free, needed)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            from tune_runner.tracking.callback import last_error_line

            if self.tripped is None and NO_SPACE in last_error_line(trial):
                self._stop(free_bytes(self.folder), self.needed())

        def _stop(self, free: int, needed: int) -> None:
            self.tripped = (free, needed)
            os.kill(os.getpid(), signal.SIGINT)  # Tune ends the fit as on Ctrl-C: trials saved, resumable

        def said(self, hint: str) -> str:
            free, needed = self.tripped or (0, 0)
            return (f"{self.folder}: {fmt_bytes(free)} free, the search needs about {fmt_bytes(needed)} to go on "
                    f"(its trials' checkpoints and Ray Tune's state); its state is saved: free space there, then "
                    f"run: {hint}")

    return DiskGuard


def DiskGuard(folder: Path) -> Any:  # noqa: N802 - a class factory (Ray Tune is imported when a search runs)
    return _callback_class()(folder)
