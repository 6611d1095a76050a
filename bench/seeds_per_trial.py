"""K seeds of one PPO or DQN config trained as one batched learner (issue 16) against one seed, on CartPole-v1.

Each run builds a `PPO` (or with `--algo dqn` a `DQN`) with `num_seeds` = K and trains the same env
steps per seed (`--iterations` x train_batch_size for PPO, `--iterations` x at least 1,000 for DQN) on
one torch thread; the clock covers the training iterations, not the construction. K values run
round-robin within each repetition, so a busy moment hits them alike. Printed per K: the median wall
and CPU time over the repetitions, their ratios to K = 1, and the env steps per second of all seeds
together. Targets (issue 16): K = 8 within 2x the wall of K = 1 for PPO, 3x for DQN. The configs are
solve_cartpole.py's OUR_PPO and OUR_DQN.

    .venv/bin/python bench/seeds_per_trial.py                             # OUR_PPO, K = 1 4 8 16 32, 5 reps
    .venv/bin/python bench/seeds_per_trial.py --set minibatch_size=128 --ks 1 8
    .venv/bin/python bench/seeds_per_trial.py --algo dqn                  # OUR_DQN
    python3 bench/seeds_per_trial.py --device cuda --ks 1 256             # on a GPU (issue 16)
    .venv/bin/python bench/seeds_per_trial.py --ks 1 8 --population       # K seeds of K configs, against one config
    .venv/bin/python bench/seeds_per_trial.py --ks 1 8 --env-backend gymnasium torch   # the envs' backends compared
    .venv/bin/python bench/seeds_per_trial.py --config ppo_small --ks 1 8 16 --population   # issue 43's trials

`--config ppo_small` trains search_spaces/ppo_small.yaml's trials instead (`PPO_SMALL`: its ppo settings, and the
middle of its space): the population search of issue 43 trains B of them as one learner of B seeds.

With `--population` each K > 1 also runs as a population (`PPOConfig.population` / `DQNConfig.population`): the
K seeds spread around the config's values (`spread`), timed in the same repetitions; printed is its wall against
the same K seeds of one config. With several `--env-backend`s (issue 44: gymnasium's envs on the host, or torch envs
on the learner's device) each K runs on each, in the same repetitions; printed is a table per backend and each
backend's wall against the first's.
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

from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig

HERE = Path(__file__).resolve().parent
TARGET_K = 8
ALGOS = {"ppo": (PPO, PPOConfig, "OUR_PPO", 2.0), "dqn": (DQN, DQNConfig, "OUR_DQN", 3.0)}
"""--algo: (learner, config class, its config in solve_cartpole.py, target ratio of K = 8 to K = 1)."""
PPO_SMALL = {"lr": 3.5e-3, "num_epochs": 5, "minibatch_size": 512, "gamma": 0.99, "lambda": 0.925,
             "num_envs_per_env_runner": 32, "train_batch_size": 1024, "vf_clip_param": None}
"""--config ppo_small: search_spaces/ppo_small.yaml's fixed ppo settings and the middle of its space (lr
loguniform 2e-3..6e-3, num_epochs 4..6, minibatch_size 512 or 1024, gamma 0.99 or 0.995, lambda_ 0.9..0.95);
fcnet_hiddens stays the default 64x64."""


def ours(algo: str) -> dict[str, Any]:
    """solve_cartpole.py's OUR_PPO or OUR_DQN (bench/ is no package: read it as a module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("solve_cartpole", HERE / "solve_cartpole.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(getattr(module, ALGOS[algo][2]))


def spread(values: dict[str, Any], *, algo: str, num_seeds: int) -> dict[str, list[float]]:
    """A population of `num_seeds` members around the config: lr from 0.5x to 2x its value (geometric; left shared
    where it is a schedule), gamma from 0.95 to 0.995, and for PPO lambda_ 0.9-0.98, clip_param 0.1-0.3 and
    entropy_coeff 0-0.01 (linear)."""
    import numpy as np

    def line(low: float, high: float) -> list[float]:
        return np.linspace(low, high, num_seeds).tolist()

    members: dict[str, list[float]] = {"gamma": line(0.95, 0.995)}
    if not isinstance(values.get("lr", 1e-3), (list, tuple)):
        members["lr"] = (float(values.get("lr", 1e-3)) * np.geomspace(0.5, 2.0, num_seeds)).tolist()
    if algo == "ppo":
        members.update(lambda_=line(0.9, 0.98), clip_param=line(0.1, 0.3), entropy_coeff=line(0.0, 0.01))
    return members


