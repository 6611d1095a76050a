"""Env steps/s of our PPO's sampling with its envs in worker processes (`processes`, issue 18), where it is
installed and has the env in EnvPool's C++ threads (`envpool`), and where the env has one as a torch env on the CPU
(`env_backend: torch`, issue 44), against the same envs stepped in the learner's process (`sync`), in the same run.

    .venv/bin/python bench/vector_envs.py [--repeats 5] [--steps 16384] [--workers 2] [--envs Acrobot-v1 ...]

What a trial given `--workers` CPUs samples with (torch on one thread either way): each repetition builds a
fresh PPO learner per backend, collects once to warm up, then times `--steps` env steps of `collect` (the
policy's forward pass and the env steps; no learning, which the backend does not touch). Backends run
round-robin within a repetition, so a busy moment hits both alike. Printed: the median env steps/s of each and
their ratio, and what a trial with `--workers` CPUs picks by default (learner_envs.default_vectorize_mode: a throwaway
instance's step time against process_envs.processes_pay's cost model). `bench/Sim-200us` and `bench/Sim-1ms` are
stand-ins for a physics simulator's step (Box2D, MuJoCo): they busy-wait that long. LunarLander-v3 needs Box2D
(pip install "gymnasium[box2d]"), MinAtar the `minatar` extra; an env that cannot be built here is named and skipped.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MinAtar/Breakout-v1", "LunarLander-v3", "bench/Sim-200us",
        "bench/Sim-1ms")


class Simulator(gym.Env):
    """A stand-in for a physics step of `seconds` (busy-waiting): push right to the end in 10 steps."""

    observation_space = gym.spaces.Box(0.0, 1.0, (8,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return np.zeros(8, np.float32), {}

    def step(self, action):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        self.pos, self.t = self.pos + int(action), self.t + 1
        return np.full(8, self.pos / 10, np.float32), float(action), self.pos >= 10, self.t >= 50, {}


gym.register("bench/Sim-200us", entry_point=Simulator, kwargs={"seconds": 200e-6})
gym.register("bench/Sim-1ms", entry_point=Simulator, kwargs={"seconds": 1e-3})
CONFIG = {"num_envs_per_env_runner": 16, "train_batch_size": 2048, "minibatch_size": 256}


def measure(env_id: str, *, mode: str, workers: int, steps: int) -> float:
    from tune_runner.algos import PPO, PPOConfig

    envs = {"env_backend": "torch"} if mode == "torch" else {"gym_env_vectorize_mode": mode,
                                                              "num_env_processes": workers}
    learner = PPO(PPOConfig.from_dict({**CONFIG, **envs}), env_id=env_id)
    try:
        learner.collect(CONFIG["train_batch_size"])
        start, done = time.perf_counter(), 0
        while done < steps:
            done += int(learner.collect(CONFIG["train_batch_size"])["env_steps"])
        return done / (time.perf_counter() - start)
    finally:
        learner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=16384, help="env steps timed per run (default 16384)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, the trial's CPUs (default 2)")
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{CONFIG['num_envs_per_env_runner']} envs; processes mode with {args.workers} workers; medians of "
          f"{args.repeats} repetitions of {args.steps:,} env steps\n")
    from tune_runner.algos.envpool_envs import envpool_has
    from tune_runner.algos.learner_envs import default_vectorize_mode, env_backend_refusal

    print("| env | sync env steps/s | processes env steps/s | processes / sync | envpool env steps/s | envpool / sync "
          "| torch env steps/s | torch / sync | picked by default |")
    print("|:--|--:|--:|--:|--:|--:|--:|--:|:--|")
    for env_id in args.envs:
        runs: dict[str, list[float]] = {"sync": [], "processes": []}
        if envpool_has(env_id, {}):
            runs["envpool"] = []
        if env_backend_refusal(env_id, {}) is None:
            runs["torch"] = []
        try:
            for _ in range(args.repeats):
                for mode in runs:
                    runs[mode].append(measure(env_id, mode=mode, workers=args.workers, steps=args.steps))
        except Exception as exc:  # noqa: BLE001 - an env this machine cannot build: say so, go on
            why = str(exc).strip().splitlines()[0][:80]
            print(f"| {env_id} | skipped: {type(exc).__name__}: {why} | | | | | | | |")
            continue
        sps = {mode: statistics.median(values) for mode, values in runs.items()}
        envpool = (f"{sps['envpool']:,.0f} | {sps['envpool'] / sps['sync']:.2f}" if "envpool" in sps
                   else "not installed or no such env | ")
        torch_envs = f"{sps['torch']:,.0f} | {sps['torch'] / sps['sync']:.2f}" if "torch" in sps else "no torch env | "
        picked = default_vectorize_mode(env_id, processes=args.workers, num_envs=CONFIG["num_envs_per_env_runner"])
        print(f"| {env_id} | {sps['sync']:,.0f} | {sps['processes']:,.0f} | {sps['processes'] / sps['sync']:.2f} | "
              f"{envpool} | {torch_envs} | {picked} |")


if __name__ == "__main__":
    main()
