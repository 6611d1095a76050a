"""Population trials against one config per trial (issue 43): one space, budget per config and number of configs,
searched three ways in one run, then each way's exported config trained on held-out seeds.

    flock /tmp/ray-e2e.lock .venv/bin/python bench/population_search.py     # ppo_small, 32 configs, 3 rounds
    flock /tmp/ray-e2e.lock .venv/bin/python bench/population_search.py --space dqn_small --configs 16 --size 8

The ways, each a fresh `tune-rl search` process (fresh TUNE_RL_HOME: a new MLflow store) on a local Ray of
--num-cpus CPUs, with the space as shipped but for `num_samples` (= --configs) and these keys:
- (a) `one per trial`: configs_per_trial 1, as shipped (its scheduler judges trials);
- (b) `B per trial`: configs_per_trial B, refill false: a stopped member's slot idles until its trial ends;
- (c) `B, refill`: configs_per_trial B, refill true: a stopped member's slot takes the next config at once.
Rounds alternate the ways (a, b, c, a, b, c, ...), so a noisy moment of the machine falls on all three.

Printed per way, the median over the rounds:
- `wall to a verified config`: process start to exit: the search, the re-evaluation of the top configs on fresh
  seeds (the verdict), the export;
- `configs/min (search)`: configs started over the search's Tuner.fit minutes (bench/search_probe.py's clock), the
  rate the issue's target compares; `configs/min (wall)` over the whole process;
- `env steps (M)`: what the search's trials trained, every seed (a population trial's `batch_env_steps`: its idle
  and refilled-away slots too);
- `held-out solved`: the exported config (best.yaml) trained again, in this process, on --held-out seeds that no
  search or re-evaluation used (one batched learner of those seeds, to the space's budget per seed); a seed
  solves when its `metric` reaches the space's stop_at. The verdict's own count is printed as `verdict solved`.
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
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_e2e import PROBE, compile_sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT_SEED = 4242  # the held-out seeds' base: 4242, 1004242, ... (searches use 0.., re-evaluations 1000..)


def ways(size: int) -> dict[str, dict[str, Any]]:
    return {"one per trial": {"configs_per_trial": 1},
            f"{size} per trial": {"configs_per_trial": size, "refill": False},
            f"{size}, refill": {"configs_per_trial": size, "refill": True}}


def space_file(space: str, folder: Path, *, configs: int, top: dict[str, Any]) -> Path:
    """The shipped space with num_samples and the way's keys, as a file of the same name in `folder`."""
    from tune_runner.spec.experiment import resolve_space

    raw = yaml.safe_load(resolve_space(space).read_text())
    raw.update(num_samples=configs, **top)
    if top.get("configs_per_trial", 1) == 1:
        raw.pop("configs_per_trial", None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{space}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_search(path: Path, *, work: Path, num_cpus: int) -> dict[str, Any]:
    """One `tune-rl search --space path`: the probe's record, the wall, what it trained and exported."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    out = home / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNE_RL_HOME": str(home)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(PROBE), str(out), "search", "--space", str(path), "--num-cpus",
                           str(num_cpus)], env=env, cwd=work, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit(f"search of {path} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    record = json.loads(out.read_text())
    fit = next(p["seconds"] for p in record["phases"] if p["name"] == "_fit")
    experiment = next((home / "results").iterdir())
    bundle = yaml.safe_load((experiment / "best.yaml").read_text())
    configs, steps = searched(experiment)
    ranking = (bundle.get("evaluation") or {}).get("ranking") or [{}]
    return {"wall": wall - record.get("probe_s", 0.0), "fit": fit, "configs": configs, "env_steps": steps,
            "bundle": bundle, "verdict_solved": ranking[0].get("solved"), "home": str(home)}


def searched(experiment: Path) -> tuple[int, int]:
    """(configs started, env steps trained) by the search's trials (not the re-evaluation's)."""
    configs = steps = 0
    for result in experiment.glob("*/result.json"):
        rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if not rows:
            continue
        ids = {v for row in rows for k, v in row.items() if k.startswith("member_") and k.endswith("/id")}
        configs += len(ids) or 1
        last = rows[-1]
        steps += int(last.get("batch_env_steps") or last.get("env_steps") or 0)
    return configs, steps


def held_out(bundle: dict[str, Any], *, seeds: int, metric: str, stop_at: float, budget: int) -> int:
    """How many of `seeds` held-out seeds the bundle's config solves, trained as one learner in this process."""
    import torch

    from tune_runner.spec import reserved
    from tune_runner.trainables.agents import build_learner

    torch.set_num_threads(1)
    config = {**bundle["config"], "env": bundle["env"], "env_config": bundle.get("env_config") or {},
              "seed": HELD_OUT_SEED, reserved.SEEDS_KEY: seeds}
    learner = build_learner(bundle["trainable"], config)
    solved: set[int] = set()
    try:
        while learner.env_steps < budget and len(solved) < seeds:
            result = learner.train_iteration()
            solved |= {i for i in range(seeds) if (result.get(f"seed_{i}/{metric}") or float("-inf")) >= stop_at}
    finally:
        close = getattr(learner, "close", None)
        if callable(close):
            close()
    return len(solved)


