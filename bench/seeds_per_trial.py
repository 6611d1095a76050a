"""K seeds of one PPO config trained as one batched learner (issue 16) against one seed, on CartPole-v1.

Each run builds a `PPO` with `num_seeds` = K and trains the same env steps per seed
(`--iterations` x train_batch_size) on one torch thread; the clock covers the training iterations,
not the construction. K values run round-robin within each repetition, so a busy moment hits them
alike. Printed per K: the median wall and CPU time over the repetitions, their ratios to K = 1, and
the env steps per second of all seeds together. Target (issue 16): K = 8 within 2x the wall of K = 1.

    .venv/bin/python bench/seeds_per_trial.py                             # OUR_PPO, K = 1 4 8 16 32, 5 reps
    .venv/bin/python bench/seeds_per_trial.py --set minibatch_size=128 --ks 1 8
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from tune_runner.algos import PPO, PPOConfig

HERE = Path(__file__).resolve().parent
TARGET_K, TARGET_RATIO = 8, 2.0


def our_ppo() -> dict[str, Any]:
    """solve_cartpole.py's OUR_PPO (bench/ is no package: read it as a module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("solve_cartpole", HERE / "solve_cartpole.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.OUR_PPO)


def run(values: dict[str, Any], *, num_seeds: int, seed: int, iterations: int) -> dict[str, float]:
    """Wall and CPU seconds of `iterations` training iterations of a `num_seeds`-seed learner."""
    learner = PPO(PPOConfig.from_dict({**values, "num_seeds": num_seeds, "seed": seed}), env_id="CartPole-v1")
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(iterations):
        result = learner.train_iteration()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    learner.close()
    steps = int(learner.seed_env_steps.sum())
    return {"wall": wall, "cpu": cpu, "env_steps": steps, "return": result["episode_return_mean"]}


def table(runs: dict[int, list[dict[str, float]]]) -> list[str]:
    """One line per K: medians, ratios to K = 1, env steps per second (all seeds)."""
    base = {key: statistics.median(r[key] for r in runs[1]) for key in ("wall", "cpu")}
    lines = ["|  K | wall s (median) | x K=1 | CPU s (median) | x K=1 | env steps/s, all seeds | per seed |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for k, rs in runs.items():
        wall, cpu = statistics.median(r["wall"] for r in rs), statistics.median(r["cpu"] for r in rs)
        sps = statistics.median(r["env_steps"] / r["wall"] for r in rs)
        lines.append(f"| {k:2d} | {wall:.3f} | {wall / base['wall']:.2f} | {cpu:.3f} | {cpu / base['cpu']:.2f} "
                     f"| {sps:,.0f} | {sps / k:,.0f} |")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8, 16, 32], help="seed counts (1 is added)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per K (default 5)")
    parser.add_argument("--iterations", type=int, default=4, help="training iterations per run (default 4)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="override one of OUR_PPO's settings, e.g. --set minibatch_size=128")
    args = parser.parse_args(argv)
    args.ks = sorted({1, *args.ks})
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    values = our_ppo()
    for item in args.set:
        key, _, text = item.partition("=")
        values[key] = json.loads(text)
    env_steps = args.iterations * values["train_batch_size"]
    print(f"config: {json.dumps(values)}; {args.iterations} iterations, about {env_steps} env steps per seed; "
          f"{args.reps} repetitions; torch threads: {torch.get_num_threads()}")
    runs: dict[int, list[dict[str, float]]] = {k: [] for k in args.ks}
    for rep in range(args.reps):
        for k in args.ks:
            runs[k].append(run(values, num_seeds=k, seed=100 + rep, iterations=args.iterations))
        print(f"repetition {rep + 1}/{args.reps}: " + ", ".join(f"K={k} {runs[k][-1]['wall']:.2f}s" for k in args.ks),
              flush=True)
    print("\n".join(table(runs)))
    if TARGET_K in runs:
        ratio = statistics.median(r["wall"] for r in runs[TARGET_K]) / statistics.median(r["wall"] for r in runs[1])
        verdict = "met" if ratio <= TARGET_RATIO else "NOT MET"
        print(f"K={TARGET_K} / K=1 wall = {ratio:.2f}: target <= {TARGET_RATIO:g} {verdict}")


if __name__ == "__main__":
    main()
