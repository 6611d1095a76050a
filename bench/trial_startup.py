"""What a new trial actor's process spends on imports before its first iteration, by trainable (issue 15's suite
time, issue 16's first iteration within 1 s).

Ray ends an actor's worker process with the actor, so every search starts a new process for each trial it runs at
once (Tune reuses them only within one Tuner.fit), and its re-evaluation starts new ones again. Each such process
imports Ray, Ray Tune and the trainable's modules (`Backend.worker_modules` and the module of its Tune class; RLlib's
also its algorithm) before it can train. This times that in fresh interpreters, CPU and wall, against a peer run in
the same script: a process that imports Ray alone (what any Ray worker pays).

With `--ray-logs`, it also counts the trial actors a Ray session started, by class (the second line of each
worker-*.out is `:actor_name:<class>`), and multiplies each count by its trainable's median import CPU: about
how much of that session's CPU went to trial actors' imports.

    .venv/bin/python bench/trial_startup.py                                   # 3 fresh processes per row
    .venv/bin/python bench/trial_startup.py --reps 5 --ray-logs /tmp/ray/session_latest/logs
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROWS = {"ray alone (peer)": (None, ()),
        "oracle": ("oracle", ("tune_runner.trainables.oracle",)),
        "ppo / dqn (ours)": ("ppo", ("tune_runner.trainables.own",)),
        "rllib/PPO": ("rllib/PPO", ("tune_runner.trainables.rllib", "ray.rllib.algorithms.ppo"))}
"""Row -> the trainable whose `worker_modules` its process imports, and the modules of its Tune class (and RLlib's
algorithm) besides."""
ACTOR_ROWS = {"Oracle": "oracle", "OracleStaleRestore": "oracle", "stateless_oracle": "oracle",
              "OwnPPO": "ppo / dqn (ours)", "OwnDQN": "ppo / dqn (ours)", "PPO": "rllib/PPO", "DQN": "rllib/PPO"}
"""Trial actor class (as Ray logs it) -> the row whose import cost it pays; RLlib's DQN taken as its PPO."""


def import_cost(modules: tuple[str, ...]) -> tuple[float, float]:
    """CPU and wall seconds of a fresh interpreter importing `modules` (its bytecode already written)."""
    code = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)"
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    subprocess.run([sys.executable, "-c", code, *modules], check=True, env=env)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - wall
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def row_modules(row: str) -> tuple[str, ...]:
    """What a trial process of `row` imports: Ray, its backend's worker_modules (catalog), its trainable's modules."""
    name, extra = ROWS[row]
    if name is None:
        return ("ray",)
    from tune_runner.trainables.catalog import backend

    return ("ray", *backend(name).worker_modules, *extra)


def session_actors(logs: Path) -> collections.Counter[str]:
    """Trial actors (and any other actors) a Ray session's workers ran, by class name."""
    counts: collections.Counter[str] = collections.Counter()
    for path in logs.glob("worker-*.out"):
        lines = path.read_text(errors="replace").splitlines()
        if len(lines) > 1 and lines[1].startswith(":actor_name:"):
            counts[lines[1].removeprefix(":actor_name:")] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per row, alternating (default 3)")
    parser.add_argument("--ray-logs", type=Path, help="a Ray session's logs folder: count its actors by class")
    args = parser.parse_args()
    imports = {row: row_modules(row) for row in ROWS}
    for modules in imports.values():  # once each, untimed: bytecode written, files in the page cache
        import_cost(modules)
    runs: dict[str, list[tuple[float, float]]] = {row: [] for row in ROWS}
    for rep in range(args.reps):
        for row, modules in imports.items():
            runs[row].append(import_cost(modules))
        print(f"repetition {rep + 1}/{args.reps}: " + ", ".join(f"{row} {runs[row][-1][0]:.2f} CPU-s" for row in ROWS),
              flush=True)
    cpu = {row: statistics.median(c for c, _ in rs) for row, rs in runs.items()}
    peer = cpu["ray alone (peer)"]
    print("| trial process of | imports | CPU s (median) | wall s (median) | x ray alone |\n|:--|:--|--:|--:|--:|")
    for row, rs in runs.items():
        print(f"| {row} | {', '.join(imports[row])} | {cpu[row]:.2f} | {statistics.median(w for _, w in rs):.2f} "
              f"| {cpu[row] / peer:.2f} |")
    if args.ray_logs:
        counts, total = session_actors(args.ray_logs), 0.0
        print(f"\nactors in {args.ray_logs}, by class (estimated import CPU: count x its row's median):")
        for name, n in counts.most_common():
            row = ACTOR_ROWS.get(name)
            cost = n * cpu[row] if row else None
            total += cost or 0.0
            print(f"  {n:4d} {name:<24} " + (f"{cost:7.1f} CPU-s ({row})" if row else "(not estimated)"))
        print(f"  {sum(counts.values()):4d} actors; estimated import CPU of those estimated: {total:.0f} CPU-s")


if __name__ == "__main__":
    main()