def table(rows: dict[str, list[dict[str, float]]]) -> str:
    names = list(rows)
    first = names[0]
    lines = [f"| {'median of ' + str(len(rows[first])) + ' rounds':30} | " + " | ".join(f"{n:>15}" for n in names)
             + " | " + " | ".join(f"{n + ' / ' + first:>22}" for n in names[1:]) + " |",
             "|:--" + "|--:" * (2 * len(names) - 1) + "|"]
    for key in rows[first][0]:
        values = [statistics.median(r[key] for r in rows[n]) for n in names]
        ratios = [f"{v / values[0]:22.2f}" if values[0] else f"{'-':>22}" for v in values[1:]]
        lines.append(f"| {key:30} | " + " | ".join(f"{v:15.2f}" for v in values) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="ppo_small")
    parser.add_argument("--configs", type=int, default=32, help="num_samples: configs per search")
    parser.add_argument("--size", type=int, default=8, help="B: configs per population trial")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--held-out", type=int, default=5, help="seeds the exported config is trained on again")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--json", help="write every run's figures here")
    args = parser.parse_args()
    from tune_runner.spec.experiment import load_spec

    spec = load_spec(args.space)
    work = Path(tempfile.mkdtemp(prefix="population-search-"))
    compile_sources(ROOT)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in ways(args.size)}
    try:
        for round_ in range(args.rounds):
            for name, top in ways(args.size).items():
                path = space_file(args.space, work / f"{round_}-{len(rows[name])}-{name.replace(' ', '_')}",
                                  configs=args.configs, top=top)
                run = run_search(path, work=work, num_cpus=args.num_cpus)
                solved = held_out(run["bundle"], seeds=args.held_out, metric=spec.metric,
                                  stop_at=spec.stop_at, budget=spec.budget_env_steps)
                row = {"wall to a verified config (s)": run["wall"], "search fit (s)": run["fit"],
                       "configs": run["configs"], "configs/min (search)": 60 * run["configs"] / run["fit"],
                       "configs/min (wall)": 60 * run["configs"] / run["wall"],
                       "env steps (M)": run["env_steps"] / 1e6,
                       "verdict solved": float(run["verdict_solved"] or 0),
                       f"held-out solved (of {args.held_out})": float(solved)}
                rows[name].append(row)
                shutil.rmtree(run["home"], ignore_errors=True)
                print(f"round {round_ + 1} {name}: {run['wall']:.1f} s, {run['configs']} configs in "
                      f"{run['fit']:.1f} s of search, {run['env_steps'] / 1e6:.2f} M env steps, verdict solved "
                      f"{run['verdict_solved']}, held-out {solved}/{args.held_out}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows))
    print(f"{args.space}, {args.configs} configs, B = {args.size}, {args.num_cpus} CPUs")
    print(table(rows))


if __name__ == "__main__":
    main()
