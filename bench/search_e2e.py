"""`tune-rl search --space ppo_small` (what `make search` runs) end to end, this checkout against a base
commit in the same run, with where the time goes.

    flock /tmp/ray-e2e.lock .venv/bin/python bench/search_e2e.py                 # 3 rounds vs 2baa529
    flock /tmp/ray-e2e.lock .venv/bin/python bench/search_e2e.py --rounds 5 --base HEAD~3
    flock /tmp/ray-e2e.lock .venv/bin/python bench/search_e2e.py --base ''      # this checkout only

Each round runs the base, then this checkout (alternating, so a noisy moment on the machine falls on
both), each as a fresh `tune-rl search` process with a fresh TUNE_RL_HOME (so a new MLflow store, as on
a first `make search`), on a local Ray of --num-cpus CPUs (2, as issue 16's target). The base runs from
a `git worktree` of --base (removed at the end) on PYTHONPATH with this venv. bench/search_probe.py times
the stages inside each process; printed are the medians per version and their ratio (ours / base):

- `wall`: process start to exit, less the probe's own reading of Ray's timeline (about 1 s, after the
  re-evaluation; counted in the walls printed before 2026-11-28), the figure issue 16 asks to bring to 30 s
  (from 75 s); issue 16 counted its 75 s
  "from Ray start to the exported bundle", which `Ray start to exported bundle` measures (to the end of
  results.export.bundle: best.yaml is written right after);
- the stages: imports, the checks, Ray's start, MLflow's store and parent run, the search's Tuner.fit,
  the re-evaluation's Tuner.fit, the report, the model log;
- `training`: the trials' own seconds (sum of time_this_iter_s over both stages) over the CPUs, the
  least wall time the training could take; `not training` is wall less that;
- `new actor to 1st iteration` and `reused actor to 1st iteration`: seconds from Tune asking Ray for a
  trial's actor (or handing it a finished trial's) to that trial's first iteration starting. Issue 16's
  goal is at most 1 s; the slowest trial of each kind is shown;
- `gap between iterations`: how long a trial's actor waits between one task and the next (Tune's round
  trip: the result to the driver, its callbacks, the next call), the mean over all actors.

ASHA's decisions depend on the order in which results arrive, so two runs of one version may train
different amounts (a trial stopped at 30% of its budget in one run continues in another): `env steps`
says how much each run trained; compare `not training` rather than `wall` when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "search_probe.py"
BASE = "2baa529"  # issue 16's starting point: before the speed work
STAGES = ("_checked", "ensure_ray", "_tracking", "_fit", "reevaluate", "write", "_log_model")  # search_probe's


def base_checkout(ref: str, folder: Path) -> Path:
    """A detached `git worktree` of `ref` in `folder` (removed by remove_checkout)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), ref], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return folder


