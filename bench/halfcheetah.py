"""HalfCheetah (MuJoCo): env steps/s and the return after 1M env steps, our PPO against Stable-Baselines3's PPO with
rl-baselines3-zoo's tuned HalfCheetah-v4 entry, over 3 seeds (issue 18).

Both train the zoo's configuration on HalfCheetah-v5 (gymnasium 1.x has no v4 without mujoco-py): one env, 512
steps per rollout, 20 epochs of minibatches of 64, gamma 0.98, lambda 0.92, lr 2.06e-5, clip 0.1, 256x256 ReLU
networks for the policy and the value, log std starting at -2, and observations and rewards normalized by running
statistics (SB3's VecNormalize; ours: observation_filter MeanStdFilter and normalize_rewards). The return is the
mean of the last 100 training episodes (1000 env steps each), as the environment gives it (unnormalized). Each run
is a subprocess on one thread (bench/solve_cartpole.py's run_child); seeds run one after another, alternating the
contenders, so a noisy moment on the machine falls on both.

    .venv-mujoco/bin/python bench/halfcheetah.py [--seeds 3] [--first-seed 1000] [--max-env-steps 1000000]

Both sides need the `mujoco` wheel (`pip install "gymnasium[mujoco]"`); neither tune-rl's venv nor the SB3 venv
has it by default, since it is an extra. What ours cannot mirror: SB3's `ortho_init=False` (PyTorch's default
init); ours initializes its layers orthogonally, as its learners always do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import solve_cartpole as solve  # noqa: E402  (stdlib only at import: the SB3 venv's child imports it too)

ENV_ID, NEVER = "HalfCheetah-v5", float("inf")  # no target: both train to the env-step cap
ZOO_PPO = {"normalize": True, "n_envs": 1, "policy": "MlpPolicy", "n_timesteps": 1e6, "batch_size": 64,
           "n_steps": 512, "gamma": 0.98, "learning_rate": 2.0633e-05, "ent_coef": 0.000401762, "clip_range": 0.1,
           "n_epochs": 20, "gae_lambda": 0.92, "max_grad_norm": 0.8, "vf_coef": 0.58096,
           "policy_kwargs": "dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, "
                            "net_arch=dict(pi=[256, 256], vf=[256, 256]))"}
"""rl-baselines3-zoo's HalfCheetah-v4 PPO entry (hyperparams/ppo.yml of rl_zoo3 2.x), used as it is."""
OUR_PPO = {"num_envs_per_env_runner": 1, "train_batch_size": 512, "minibatch_size": 64, "num_epochs": 20,
           "gamma": 0.98, "lambda_": 0.92, "lr": 2.0633e-05, "entropy_coeff": 0.000401762, "clip_param": 0.1,
           "grad_clip": 0.8, "vf_loss_coeff": 0.58096, "vf_clip_param": None, "log_std_init": -2.0,
           "fcnet_hiddens": [256, 256], "fcnet_activation": "relu", "observation_filter": "MeanStdFilter",
           "normalize_rewards": True}
"""The same entry in our PPO's settings (RLlib's names)."""
CONTENDERS = ("ours/PPO", "sb3/PPO")


def run_ours(seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    return solve.run_own_ppo(OUR_PPO, env_id=ENV_ID, seed=seed, clock_args=clock_args, target=NEVER)


def run_sb3(seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    """The zoo's entry as rl_zoo3's ExperimentManager applies it: VecNormalize (gamma = the entry's) around the
    Monitor-wrapped env, policy_kwargs evaluated with torch.nn in scope."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    hyper = dict(ZOO_PPO)
    kwargs = {k: v for k, v in hyper.items() if k not in ("n_envs", "n_timesteps", "policy", "normalize")}
    kwargs["policy_kwargs"] = eval(hyper["policy_kwargs"], {"nn": torch.nn})  # noqa: S307 - our own constant
    window = solve.EpisodeWindow(NEVER)
    clock = solve.Clock(**clock_args)

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # Monitor's raw return, before VecNormalize
                    window.add(info["episode"]["r"])
            return not clock.capped(self.num_timesteps)

    env = VecNormalize(make_vec_env(ENV_ID, n_envs=int(hyper["n_envs"]), seed=seed), gamma=float(hyper["gamma"]))
    model = PPO(hyper["policy"], env, seed=seed, device="cpu", verbose=0, **kwargs)
    clock.mark_built()
    budget = int(float(hyper["n_timesteps"]))
    model.learn(total_timesteps=min(budget, clock.max_env_steps), callback=Episodes())
    return clock.result(solved=False, env_steps=model.num_timesteps, episodes=window.episodes,
                        return_mean=window.mean(), cap=clock.capped(model.num_timesteps) or f"zoo budget {budget}",
                        config=hyper)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return solve.seed_args(__doc__.split("\n\n")[0], argv, contenders=CONTENDERS, seeds=3, max_wall=7200.0,
                           max_env_steps=1_000_000)


def report(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    seeds = f"{args.first_seed}-{args.first_seed + args.seeds - 1}"
    print(f"\n{ENV_ID}, {args.max_env_steps:,} env steps per run, one thread, seeds {seeds} (medians; every run):\n")
    print("| contender | runs | env steps/s | wall s | return (last 100 episodes) | per seed | peak RSS MB |")
    print("|:--|--:|--:|--:|--:|:--|--:|")
    sps = {}
    for name, rs in runs.items():
        done = [r for r in rs if "error" not in r]
        if not done:
            print(f"| {name} | 0/{len(rs)} | - | - | - | {rs[0].get('error', '')[:60] if rs else ''} | - |")
            continue
        sps[name] = statistics.median(r["env_steps"] / (r["wall_s"] - r["build_s"]) for r in done)
        wall = statistics.median(r["wall_s"] for r in done)
        ret = statistics.median(r["return_mean"] for r in done)
        each = ", ".join(f"{r['return_mean']:.0f}" for r in done)
        rss = max(r["peak_rss_mb"] for r in done)
        print(f"| {name} | {len(done)}/{len(rs)} | {sps[name]:,.0f} | {wall:.0f} | {ret:.0f} | {each} | {rss:.0f} |")
    if len(sps) == 2:
        print(f"\nenv steps/s, ours / SB3: {sps['ours/PPO'] / sps['sb3/PPO']:.2f}")


def main() -> int:
    return solve.ours_against_sb3(parse_args(), run_ours=run_ours, run_sb3=run_sb3, report=report,
                                  declared={"ours/PPO": OUR_PPO, "sb3/PPO": ZOO_PPO}, script=Path(__file__).resolve())


if __name__ == "__main__":
    sys.exit(main())