def run(values: dict[str, Any], *, algo: str, num_seeds: int, seed: int, iterations: int,
        device: str = "cpu", population: bool = False, env_backend: str = "auto") -> dict[str, float]:
    """Wall and CPU seconds of `iterations` training iterations of a `num_seeds`-seed learner on `device` (with
    `population`, its seeds spread around the config's values)."""
    learner_class, config_class = ALGOS[algo][:2]
    members = {"population": spread(values, algo=algo, num_seeds=num_seeds)} if population else {}
    config = config_class.from_dict({**values, "num_seeds": num_seeds, "seed": seed, "env_backend": env_backend,
                                     **members})
    learner = learner_class(config, env_id="CartPole-v1", device=device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(iterations):
        result = learner.train_iteration()
    if device == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    learner.close()
    steps = int(learner.seed_env_steps.sum())
    return {"wall": wall, "cpu": cpu, "env_steps": steps, "return": result["episode_return_mean"]}


def describe(device: str) -> str:
    """The device's name as torch reports it."""
    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name(0)}, torch {torch.__version__})"
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, torch {torch.__version__})"


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
    parser.add_argument("--algo", choices=sorted(ALGOS), default="ppo", help="our ppo (default) or dqn")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8, 16, 32], help="seed counts (1 is added)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per K (default 5)")
    parser.add_argument("--iterations", type=int, default=4, help="training iterations per run (default 4)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the networks run (and torch envs, --env-backend torch); cuda: one untimed "
                             "warm-up iteration per K first, for CUDA's start-up and kernel loading")
    parser.add_argument("--env-backend", nargs="+", default=["auto"], choices=["auto", "gymnasium", "torch"],
                        help="the learners' env_backend; several: each K on each, compared (default auto)")
    parser.add_argument("--population", action="store_true",
                        help="also run each K > 1 as a population of K configs (spread), against the same K seeds")
    parser.add_argument("--config", choices=["ours", "ppo_small"], default="ours",
                        help="ours (default): solve_cartpole.py's OUR_PPO / OUR_DQN; ppo_small: PPO_SMALL (ppo only)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="override one of the config's settings, e.g. --set minibatch_size=128")
    args = parser.parse_args(argv)
    if args.config == "ppo_small" and args.algo != "ppo":
        parser.error("--config ppo_small is a ppo config; drop --algo dqn")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA GPU (torch.cuda.is_available() is False); "
                     "use --device cpu")
    args.ks = sorted({1, *args.ks})
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    values, target = dict(PPO_SMALL) if args.config == "ppo_small" else ours(args.algo), ALGOS[args.algo][3]
    for item in args.set:
        key, _, text = item.partition("=")
        values[key] = json.loads(text)
    per_iteration = values["train_batch_size"] if args.algo == "ppo" else 1000  # DQN: at least 1000 (dqn.py)
    print(f"{args.algo} config: {json.dumps(values)}; {args.iterations} iterations, about "
          f"{args.iterations * per_iteration} env steps per seed; {args.reps} repetitions; "
          f"torch threads: {torch.get_num_threads()}; device: {describe(args.device)}")
    backends = list(dict.fromkeys(args.env_backend))
    if args.device == "cuda":
        for k in args.ks:
            for backend in backends:
                run(values, algo=args.algo, num_seeds=k, seed=99, iterations=1, device="cuda", env_backend=backend)
    by_backend: dict[str, dict[int, list[dict[str, float]]]] = {b: {k: [] for k in args.ks} for b in backends}
    runs = by_backend[backends[0]]
    populations: dict[int, list[dict[str, float]]] = {k: [] for k in args.ks if args.population and k > 1}
    for rep in range(args.reps):
        for k in args.ks:
            for backend in backends:
                by_backend[backend][k].append(run(values, algo=args.algo, num_seeds=k, seed=100 + rep,
                                                  iterations=args.iterations, device=args.device, env_backend=backend))
            if k in populations:
                populations[k].append(run(values, algo=args.algo, num_seeds=k, seed=100 + rep,
                                          iterations=args.iterations, device=args.device, population=True,
                                          env_backend=backends[0]))
        print(f"repetition {rep + 1}/{args.reps}: " + ", ".join(
            f"K={k} {b} {by_backend[b][k][-1]['wall']:.2f}s" for k in args.ks for b in backends), flush=True)
    for backend in backends:
        print(f"\nenv_backend {backend}:" if len(backends) > 1 else "")
        print("\n".join(table(by_backend[backend])))
    walls = {b: {k: statistics.median(r["wall"] for r in rs) for k, rs in by_backend[b].items()} for b in backends}
    for backend in backends[1:]:
        print(f"\n{backend} / {backends[0]} wall: " + ", ".join(
            f"K={k} {walls[backend][k] / walls[backends[0]][k]:.2f}" for k in args.ks))
    for k, rs in populations.items():
        wall, alike = statistics.median(r["wall"] for r in rs), statistics.median(r["wall"] for r in runs[k])
        base = statistics.median(r["wall"] for r in runs[1])
        print(f"K={k} as a population of {k} configs: {wall:.3f} s, {wall / alike:.2f}x the same seeds of one config, "
              f"{wall / base:.2f}x K=1")
    if TARGET_K in runs:
        ratio = statistics.median(r["wall"] for r in runs[TARGET_K]) / statistics.median(r["wall"] for r in runs[1])
        verdict = "met" if ratio <= target else "NOT MET"
        print(f"K={TARGET_K} / K=1 wall = {ratio:.2f}: target <= {target:g} {verdict}")


if __name__ == "__main__":
    main()
