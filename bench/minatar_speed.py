"""Env steps/s of our PPO on MinAtar Breakout (10x10x4 image observations, the CNN) with one thread (issue 18),
against the same PPO on CartPole-v1 (MLP) in the same run, with where an iteration's time goes.

    .venv/bin/python bench/minatar_speed.py [--repeats 5] [--iterations 10] [--seeds 1 4]

Needs the `minatar` extra (pip install minatar). Each repetition builds a fresh learner and times
`--iterations` iterations after one warm-up; the table gives medians over the repetitions.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

# The shipped space's (search_spaces/ppo_minatar_breakout.yaml): its fixed settings and the geometric middle of
# its lr range (tests/test_bench.py holds them to the space).
CONFIG = {"lr": 3.9e-3, "num_envs_per_env_runner": 64, "train_batch_size": 4096, "minibatch_size": 512,
          "num_epochs": 4, "vf_clip_param": None, "gamma": 0.99}
ENVS = ("MinAtar/Breakout-v1", "CartPole-v1")


def measure(env_id: str, seeds: int, iterations: int) -> dict[str, float]:
    from tune_runner.algos import PPO, PPOConfig

    learner = PPO(PPOConfig.from_dict({**CONFIG, "num_seeds": seeds}), env_id=env_id)
    learner.train_iteration()
    collect = learn = 0.0
    steps = 0
    for _ in range(iterations):
        t0 = time.perf_counter()
        batch = learner.collect(CONFIG["train_batch_size"])
        t1 = time.perf_counter()
        learner.learn(batch)
        t2 = time.perf_counter()
        collect, learn, steps = collect + t1 - t0, learn + t2 - t1, steps + int(batch["env_steps"])
    learner.close()
    return {"sps": steps / (collect + learn), "collect": collect / iterations, "learn": learn / iterations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4], help="num_seeds values (default 1 4)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"config: {CONFIG}; one thread; medians of {args.repeats} repetitions of {args.iterations} iterations\n")
    print("| env | seeds | env steps/s (all seeds) | collect s / iteration | learn s / iteration | vs CartPole |")
    print("|:--|--:|--:|--:|--:|--:|")
    for seeds in args.seeds:
        rows = {}
        for env_id in ENVS:
            runs = [measure(env_id, seeds, args.iterations) for _ in range(args.repeats)]
            rows[env_id] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for env_id, row in rows.items():
            ratio = row["sps"] / rows["CartPole-v1"]["sps"]
            print(f"| {env_id} | {seeds} | {row['sps']:,.0f} | {row['collect']:.3f} | {row['learn']:.3f} | "
                  f"{ratio:.2f} |")


if __name__ == "__main__":
    main()