def remove_checkout(folder: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def compile_sources(source: Path) -> None:
    """Bytecode for `source`'s tune_runner beside it (git ignores __pycache__), as an installed package has
    it: the runs then read it even where PYTHONDONTWRITEBYTECODE is set (and write nothing elsewhere)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(source / "tune_runner")], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def run_search(source: Path, *, work: Path, num_cpus: int) -> dict:
    """One `tune-rl search --space ppo_small` of the tune_runner in `source`: the probe's record, the wall
    time from fork to exit, and what the search trained and found."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    out = home / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(source), "TUNE_RL_HOME": str(home)}
    forked_at, started = time.time(), time.monotonic()
    proc = subprocess.run([sys.executable, str(PROBE), str(out), "search", "--space", "ppo_small", "--num-cpus",
                           str(num_cpus)], env=env, cwd=source, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit(f"search in {source} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    record = json.loads(out.read_text())
    record.update(outer_wall_s=wall, forked_at=forked_at, **trained(home / "results"))
    shutil.rmtree(home, ignore_errors=True)
    return record


def trained(results: Path) -> dict:
    """Training seconds and env steps of every trial (search and re-evaluation), and the verdict."""
    seconds = steps = 0.0
    for progress in results.glob("*/**/result.json"):
        rows = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
        seconds += sum(float(r.get("time_this_iter_s") or 0.0) for r in rows)
        steps += int(rows[-1].get("env_steps", 0)) if rows else 0
    bundle = next(results.glob("*/best.yaml"), None)
    import yaml

    evaluation = (yaml.safe_load(bundle.read_text()) or {}).get("evaluation") or {} if bundle else {}
    ranking = evaluation.get("ranking") or [{}]
    return {"training_s": seconds, "env_steps": steps, "best_solved": ranking[0].get("solved")}


def user_wall(record: dict) -> float:
    """Process start to exit, less the probe's own reading of Ray's timeline: what a user's search takes."""
    return record["outer_wall_s"] - record.get("probe_s", 0.0)


def numbers(record: dict, *, num_cpus: int) -> dict[str, float]:
    """The figures one run contributes to the table, in the order the run goes through them."""
    first: dict[str, dict] = {}
    for phase in record["phases"]:
        first.setdefault(phase["name"], phase)
    took = {name: first[name]["seconds"] if name in first else float("nan") for name in STAGES}
    end = {name: p["start"] + p["seconds"] for name, p in first.items()}
    python_start = record["started_at"] - record["forked_at"]
    probe = record.get("probe_s", 0.0)  # the probe's own reading of Ray's timeline, after _finish
    row = {"wall": user_wall(record), "python start": python_start,
           "to Ray start": first["ensure_ray"]["start"],
           "  of which the checks": took["_checked"], "Ray start": took["ensure_ray"],
           "MLflow setup": took["_tracking"],
           "search fit": took["_fit"], "between the fits": first["reevaluate"]["start"] - end["_fit"],
           "re-evaluation fit": took["reevaluate"],
           "after the re-evaluation": record["wall_s"] - end["reevaluate"] - probe,
           "  of which the report": took["write"], "  of which the model log": took["_log_model"],
           "exit": record["outer_wall_s"] - python_start - record["wall_s"],
           "Ray start to exported bundle": end.get("bundle", float("nan")) - first["ensure_ray"]["start"],
           "training": record["training_s"] / num_cpus}
    row["not training"] = row["wall"] - row["training"]
    row["driver CPU"] = record["driver_cpu_s"] - record.get("probe_cpu_s", 0.0)
    for kind in ("new", "reused"):
        waits = [t["to_first_iteration_s"] for t in record["trials"] if t["actor"] == kind]
        row[f"{kind} actor to 1st iteration (max)"] = max(waits, default=float("nan"))
    for stage, after_search in (("search", False), ("re-evaluation", True)):  # warm_workers acts on the latter
        waits = [t["to_first_iteration_s"] for t in record["trials"]
                 if t["actor"] == "new" and (t["first_iteration_at"] > end["_fit"]) == after_search]
        row[f"  {stage}'s new actors (max)"] = max(waits, default=float("nan"))
    gaps = [g for actor in record["actors"] for g in actor["gaps"]]
    row["gap between iterations (ms)"] = 1000 * statistics.fmean(gaps) if gaps else float("nan")
    row["env steps (k)"] = record["env_steps"] / 1000
    return row


def table(runs: dict[str, list[dict]]) -> str:
    """Medians per version, and ours / base where there is a base."""
    names = list(runs)
    lines = [f"| {'':38} | " + " | ".join(f"{n:>9}" for n in names) + (" | ours/base |" if len(names) > 1 else " |"),
             "|:--" + "|--:" * (len(names) + (len(names) > 1)) + "|"]
    for key in runs[names[0]][0]:
        values = [statistics.median(r[key] for r in runs[n]) for n in names]
        ratio = ""
        if len(names) > 1:
            ratio = f" | {values[-1] / values[0]:9.2f}" if values[0] else " |         -"
        lines.append(f"| {key:38} | " + " | ".join(f"{v:9.2f}" for v in values) + ratio + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default=BASE, help="git ref to compare with ('' for this checkout only)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--json", help="write every run's record here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="search-e2e-"))
    sources = {"ours": ROOT}
    if args.base:
        sources = {"base": base_checkout(args.base, work / "base"), "ours": ROOT}
    records: dict[str, list[dict]] = {name: [] for name in sources}
    try:
        for source in sources.values():
            compile_sources(source)
        for round_ in range(args.rounds):
            for name, source in sources.items():
                record = run_search(source, work=work, num_cpus=args.num_cpus)
                records[name].append(record)
                print(f"round {round_ + 1} {name}: {user_wall(record):.1f} s, {record['env_steps'] / 1000:.0f}k "
                      f"env steps, best config solved {record['best_solved']} re-evaluation seeds", flush=True)
    finally:
        if args.base:
            remove_checkout(work / "base")
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(records))
    print(table({name: [numbers(r, num_cpus=args.num_cpus) for r in rs] for name, rs in records.items()}))


if __name__ == "__main__":
    main()
