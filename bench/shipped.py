"""`make shipped`: run shipped spaces exactly as shipped, one after another, and record each in bench/SHIPPED.md.

    .venv/bin/python bench/shipped.py                      # every shipped space (make shipped)
    .venv/bin/python bench/shipped.py --space dqn_acrobot  # one (make shipped SPACE=dqn_acrobot)

Each space runs as `tune-rl search --space NAME` in its own process with a fresh TUNE_RL_HOME (a new MLflow
store and results folder, as a first search has), on a local Ray of this machine's CPUs. Its row says: the
space and its tier, the commit it ran at (the working tree must be clean, so the row names code that exists in
the history), the date, the cores, the wall time, how every trial ended, the verdict on fresh seeds (seeds
solved, IQM), our return at the reference's env steps where the space's budget reaches them (the IQM over the
winner's re-evaluation seeds of their last report at or before those steps), and the reference itself
(rl-baselines3-zoo's benchmark table, from the space file's `reference:`). A space's new row replaces its old
one. tests/test_tier.py fails when a slow space has no row, or only one older than the last change to its file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "bench" / "SHIPPED.md"
HEADER = ("| space | tier | commit | date | cores | wall | trials | verdict (fresh seeds) | ours at the reference's "
          "env steps | reference |")
RULE = "|---|---|---|---|---|---|---|---|---|---|"
INTRO = """# Shipped spaces, as shipped

Rows written by `make shipped` (bench/shipped.py): each shipped space run exactly as shipped, in its own
process with a fresh store, on this machine's cores. A slow space (`tier: slow`) runs in CI only at its smoke
budget; its row here is its as-shipped run, at a commit of the history no older than its space file's last
change (tests/test_tier.py). `ours at the reference's env steps`: the IQM over the winner's re-evaluation seeds
of their last report at or before the reference's env steps (`stopped first` when the seeds had all reached
stop_at and stopped before them).

"""


def clean_commit() -> str:
    """HEAD, when no tracked file differs from it (a row must name code in the history)."""
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        sys.exit(f"bench/shipped.py: the working tree differs from HEAD ({dirty.splitlines()[0].strip()} ...); "
                 f"commit first, so the row names a commit of the history")
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def run_space(name: str, home: Path) -> tuple[float, str, int]:
    """`tune-rl search --space NAME` as shipped: its wall time, its output, its exit status."""
    env = {**os.environ, "TUNE_RL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tune_runner", "search", "--space", name, "--name", name],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:  # long work shows progress
        lines.append(line)
        if line.startswith(("re-evaluating", "trials ", "robust ", "best ")) or " done " in line:
            print(f"  {name}: {line.rstrip()[:150]}", flush=True)
    proc.wait()
    return time.monotonic() - started, "".join(lines), proc.returncode


def trials_said(output: str) -> str:
    """How every trial ended, from the summary's `trials` line: `8: 2 solved, 6 stopped early`."""
    found = re.search(r"^trials\s+(.*?)(?: in \d+m\d+s)?$", output, flags=re.MULTILINE)
    return found.group(1).strip() if found else "no summary (see the run's output)"


def verdict_said(exp: Path) -> str:
    """Seeds solved and IQM on fresh seeds, from the exported bundle's evaluation."""
    bundle = exp / "best.yaml"
    if not bundle.is_file():
        return "no bundle"
    evaluation = (yaml.safe_load(bundle.read_text()) or {}).get("evaluation") or {}
    if "iqm" not in evaluation:
        return "no re-evaluation"
    solved = evaluation.get("solved")
    share = f"{sum(solved)}/{len(solved)} solved, " if isinstance(solved, list) else ""
    return f"{share}IQM {evaluation['iqm']:.1f} over {len(evaluation.get('returns') or [])} seeds"


