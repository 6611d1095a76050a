"""Issue 44's GPU figures in one run of at most about 4 minutes: our learners on torch envs (env_backend torch) on
a CUDA device, and the torch CartPole env alone.

    bash bench/gpu_envs.sh --pack      # here: gymnasium and the little it imports, into .gpu/envs (git-ignored)
    bash bench/gpu_envs.sh             # on the GPU machine (device tool: carry [".gpu/envs"], timeout 300)

Printed: (0) a check that every torch env steps on the device as on the CPU (the same flags and reset counts over
300 steps, observations to 1e-5: tests/test_torch_envs.py's GPU test, here without pytest); (1) the torch CartPole-v1
env alone at 65,536 envs, env steps/s (random actions drawn on the device);
(2) bench/seeds_per_trial.py's OUR_PPO at K = 1, 8, 64, 256, 1024 seeds, 4 iterations each after one untimed
warm-up iteration, wall x K=1 and env steps/s of all seeds; (3) OUR_DQN at K = 1 and 256, 1 iteration. One
repetition each (the device's time is scarce); a part that would run past `--budget` seconds is skipped and said so.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads

import argparse
import importlib.util
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def seeds_bench():
    spec = importlib.util.spec_from_file_location("seeds_per_trial", HERE / "seeds_per_trial.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env_alone(num_envs: int, steps: int, device: str) -> float:
    """Env steps/s of the torch CartPole env alone, `steps` steps of `num_envs` envs after 20 warm-up steps."""
    from tune_runner.algos.classic_control import CartPole

    env = CartPole(num_envs, device=device)
    env.reset(seed=0)
    draws = torch.Generator(device).manual_seed(0)
    actions = torch.randint(0, 2, (steps + 20, num_envs), device=device, generator=draws)
    for t in range(20):
        env.step(actions[t])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for t in range(20, steps + 20):
        env.step(actions[t])
    torch.cuda.synchronize()
    return num_envs * steps / (time.perf_counter() - start)


def same_on_both(steps: int = 300, num_envs: int = 64) -> None:
    """Each torch env on the GPU against the CPU from the same seed and actions; raises where they part."""
    import numpy as np

    from tune_runner.algos.classic_control import CLASSIC_CONTROL

    for env_id, cls in CLASSIC_CONTROL.items():
        cpu, gpu, rng = cls(num_envs), cls(num_envs, device="cuda"), np.random.default_rng(0)
        space = cls.single_action_space
        for t in range(steps):
            actions = rng.integers(0, space.n, num_envs) if hasattr(space, "n") else \
                rng.uniform(-1.2, 1.2, (num_envs, 1)).astype(np.float32) * space.high
            a, b = cpu.step(actions), gpu.step(actions)
            worst = float((a[0] - b[0].cpu()).abs().max())
            if not (torch.equal(a[2], b[2].cpu()) and torch.equal(a[3], b[3].cpu())
                    and torch.equal(cpu.resets, gpu.resets.cpu())) or worst > 1e-5:
                message = f"{env_id}: the GPU parts from the CPU at step {t} (observations {worst:.2e} apart)"
                if env_id != "Acrobot-v1":
                    raise SystemExit(message)
                print(f"{message}: chaotic, a last-bit sin of CUDA's grows (tests/test_torch_envs.py)")
                break
        else:
            print(f"{env_id}: GPU = CPU over {steps} steps of {num_envs} envs ({int(cpu.resets.sum())} resets)")


def learner_table(bench, algo: str, ks: list[int], *, iterations: int, deadline: float, device: str) -> None:
    values = bench.ours(algo)
    print(f"\n{algo} ({bench.ALGOS[algo][2]}), env_backend torch on {device}, {iterations} iteration(s) after a "
          f"warm-up")
    print("|  K | wall s | x K=1 | env steps/s, all seeds | build s |")
    print("|---:|---:|---:|---:|---:|")
    base = None
    for k in ks:
        if time.monotonic() > deadline:
            print(f"| {k} | skipped: past the time budget | | | |")
            continue
        start = time.perf_counter()
        bench.run(values, algo=algo, num_seeds=k, seed=99, iterations=1, device=device, env_backend="torch")
        warm = time.perf_counter() - start
        r = bench.run(values, algo=algo, num_seeds=k, seed=100, iterations=iterations, device=device,
                      env_backend="torch")
        base = base or r["wall"]
        print(f"| {k} | {r['wall']:.3f} | {r['wall'] / base:.2f} | {r['env_steps'] / r['wall']:,.0f} | "
              f"{warm:.1f} (warm-up build + 1 iteration) |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=200, help="seconds after which parts are skipped")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_envs.py: torch sees no CUDA device (torch.cuda.is_available() is False)")
    torch.set_num_threads(1)
    deadline = time.monotonic() + args.budget
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    same_on_both()
    for n in (4096, 65536):
        print(f"torch CartPole-v1 alone, {n:,} envs: {env_alone(n, 500, args.device):,.0f} env steps/s", flush=True)
    bench = seeds_bench()
    learner_table(bench, "ppo", [1, 8, 64, 256, 1024], iterations=4, deadline=deadline, device=args.device)
    learner_table(bench, "dqn", [1, 256], iterations=1, deadline=deadline, device=args.device)


if __name__ == "__main__":
    main()
