"""Issue 44's per-seed Python, part by part: K seeds' rollout noise, PPO's minibatch plan and the learner's build.

On one torch thread, medians over `--reps` alternating repetitions, for each K:

- noise: one draw of CartPole's [K, 64, 2] Gumbel uniforms from each seed's torch generator (a CPU learner's
  source, one torch.rand per seed) against the counter streams (a GPU learner's, one call for all seeds), and
  their ratio; `seed_streams.noise_source` picks by device, never by K.
- plan: OUR_PPO's minibatch plan (5 epochs of about 2048 rows a seed, minibatch 512, ragged counts) as c51e70a
  made it (a numpy permutation per seed, cut in a Python loop: `numpy_plan`, copied here) against
  `seed_streams.minibatch_plan` (one sort on the learner's device).
- build: `PPO(OUR_PPO, num_seeds=K)` on torch envs and on gymnasium's, after one warm-up build.

    .venv/bin/python bench/seed_draws.py                       # K = 1 8 64 256 1024
    .venv/bin/python bench/seed_draws.py --ks 1 8 --reps 9 --parts noise plan
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from tune_runner.algos import PPO, PPOConfig
from tune_runner.algos.common import keep_freed_memory
from tune_runner.algos.seed_streams import CounterStreams, _generator_noise, minibatch_plan

OUR_PPO = {"lr": [[0, 1e-2], [100000, 1e-3]], "gamma": 0.99, "lambda": 0.9, "vf_clip_param": None,
           "num_envs_per_env_runner": 64, "train_batch_size": 2048, "minibatch_size": 512, "num_epochs": 5,
           "fcnet_hiddens": [32, 32]}  # solve_cartpole.py's, as seeds_per_trial.py trains it


def numpy_plan(counts: Sequence[int], *, num_epochs: int, minibatch_size: int,
               rngs: Sequence[np.random.Generator]) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """c51e70a's seeds.minibatch_plan: (index, mask, active) per step."""
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    pieces: list[list[np.ndarray]] = []
    for count, offset, rng in zip(counts, offsets, rngs, strict=True):
        own = []
        for _ in range(num_epochs if count else 0):
            order = rng.permutation(int(count)) + offset
            own.extend(order[start:start + minibatch_size] for start in range(0, int(count), minibatch_size))
        pieces.append(own)
    plan, everyone = [], np.ones(len(counts), dtype=bool)
    for u in range(max(map(len, pieces))):
        parts = [own[u] if u < len(own) else offsets[:0] for own in pieces]
        sizes = [len(part) for part in parts]
        width = max(sizes)
        if min(sizes) == width:
            plan.append((np.stack(parts), None, everyone))
            continue
        index = np.empty((len(parts), width), dtype=np.int64)
        for i, part in enumerate(parts):
            index[i, :len(part)] = part
            index[i, len(part):] = part[0] if len(part) else (offsets[i] if counts[i] else 0)
        sizes = np.array(sizes)
        plan.append((index, (np.arange(width) < sizes[:, None]).astype(np.float32), sizes > 0))
    return plan


def timed(call: Callable[[], object], *, seconds: float = 0.2) -> float:
    """Seconds per call, over enough calls to fill `seconds` (at least one)."""
    call()
    calls, start = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - start < seconds:
        call()
        calls += 1
    return (time.perf_counter() - start) / calls


def contenders(part: str, k: int) -> dict[str, Callable[[], object]]:
    seeds = list(range(k))
    if part == "noise":
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        streams = CounterStreams(seeds)
        return {"generators": lambda: _generator_noise(torch.rand, (k, 64, 2), generators),
                "counter": lambda: streams.uniform((k, 64, 2))}
    if part == "plan":
        counts = (2048 - np.random.default_rng(0).integers(0, 40, k)).tolist()
        rngs, streams = [np.random.default_rng(s) for s in seeds], CounterStreams(seeds)
        return {"numpy (c51e70a)": lambda: numpy_plan(counts, num_epochs=5, minibatch_size=512, rngs=rngs),
                "torch": lambda: minibatch_plan(counts, num_epochs=5, minibatch_size=512, streams=streams)}
    return {backend: (lambda backend=backend: PPO(PPOConfig.from_dict(
        {**OUR_PPO, "num_seeds": k, "env_backend": backend}), env_id="CartPole-v1").close())
        for backend in ("torch", "gymnasium")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 8, 64, 256, 1024], help="seed counts")
    parser.add_argument("--reps", type=int, default=5, help="repetitions, alternating the contenders (default 5)")
    parser.add_argument("--parts", nargs="+", choices=["noise", "plan", "build"], default=["noise", "plan", "build"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()  # as a CPU learner does
    for part in args.parts:
        print(f"\n{part}: median ms over {args.reps} repetitions, one thread")
        rows = []
        for k in args.ks:
            calls = contenders(part, k)
            times: dict[str, list[float]] = {name: [] for name in calls}
            for rep in range(args.reps):
                for name in (list(calls) if rep % 2 == 0 else list(calls)[::-1]):
                    times[name].append(timed(calls[name], seconds=0.0 if part == "build" else 0.2))
            medians = {name: statistics.median(values) * 1e3 for name, values in times.items()}
            first, second = medians.values()
            rows.append(f"| {k} | " + " | ".join(f"{v:,.2f}" for v in medians.values()) + f" | {second / first:.2f} |")
        names = list(contenders(part, 1))
        print(f"| K | {' | '.join(names)} | {names[1]} / {names[0]} |\n|--:|--:|--:|--:|")
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