def ours_at(exp: Path, metric: str, env_steps: int, budget: int) -> str:
    """The IQM over the winner's re-evaluation seeds of their last report at or before `env_steps`."""
    from tune_runner.results.robust import iqm
    from tune_runner.spec.seed_keys import seed_key
    from tune_runner.tuning.reevaluate import trained

    if budget < env_steps:
        return f"budget {budget:,} < {env_steps:,}"
    verdict = exp / "reevaluation.json"
    if not verdict.is_file():
        return "no re-evaluation"
    winner, ids = json.loads(verdict.read_text())["ranking"][0], _candidates(exp)
    values, stopped = [], False
    for path in sorted({p for p in winner.get("trial_paths") or [] if p}):
        trial = Path(path)
        config = json.loads((trial / "params.json").read_text())
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]
        for candidate, indices, _ in trained(config):
            if candidate >= len(ids) or ids[candidate] != winner["trial_id"]:
                continue
            keys = [seed_key(i, metric) for i in indices] if len(indices) > 1 or isinstance(
                config.get("tune_rl_candidate"), list) else [metric]
            early = [row for row in rows if int(row.get("env_steps", 0)) <= env_steps]
            stopped |= int(rows[-1].get("env_steps", 0)) < env_steps
            for key in keys:
                seen = [row[key] for row in early if isinstance(row.get(key), (int, float))]
                if seen and math.isfinite(seen[-1]):
                    values.append(float(seen[-1]))
    if stopped and not values:
        return "stopped first"
    return f"{iqm(values):.1f}" + (" (some stopped first)" if stopped else "") if values else "no report"


def _candidates(exp: Path) -> list[str]:
    """The re-evaluation's candidates in its own order (#1, #2, ... as it printed them)."""
    folder = exp / "reevaluation"
    ids: dict[int, str] = {}
    verdict = json.loads((exp / "reevaluation.json").read_text())
    trial_ids = {p: row["trial_id"] for row in verdict["ranking"] for p in row.get("trial_paths") or []}
    for params in folder.glob("*/params.json"):
        config = json.loads(params.read_text())
        unit = config.get("tune_rl_candidate")
        owner = trial_ids.get(str(params.parent))
        if isinstance(unit, int) and owner is not None:
            ids[unit] = owner
        elif isinstance(unit, list):
            for index, member in zip(unit, config["tune_rl_members"]["members"], strict=True):
                ids[index] = member["id"]
    return [ids.get(i, "") for i in range(max(ids, default=-1) + 1)]


def reference_said(reference: dict | None) -> str:
    if not reference:
        return "none"
    return (f"{reference['algo']} {reference['env']}: {reference['mean_reward']:g} at {reference['env_steps']:,} "
            f"env steps ({reference['source']})")


def row(name: str, *, commit: str) -> str:
    """Run space `name` as shipped and say it as one table row."""
    from tune_runner.spec.experiment import load_spec

    spec = load_spec(name)
    with tempfile.TemporaryDirectory(prefix=f"shipped-{name}-") as tmp:
        home = Path(tmp)
        wall, output, status = run_space(name, home)
        exp = home / "results" / name
        trials = trials_said(output) if status == 0 else f"exit {status}: {output.strip().splitlines()[-1][:100]}"
        reference = spec.tier.reference
        ours = ours_at(exp, spec.metric, reference["env_steps"], spec.budget_env_steps) if reference else "-"
        cells = [name, spec.tier.name, commit, datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                 str(len(os.sched_getaffinity(0))), f"{wall / 60:.1f} min", trials, verdict_said(exp), ours,
                 reference_said(reference)]
    return "| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |"


def read_rows(text: str) -> dict[str, str]:
    """The table's rows by space (the first cell)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| space ", "|---")):
            rows[line.split("|")[1].strip()] = line
    return rows


def write_rows(rows: dict[str, str]) -> None:
    TABLE.write_text(INTRO + "\n".join([HEADER, RULE, *(rows[k] for k in sorted(rows))]) + "\n")


def main() -> None:
    from tune_runner.spec.experiment import shipped_spaces

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", action="append", help="a shipped space (repeatable; default: every one)")
    args = parser.parse_args()
    names = args.space or sorted(shipped_spaces())
    commit = clean_commit()
    for name in names:
        print(f"{name}: as shipped, at {commit}", flush=True)
        line = row(name, commit=commit)
        rows = read_rows(TABLE.read_text()) if TABLE.is_file() else {}
        rows[name] = line
        write_rows(rows)
        print(line, flush=True)


if __name__ == "__main__":
    main()
