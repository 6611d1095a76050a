"""A watchdog that ends our local Ray's processes when the `tune-rl` driver dies without cleaning up.

`ray.init()` starts a local Ray (GCS, raylet, dashboard, agents, workers) as children of the
driver. After `kill -9` of the driver, Ray leaves several of them running (the dashboard and
runtime-env agents among them). `ensure_ray` marks every process it starts with
`TUNE_RL_DRIVER_PID=<pid>` in the environment (inherited by Ray's daemons and by the workers
the raylet forks) and starts this watchdog in its own session:

    python -m tune_runner.cluster.reaper DRIVER_PID

It polls the driver, noting its descendants each time; once the driver is gone it sends SIGTERM to
every process carrying the mark and to those last noted (when still the same processes: Ray's agents
write their title over their environment, so /proc shows them no mark), waits, sends SIGKILL to what
is left, and exits. A driver that ends its Ray itself (cluster.end_local_ray) leaves nothing to
reap. Linux only (it reads /proc); elsewhere it exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

MARK = "TUNE_RL_DRIVER_PID"
MODULE = "tune_runner.cluster.reaper"  # as `python -m` names it in the watchdog's command line


def marked(driver: int) -> list[int]:
    """Pids whose environment carries the driver's mark (never this process)."""
    needle = f"{MARK}={driver}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, ..., starttime at 19), or None when the process
    is gone or unreadable. The name is cut at its last ") ": a process may call itself anything."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(parent: int) -> list[int]:
    """Pids of `parent`'s children, their children and so on, as /proc shows them now; never a reaper.

    Ray's dashboard and runtime-env agents rewrite their process title over their environment, so /proc shows
    them no mark (`marked` misses them); while their raylet lives they are its children."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = stat_fields(entry.name) if entry.name.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], list(children.get(parent, []))
    while todo:
        pid = todo.pop()
        try:
            reaper = MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not reaper:
            found.append(pid)
            todo.extend(children.get(pid, []))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return fields is None or fields[0] != "Z"  # a zombie is dead for our purposes


def started(pid: int) -> str | None:
    """When `pid` started (/proc's clock ticks since boot), which tells a process from a later one given its pid;
    None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else fields[19]


def reap(driver: int, *, grace_s: float = 3.0, known: dict[int, str | None] | None = None) -> int:
    """End every marked process, and those of `known` (pid: `started`) that are still the same processes;
    returns how many there were."""
    pids = sorted({*marked(driver), *(pid for pid, start in (known or {}).items() if start and started(pid) == start)})
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in [*pids, *marked(driver)]:  # and any worker forked meanwhile
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def watch(driver: int, *, poll_s: float = 0.5) -> None:
    """Wait for the driver to die, noting its descendants at each poll (its Ray agents carry no readable mark and
    are orphaned with it), then reap the marked processes and the last noted ones."""
    known: dict[int, str | None] = {}
    while alive(driver):
        known = {pid: started(pid) for pid in descendants(driver)}
        time.sleep(poll_s)
    reap(driver, known=known)


def main() -> None:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or not Path("/proc").is_dir():
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is for the driver, not for us
    watch(int(sys.argv[1]))


if __name__ == "__main__":
    main()
