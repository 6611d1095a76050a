"""Where a command's CPU goes, by kind of process (issue 15's suite time): the e2e stage is CPU-bound on 2 cores,
so its wall time is about its CPU over 2, and what costs is what burns CPU, not what waits.

It runs the command and reads /proc every 0.5 s: each process started after it, its CPU seconds so far (user +
system) and the titles it had (a Ray worker retitles itself `ray::<ActorClass>` once it hosts an actor). At the
end it prints CPU seconds and process counts per kind, and leaves with the command's exit status. A process that
lives less than a sample is missed, and one's last half second may be; the totals are lower bounds.

    .venv/bin/python bench/suite_cpu.py -- .venv/bin/python -m pytest -q -p no:cacheprovider -m e2e -n 2 \\
        --dist loadgroup --no-loadscope-reorder
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
RAY_DAEMONS = ("gcs_server", "raylet", "log_monitor", "dashboard/agent", "dashboard/dashboard.py", "monitor.py",
               "runtime_env/agent")


def kind(titles: list[str]) -> str:
    """What a process was, from the command lines it showed."""
    text = " | ".join(titles)
    actors = [name for name in re.findall(r"ray::(\w+)", text) if name != "IDLE"]
    if actors:
        return f"Ray actor {actors[0]}"
    if "ray::IDLE" in text:
        return "Ray worker, no actor"
    for daemon in RAY_DAEMONS:
        if daemon in text:
            return f"Ray {daemon}"
    if "exec(eval(sys.stdin.readline()))" in text:
        return "pytest-xdist worker (in-process searches)"
    if "-m pytest" in text:
        return "pytest"
    if "tune_runner" in text or "tune-rl" in text:
        return "tune-rl process"
    if "mlflow server" in text or "-m mlflow" in text:
        return "mlflow server"
    for name in ("postgres", "chrom"):
        if name in text:
            return name
    return "other Python" if "python" in text else "other"


def sample(seen: dict[str, list], since: int) -> None:
    """One look at /proc: for each process started at or after `since` (clock ticks since boot), its CPU seconds
    and its titles, into `seen` (keyed by pid and start time, so a reused pid is another process)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                title = f.read().replace("\0", " ").strip()[:200]
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        started = int(fields[19])
        if started < since or not title:
            continue
        entry = seen.setdefault(f"{pid}:{started}", [[], 0.0])
        if title not in entry[0] and len(entry[0]) < 6:
            entry[0].append(title)
        entry[1] = max(entry[1], (int(fields[11]) + int(fields[12])) / TICKS)


def table(seen: dict[str, list]) -> list[tuple[str, int, float]]:
    """(kind, processes, CPU seconds), most CPU first."""
    cpu, count = collections.Counter(), collections.Counter()
    for titles, seconds in seen.values():
        cpu[kind(titles)] += seconds
        count[kind(titles)] += 1
    return [(name, count[name], seconds) for name, seconds in cpu.most_common()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    with open("/proc/self/stat") as f:
        stat = f.read()
    since = int(stat[stat.rfind(")") + 2:].split()[19])
    seen: dict[str, list] = {}
    began = time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(seen, since)
        time.sleep(0.5)
    wall = time.monotonic() - began
    rows = table(seen)
    total = sum(seconds for _, _, seconds in rows)
    print(f"\n{wall:.0f} s wall, {total:.0f} CPU-s seen ({os.cpu_count()} CPUs: {wall * os.cpu_count():.0f} CPU-s "
          f"available), exit status {proc.returncode}")
    print("| kind | processes | CPU-s | share |\n|:--|--:|--:|--:|")
    for name, processes, seconds in rows:
        print(f"| {name} | {processes} | {seconds:.1f} | {seconds / total:.0%} |")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
