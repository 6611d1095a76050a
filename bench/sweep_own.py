"""Solve rate of one of our PPO/DQN configs on CartPole-v1 over many seeds, in one process.

For tuning the benchmark's configs off its own seeds: the default seeds are 100-119, and
`solve_cartpole.py` measures 0-9. A run is solved as there: the mean return of the last 100
training episodes reaches the target (475). An unsolved seed counts as infinitely slow in the
medians.

    .venv/bin/python bench/sweep_own.py PPO                          # solve_cartpole.py's OUR_PPO
    .venv/bin/python bench/sweep_own.py PPO --set 'lr=[[0, 5e-3], [300000, 5e-4]]' --seeds 100-139
    .venv/bin/python bench/sweep_own.py --space dqn_small --samples 4   # configs drawn from a space
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads, as for the benchmark's children

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


def benchmark() -> Any:
    """bench/solve_cartpole.py as a module (bench/ is no package): its configs and its solved rule."""
    spec = importlib.util.spec_from_file_location("solve_cartpole", HERE / "solve_cartpole.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = benchmark()


def seed_range(text: str) -> list[int]:
    """`100-119` or `3,7,100-104` as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def setting_value(text: str) -> Any:
    """JSON first (YAML reads `5e-3` as a string), then YAML for `null`-free shorthands like `[a, b]`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return yaml.safe_load(text)


def space_configs(ref: str, *, samples: int, sample_seed: int) -> tuple[str, list[dict[str, Any]], int, float]:
    """(algo, `samples` learner configs drawn from a space for our backend, its budget, its stop_at)."""
    import numpy as np

    from tune_runner.spec.experiment import load_spec
    from tune_runner.trainables.trial import learner_settings

    spec = load_spec(ref)
    if spec.trainable not in ("ppo", "dqn"):
        sys.exit(f"--space {ref}: trainable is {spec.trainable!r}; this script runs our ppo and dqn only")
    rng = np.random.RandomState(sample_seed)
    configs = []
    for _ in range(samples):
        drawn = {p.name: p.to_tune().sample(random_state=rng) for p in spec.space}
        configs.append(learner_settings({**spec.fixed, **drawn}))
    return spec.trainable.upper(), configs, spec.budget_env_steps, spec.stop_at or BENCH.TARGET


def run_one(algo: str, config: dict[str, Any], *, seed: int, max_env_steps: int, max_wall: float,
            target: float) -> dict[str, Any]:
    """One seed from construction to solved or capped (solve_cartpole.py's clock and rule)."""
    from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig

    values = {**config, "metrics_num_episodes_for_smoothing": BENCH.WINDOW, "seed": seed}
    start, cpu_start = time.perf_counter(), time.process_time()
    learner = PPO(PPOConfig.from_dict(values), env_id=BENCH.ENV_ID) if algo == "PPO" else \
        DQN(DQNConfig.from_dict(values), env_id=BENCH.ENV_ID)
    while True:
        m = learner.train_iteration()
        solved = m["episodes"] >= BENCH.WINDOW and m["episode_return_mean"] >= target
        wall = time.perf_counter() - start
        if solved or learner.env_steps >= max_env_steps or wall >= max_wall:
            learner.close()
            return {"seed": seed, "solved": solved, "env_steps": learner.env_steps, "wall_s": wall,
                    "cpu_s": time.process_time() - cpu_start, "return_mean": m["episode_return_mean"]}


def sweep(algo: str, config: dict[str, Any], seeds: list[int], **caps: Any) -> dict[str, Any]:
    """Every seed of one config, a line each as it ends; then the summary line."""
    print(f"{algo} {json.dumps(config)}", flush=True)
    runs = []
    for seed in seeds:
        r = run_one(algo, config, seed=seed, **caps)
        runs.append(r)
        state = "solved" if r["solved"] else "NOT solved"
        print(f"  seed {seed:>4}: {state} at {r['env_steps']:>7,} env steps, {r['wall_s']:5.1f} s "
              f"({r['cpu_s']:.1f} s CPU), last-{BENCH.WINDOW} mean {r['return_mean']:.1f}", flush=True)
    s = summarize(runs)
    print(f"  => solved {s['solved']}/{len(runs)}, median {s['median_steps']} env steps and {s['median_wall']} s "
          f"({s['median_cpu']} s CPU) to solved; slowest solved {s['max_steps']} env steps; "
          f"unsolved seeds {s['unsolved'] or 'none'}\n", flush=True)
    return {"algo": algo, "config": config, "runs": runs, **s}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Solved count and medians with an unsolved seed as infinitely slow (printed as `inf`)."""
    def median(key: str) -> str:
        value = statistics.median([r[key] if r["solved"] else math.inf for r in runs])
        return "inf" if math.isinf(value) else f"{value:,.0f}" if key == "env_steps" else f"{value:.1f}"

    solved = [r for r in runs if r["solved"]]
    return {"solved": len(solved), "median_steps": median("env_steps"), "median_wall": median("wall_s"),
            "median_cpu": median("cpu_s"),
            "max_steps": f"{max((r['env_steps'] for r in solved), default=0):,}",
            "unsolved": [r["seed"] for r in runs if not r["solved"]]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algo", nargs="?", choices=("PPO", "DQN"),
                        help="start from solve_cartpole.py's OUR_PPO or OUR_DQN")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting of the config (VALUE is JSON, else YAML); repeatable")
    parser.add_argument("--space", help="instead: draw configs from this space (name or path), its ppo/dqn backend")
    parser.add_argument("--samples", type=int, default=4, help="configs to draw with --space (default 4)")
    parser.add_argument("--sample-seed", type=int, default=0, help="seed of the --space draws (default 0)")
    parser.add_argument("--seeds", type=seed_range, default=seed_range("100-119"),
                        help="learner seeds, e.g. 100-119 or 3,100-104 (default 100-119; the benchmark's are 0-9)")
    parser.add_argument("--max-env-steps", type=int, help="cap per seed (default 500000, or the space's budget)")
    parser.add_argument("--max-wall", type=float, default=120.0, help="wall cap per seed in seconds (default 120)")
    parser.add_argument("--json", type=Path, help="also write every run's result to this file")
    args = parser.parse_args(argv)
    if (args.algo is None) == (args.space is None):
        parser.error("give either an algo (PPO or DQN) or --space, not both")
    if args.space and args.set:
        parser.error("--set applies to an algo's config; with --space, the space's own values are used")
    return args


def main() -> int:
    args = parse_args()
    import torch

    torch.set_num_threads(1)
    if args.space:
        algo, configs, budget, target = space_configs(args.space, samples=args.samples, sample_seed=args.sample_seed)
    else:
        base = dict(BENCH.OUR_PPO if args.algo == "PPO" else BENCH.OUR_DQN)
        for item in args.set:
            key, _, text = item.partition("=")
            base[key] = setting_value(text)
        algo, configs, budget, target = args.algo, [base], 500_000, BENCH.TARGET
    caps = {"max_env_steps": args.max_env_steps or budget, "max_wall": args.max_wall, "target": target}
    print(f"seeds {args.seeds[0]}..{args.seeds[-1]} ({len(args.seeds)}), caps {caps}\n")
    results = [sweep(algo, config, args.seeds, **caps) for config in configs]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
