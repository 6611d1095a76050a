"""Wall time to a solved Pendulum-v1: our PPO (Box actions) against Stable-Baselines3's PPO with rl-baselines3-zoo's
published Pendulum-v1 hyperparameters (issue 18).

Solved: the mean return of the last 100 training episodes a contender finished is >= -250. The clock, the
caps, the one-thread subprocesses and the peak RSS are bench/solve_cartpole.py's; every seed counts, an
unsolved seed is infinitely slow in the medians. Target: ours at most 1/5 of SB3's wall time, with at least
as many seeds solved.

    .venv/bin/python bench/solve_pendulum.py [--seeds 5] [--first-seed 1000] [--max-wall 600] [--max-env-steps 1000000]

Our config is search_spaces/ppo_pendulum.yaml's fixed values and the middle of its space (lr: the geometric
middle of [1.4e-3, 2.8e-3]), chosen by looking at seeds 0-5 only, then (2026-11-28: 32 envs and minibatches of 512
instead of 16 and 256, lr 2e-3) at seeds 100-109 and 200-209; the benchmark runs seeds 1000 and up. Both use
gSDE (`use_sde`, a new noise matrix every 4 steps); the zoo's budget (n_timesteps 1e5) is its own, and SB3
stops there.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import solve_cartpole as solve  # noqa: E402  (stdlib only at import: the SB3 venv's child imports it too)

ENV_ID, TARGET = "Pendulum-v1", -250.0
OUR_PPO = {"lr": 2e-3, "gamma": 0.9, "lambda_": 0.945, "num_epochs": 9, "minibatch_size": 512,
           "train_batch_size": 4096, "num_envs_per_env_runner": 32, "vf_clip_param": None, "log_std_init": -0.25,
           "use_sde": True, "sde_sample_freq": 4}
# rl-baselines3-zoo's Pendulum-v1 PPO entry, used when the installed rl_zoo3 ships no hyperparams/ppo.yml.
ZOO_PPO = {"n_envs": 4, "n_timesteps": 1e5, "policy": "MlpPolicy", "n_steps": 1024, "gae_lambda": 0.95,
           "gamma": 0.9, "n_epochs": 10, "ent_coef": 0.0, "learning_rate": 1e-3, "clip_range": 0.2,
           "use_sde": True, "sde_sample_freq": 4}
CONTENDERS = ("ours/PPO", "sb3/PPO")


def run_ours(seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    return solve.run_own_ppo(OUR_PPO, env_id=ENV_ID, seed=seed, clock_args=clock_args, target=TARGET)


def run_sb3(seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    hyper, source = solve.zoo_hyperparams(ENV_ID, ZOO_PPO)
    kwargs, budget = solve.sb3_kwargs(hyper), int(float(hyper["n_timesteps"]))
    model, window, clock = solve.train_sb3(kwargs, policy=hyper["policy"], n_envs=int(hyper["n_envs"]), seed=seed,
                                           clock_args=clock_args, budget=budget, env_id=ENV_ID, target=TARGET)
    cap = None if window.solved() else (clock.capped(model.num_timesteps) or f"zoo budget {budget}")
    return clock.result(solved=window.solved(), env_steps=model.num_timesteps, episodes=window.episodes,
                        return_mean=window.mean(), cap=cap, config={**hyper, "source": source})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return solve.seed_args(__doc__.split("\n\n")[0], argv, contenders=CONTENDERS, seeds=5, max_wall=600.0,
                           max_env_steps=1_000_000)


def report(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    stats = {name: solve.summary(rs) for name, rs in runs.items() if rs}
    seeds = f"{args.first_seed}-{args.first_seed + args.seeds - 1}"
    print(f"\n{ENV_ID} to solved (mean of the last {solve.WINDOW} training episodes >= {TARGET:g}), one thread, "
          f"seeds {seeds}, medians with an unsolved seed counted as infinitely slow:\n")
    print("| contender | solved | env steps/s | wall s to solved | env steps to solved | peak RSS MB |")
    print("|:--|--:|--:|--:|--:|--:|")
    for name, s in stats.items():
        wall = f"> {args.max_wall:g}" if math.isinf(s["wall"]) else f"{s['wall']:.1f}"
        steps = "-" if math.isinf(s["steps"]) else f"{s['steps']:,.0f}"
        print(f"| {name} | {s['solved']}/{s['runs']} | {s['sps']:,.0f} | {wall} | {steps} | {s['rss']:.0f} |")
    print()
    for name, s in stats.items():
        missed = f"; not solved: seed {', '.join(map(str, s['unsolved']))}" if s["unsolved"] else ""
        print(f"{name}: solved {s['solved']}/{s['runs']} seeds ({seeds}){missed}")
    if len(stats) == 2:
        print(solve.target_line("ours/PPO", "sb3/PPO", stats, target=0.2, cap=args.max_wall))
        enough = stats["ours/PPO"]["solved"] >= stats["sb3/PPO"]["solved"]
        print(f"seeds solved: ours {stats['ours/PPO']['solved']}, SB3 {stats['sb3/PPO']['solved']}; "
              f"at least as many: {'met' if enough else 'NOT MET'}")


def main() -> int:
    return solve.ours_against_sb3(parse_args(), run_ours=run_ours, run_sb3=run_sb3, report=report,
                                  declared={"ours/PPO": OUR_PPO}, script=Path(__file__).resolve())


if __name__ == "__main__":
    sys.exit(main())
