"""What a search could not write to MLflow, kept under its experiment folder until the store is back (issue 46).

The tracking store may go away for minutes: an `mlflow server` restarted, PostgreSQL restarting, a SQLite file
locked. The search trains on. The tracker's writer (tracking.callback) runs MLflow calls one at a time, in order;
when one fails because the store cannot be reached (`unreachable`), that call and every later one are appended
here instead, as (method name, arguments) of the tracker, and the writer tries the store again every RETRY_S.
Once it answers, the spooled calls run in their order (runs created while it was away are created then, and the
calls after them find their ids), and the spool is emptied. What is still here when the search ends is written
by `tune-rl sync NAME`, which replays the same calls on a tracker rebuilt from the search.

The writer (`Writer`, one thread) lives here with its spool; the tracker hands it every call.
The file is a stream of pickles: first a header (the store, the experiment and the search's parent run), then one
record per call, each flushed as it is written. Nothing here imports MLflow or Ray.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_runner.paths import SPOOL_FILE  # noqa: F401 - where a search's spool lies, in its experiment folder

RETRY_S = 10.0  # while the store is away, how often the writer tries it again
# The exceptions (by class name, anywhere in an exception's chain) that mean the store could not be reached,
# not that it refused the call: requests' connection errors and timeouts, urllib3's, the OS's, SQLAlchemy's
# OperationalError (a locked SQLite file, a PostgreSQL server restarting)
UNREACHABLE = frozenset({"ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "MaxRetryError",
                         "NewConnectionError", "ProtocolError", "RemoteDisconnected", "ConnectionRefusedError",
                         "ConnectionResetError", "BrokenPipeError", "OperationalError", "RetryError"})
# MLflow's REST client wraps a dead server in MlflowException("API request to ... failed with exception ...")
UNREACHABLE_WORDS = ("Max retries exceeded", "Connection refused", "Failed to establish a new connection",
                     "database is locked", "Connection reset", "Remote end closed connection")


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the store could not be reached (spool and retry), rather than refused the call."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ in UNREACHABLE or any(word in str(current) for word in UNREACHABLE_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass
class Outage:
    """When the store went away, how many calls waited for it, and when it came back (None: not yet)."""

    since: float
    calls: int = 0
    back: float | None = None

    def said(self, spool: Path, sync: str) -> str:
        """One line for the search's summary."""
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        if self.back is not None:
            return (f"the store was unreachable for {self.back - self.since:.0f} s from {when}: {self.calls} "
                    f"call(s) waited in {spool.name} and were written when it came back")
        return (f"the store has been unreachable since {when}: {self.calls} call(s) wait in {spool}; "
                f"once it is back, write them with: {sync}")


class Spool:
    """The spool file of one search (`path`), appended to by one writer thread."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path, self.header = path, header
        self.outage: Outage | None = None
        self.tried = 0.0

    @property
    def active(self) -> bool:
        """Whether calls wait here (the store is away, or a spool left by an earlier run is not written yet)."""
        return self.outage is not None and self.outage.back is None or self.path.is_file()

    def add(self, name: str, args: tuple) -> None:
        """Append one call of the tracker (its method's name and arguments), flushed to the file."""
        if self.outage is None or self.outage.back is not None:
            self.outage = Outage(time.time())
        new = not self.path.is_file()
        with open(self.path, "ab") as f:
            if new:
                pickle.dump(("header", self.header), f, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump((name, args), f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        self.outage.calls += 1

    def due(self) -> bool:
        """Whether it is time to try the store again (every RETRY_S while calls wait)."""
        return time.monotonic() - self.tried >= RETRY_S

    def calls(self) -> list[tuple[str, tuple]]:
        return list(read(self.path))[1:] if self.path.is_file() else []

    def keep(self, left: list[tuple[str, tuple]]) -> None:
        """Write back the calls not yet run (after a replay stopped part way), or remove the file when none are."""
        if not left:
            self.path.unlink(missing_ok=True)
            if self.outage is not None:
                self.outage.back = time.time()
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(("header", self.header), f, protocol=pickle.HIGHEST_PROTOCOL)
            for call in left:
                pickle.dump(call, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def read(path: Path) -> Iterator[tuple[str, Any]]:
    """The spool's records, header first; a record cut short by a crash while it was written ends the stream."""
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)  # noqa: S301 - our own spool, written by Spool.add
            except EOFError:
                return
            except (pickle.UnpicklingError, ValueError, AttributeError):
                return


def replay(tracker: Any, calls: list[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
    """Run the spooled calls on `tracker` in order; the ones left when the store went away again (from the one
    that failed), or [] when all ran. Any other error is raised: the store refused a call."""
    for index, (name, args) in enumerate(calls):
        try:
            getattr(tracker, name)(*args)
        except Exception as exc:
            if unreachable(exc):
                return calls[index:]
            raise
    return []


class Writer:
    """One thread that runs MLflow calls in the order they were submitted. A call that finds the store
    unreachable goes to the spool (when there is one), and so does every later call, until the store answers
    again (tracking.spool). Any other error stops it: nothing submitted after runs, and raise_error (or wait)
    raises that error from then on."""

    def __init__(self, spool: Spool | None = None) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._error: BaseException | None = None
        self.spool = spool

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self.raise_error()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tune-rl-mlflow")
        self._pool.submit(self._run, fn, *args)

    def _run(self, fn: Callable[..., None], *args: Any) -> None:
        if self._error is not None:
            return
        spool = self.spool
        try:
            if spool is not None and spool.active:  # behind the calls that wait: in order, or not at all
                spool.add(fn.__name__, args)
                self.retry(fn.__self__)
                return
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to Tune's loop by raise_error
            if spool is not None and unreachable(exc) and not spool.active:
                spool.add(fn.__name__, args)
                spool.tried = time.monotonic()
            elif spool is None or not unreachable(exc):
                self._error = exc

    def retry(self, tracker: Any, *, now: bool = False) -> None:
        """(On the writer thread.) Once the store answers again, run the spooled calls in their order; every
        RETRY_S at most (or `now`)."""
        spool = self.spool
        if spool is None or not spool.active or not (now or spool.due()):
            return
        spool.tried = time.monotonic()
        try:
            tracker.mlflow.get_experiment(tracker.experiment_id)
        except Exception as exc:
            if unreachable(exc):
                return
            raise
        spool.keep(replay(tracker, spool.calls()))

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Block until every submitted call has run and end the thread; then raise the first error, if any.
        A later submit starts a new thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.raise_error()
