"""Wall time to a solved CartPole-v1: our PPO and DQN against RLlib's and Stable-Baselines3's.

Solved: the mean return of the last 100 training episodes a contender finished is >= 475,
from its own episode statistics. The clock starts when the learner is constructed (after the
Python, torch and Ray imports, and after `ray.init`) and stops at the first check that finds
the run solved; the checks come after each training iteration (ours: 1024 env steps, RLlib:
one `train()`), or after each vector step (SB3, in a callback).

Each run is a subprocess on one thread (OMP_NUM_THREADS=1, torch.set_num_threads(1)); its peak
RSS is the largest process of its tree (os.wait4). SB3 and rl_zoo3 are not dependencies of
tune-rl: the SB3 run uses its own venv (created on first use, see --sb3-venv).

    .venv/bin/python bench/solve_cartpole.py [--seeds 10] [--rllib-seeds N] [--max-wall 300] [--max-env-steps 500000]

Every contender runs seeds 0 .. N-1 (10 by default) and every seed counts: the summary prints
how many solved, and an unsolved seed is infinitely slow in the medians. `--rllib-seeds` gives
RLlib's contenders (minutes per seed) fewer seeds; the table then says how many each row has.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET, WINDOW = 475.0, 100
ENV_ID = "CartPole-v1"

# Our speed configs for one thread: numpy-vectorized envs, big batches, few large updates. Tuned
# with bench/sweep_own.py on seeds 100 and up, never on the benchmark's own seeds 0-9 (bench/README.md).
# PPO's lr decays to a floor, not to 0: a run that has not solved when the decay ends must still learn;
# 64 envs and batch 2048 take as many env steps as 32 and 1024 with half the per-step overhead.
# DQN: 16 envs and batch 256 solved 49/50 tuning seeds within 300k env steps; 32 envs, batch 512: 12/20.
OUR_PPO = {"lr": [[0, 1e-2], [100000, 1e-3]], "gamma": 0.99, "lambda": 0.9, "vf_clip_param": None,
           "num_envs_per_env_runner": 64, "train_batch_size": 2048, "minibatch_size": 512, "num_epochs": 5,
           "fcnet_hiddens": [32, 32]}
OUR_DQN = {"lr": 2e-3, "gamma": 0.99, "n_step": 3, "double_q": True, "num_envs_per_env_runner": 16,
           "train_batch_size": 256, "training_intensity": 16, "target_network_update_freq": 1000,
           "fcnet_hiddens": [64, 64], "epsilon": [[0, 1.0], [10000, 0.01]],
           "num_steps_sampled_before_learning_starts": 1000, "replay_buffer_config": {"capacity": 50000}}
# RLlib (new API stack, sampling in the driver): search_spaces/*_small.yaml's fixed values for
# rllib/PPO and rllib/DQN, one point of each space, and smoothing over WINDOW episodes.
RLLIB_PPO = {"num_env_runners": 0, "num_envs_per_env_runner": 8, "train_batch_size_per_learner": 4000,
             "vf_loss_coeff": 0.01, "lr": 1e-3, "num_epochs": 10, "minibatch_size": 256, "gamma": 0.99,
             "metrics_num_episodes_for_smoothing": WINDOW}
RLLIB_DQN = {"num_env_runners": 0, "train_batch_size_per_learner": 32, "n_step": 3, "double_q": True, "dueling": True,
             "replay_buffer_config": {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50000, "alpha": 0.6,
                                      "beta": 0.4},
             "num_steps_sampled_before_learning_starts": 1000, "epsilon": [[0, 1.0], [10000, 0.02]], "lr": 6e-4,
             "target_network_update_freq": 250, "metrics_num_episodes_for_smoothing": WINDOW}
# rl-baselines3-zoo's published CartPole-v1 PPO, used when the installed rl_zoo3 ships no hyperparams/ppo.yml.
ZOO_PPO = {"n_envs": 8, "n_timesteps": 1e5, "policy": "MlpPolicy", "n_steps": 32, "batch_size": 256,
           "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0, "learning_rate": "lin_0.001",
           "clip_range": "lin_0.2"}
CONTENDERS = ("ours/PPO", "ours/DQN", "rllib/PPO", "rllib/DQN", "sb3/PPO")
PEERS = ("rllib/PPO", "rllib/DQN", "sb3/PPO")
RLLIB = ("rllib/PPO", "rllib/DQN")


# ---- inside a contender's subprocess ----------------------------------------------------------------


class Clock:
    """Wall time since construction began, the caps, and the run's JSON result."""

    def __init__(self, *, max_wall: float, max_env_steps: int) -> None:
        self.max_wall, self.max_env_steps = max_wall, max_env_steps
        self.start = time.perf_counter()
        self.built = 0.0

    def mark_built(self) -> None:
        self.built = time.perf_counter() - self.start

    def capped(self, env_steps: int) -> str | None:
        if env_steps >= self.max_env_steps:
            return f"env-step cap {self.max_env_steps}"
        if time.perf_counter() - self.start >= self.max_wall:
            return f"wall cap {self.max_wall:g} s"
        return None

    def result(self, *, solved: bool, env_steps: int, episodes: int, return_mean: float, cap: str | None,
               config: dict[str, Any]) -> dict[str, Any]:
        return {"solved": bool(solved), "wall_s": time.perf_counter() - self.start, "build_s": self.built,
                "env_steps": int(env_steps), "episodes": int(episodes), "return_mean": float(return_mean),
                "cap": cap, "config": config}


def is_solved(return_mean: float, episodes: int, target: float = TARGET) -> bool:
    return episodes >= WINDOW and return_mean >= target


class EpisodeWindow:
    """The returns of the last WINDOW finished episodes, for the peers (ours keep the same window)."""

    def __init__(self, target: float = TARGET) -> None:
        self.returns: deque[float] = deque(maxlen=WINDOW)
        self.episodes, self.target = 0, target

    def add(self, episode_return: float) -> None:
        self.returns.append(float(episode_return))
        self.episodes += 1

    def mean(self) -> float:
        return statistics.fmean(self.returns) if self.returns else math.nan

    def solved(self) -> bool:
        return is_solved(self.mean(), self.episodes, self.target)


def run_ours(algo: str, seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig

    values = {**(OUR_PPO if algo == "PPO" else OUR_DQN), "metrics_num_episodes_for_smoothing": WINDOW, "seed": seed}
    clock = Clock(**clock_args)
    if algo == "PPO":
        learner = PPO(PPOConfig.from_dict(values), env_id=ENV_ID)
    else:
        learner = DQN(DQNConfig.from_dict(values), env_id=ENV_ID)
    clock.mark_built()
    return train_ours(learner, clock, config=values)


def train_ours(learner: Any, clock: Clock, *, config: dict[str, Any], target: float = TARGET) -> dict[str, Any]:
    """Train one of our learners until it solves or a cap stops it (bench/search_vs_zoo.py and
    bench/solve_pendulum.py train their configs so)."""
    while True:
        m = learner.train_iteration()
        solved = is_solved(m["episode_return_mean"], m["episodes"], target)
        cap = None if solved else clock.capped(learner.env_steps)
        if solved or cap:
            return clock.result(solved=solved, env_steps=learner.env_steps, episodes=m["episodes"],
                                return_mean=m["episode_return_mean"], cap=cap, config=config)


def run_rllib(algo: str, seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    import ray
    import torch

    torch.set_num_threads(1)
    from ray.rllib.algorithms.registry import _get_algorithm_class

    values, window = RLLIB_PPO if algo == "PPO" else RLLIB_DQN, EpisodeWindow()
    config = _get_algorithm_class(algo).get_default_config().environment(ENV_ID)
    config.update_from_dict({**values, "seed": seed})
    # Every finished episode's return, straight from the env runner (it runs in this process): the
    # same last-WINDOW statistic as for the others. An episode that outlived a `sample()` call
    # comes in chunks; `episode` is only the last one.
    def on_episode_end(episode: Any, prev_episode_chunks: list[Any] | None = None, **_: Any) -> None:
        window.add(episode.get_return() + sum(chunk.get_return() for chunk in prev_episode_chunks or ()))

    config.callbacks(on_episode_end=on_episode_end)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    clock = Clock(**clock_args)
    rllib = config.build_algo()
    clock.mark_built()
    while True:
        r = rllib.train()
        steps = r.get("num_env_steps_sampled_lifetime", 0)
        cap = None if window.solved() else clock.capped(steps)
        if window.solved() or cap:
            result = clock.result(solved=window.solved(), env_steps=steps, episodes=window.episodes,
                                  return_mean=window.mean(), cap=cap, config=values)
            result["rllib_episode_return_mean"] = r.get("env_runners", {}).get("episode_return_mean", math.nan)
            rllib.stop()
            ray.shutdown()
            return result


def zoo_hyperparams(env_id: str = ENV_ID, fallback: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """`env_id`'s PPO entry of the installed rl_zoo3 (and where it came from), else `fallback` (CartPole's
    ZOO_PPO by default)."""
    import rl_zoo3
    import yaml

    path = Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo.yml"
    if path.is_file():
        return dict(yaml.safe_load(path.read_text())[env_id]), f"rl_zoo3 {rl_zoo3.__version__} hyperparams/ppo.yml"
    return dict(ZOO_PPO if fallback is None else fallback), "built-in copy of the zoo's values"


def sb3_kwargs(hyper: dict[str, Any]) -> dict[str, Any]:
    """A zoo hyperparameter entry as SB3 PPO's keyword arguments: `lin_X` strings become linear schedules."""
    from rl_zoo3.utils import linear_schedule

    kwargs = {k: v for k, v in hyper.items() if k not in ("n_envs", "n_timesteps", "policy")}
    for key, value in kwargs.items():
        if isinstance(value, str) and value.startswith("lin_"):
            kwargs[key] = linear_schedule(float(value[4:]))
    return kwargs


def train_sb3(kwargs: dict[str, Any], *, policy: str, n_envs: int, seed: int, clock_args: dict[str, Any],
              budget: int, env_id: str = ENV_ID, target: float = TARGET) -> tuple[Any, EpisodeWindow, Clock]:
    """SB3 PPO trained on `seed` until it solves, a cap stops it or `budget` env steps are done.

    The clock starts after the imports, as for the others. The budget is also the horizon of the schedules
    (lin_ values reach 0 there). bench/search_vs_zoo.py trains the zoo's tuned configs with it too."""
    import torch

    torch.set_num_threads(1)
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class StopWhenSolved(BaseCallback):
        """Counts the episodes SB3's Monitor wrapper reports; stops training once solved or capped."""

        def __init__(self) -> None:
            super().__init__()
            self.window = EpisodeWindow(target)

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.window.add(info["episode"]["r"])
            return not (self.window.solved() or clock.capped(self.num_timesteps))

    clock = Clock(**clock_args)
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    model = PPO(policy, env, seed=seed, device="cpu", verbose=0, **kwargs)
    clock.mark_built()
    stop = StopWhenSolved()
    model.learn(total_timesteps=min(budget, clock.max_env_steps), callback=stop)
    return model, stop.window, clock


def run_sb3(seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    hyper, source = zoo_hyperparams()
    kwargs, budget = sb3_kwargs(hyper), int(float(hyper["n_timesteps"]))
    model, window, clock = train_sb3(kwargs, policy=hyper["policy"], n_envs=int(hyper["n_envs"]), seed=seed,
                                     clock_args=clock_args, budget=budget)
    cap = None if window.solved() else (clock.capped(model.num_timesteps) or f"zoo budget {budget}")
    return clock.result(solved=window.solved(), env_steps=model.num_timesteps, episodes=window.episodes,
                        return_mean=window.mean(), cap=cap, config={**hyper, "source": source})


def child_main(name: str, seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    family, algo = name.split("/")
    if family == "ours":
        return run_ours(algo, seed, clock_args)
    if family == "rllib":
        return run_rllib(algo, seed, clock_args)
    return run_sb3(seed, clock_args)


# ---- the driver ---------------------------------------------------------------------------------------


def sb3_python(venv: Path) -> Path | None:
    """The SB3 venv's python, after creating the venv and installing SB3 and rl_zoo3 into it if needed.

    pandas too: rl_zoo3's optimizer (bench/search_vs_zoo.py) writes its report with Optuna's trials_dataframe,
    which needs it, and rl_zoo3 lists it only under its `plots` extra."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import stable_baselines3, rl_zoo3, pandas"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"setting up {venv} for the SB3 contender (once; a few minutes) ...", flush=True)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"],
             [str(python), "-m", "pip", "install", "--quiet", "stable-baselines3", "rl_zoo3", "pandas"]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"sb3/PPO skipped: {' '.join(step[-3:])} failed: {last}", file=sys.stderr)
            return None
        if step is steps[0]:
            (venv / ".gitignore").write_text("*\n")  # out of git status wherever --sb3-venv puts it
    return python


def run_child(name: str, seed: int, *, python: Path, args: argparse.Namespace, logs: Path,
              script: Path | None = None) -> dict[str, Any]:
    """One contender and seed in its own process group (`script --child`, this file by default); its result with
    `peak_rss_mb` added."""
    tag = f"{name.replace('/', '-')}-seed{seed}"
    result_file, log_file = logs / f"{tag}.json", logs / f"{tag}.log"
    cmd = [str(python), str(script or Path(__file__).resolve()), "--child", name, "--seed", str(seed),
           "--max-wall", str(args.max_wall), "--max-env-steps", str(args.max_env_steps), "--result", str(result_file)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    with log_file.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # Imports, ray.init and the last iteration come on top of the wall cap; past this, it is stuck.
    timer = threading.Timer(args.max_wall + 180, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)  # its own rusage, not that of every child so far
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if result_file.exists():
        result = json.loads(result_file.read_text())
    else:
        tail = log_file.read_text().strip().splitlines()[-15:]
        print(f"{name} seed {seed} failed (exit status {proc.returncode}); end of its log:\n  "
              + "\n  ".join(tail), file=sys.stderr)
        result = {"solved": False, "error": f"exit status {proc.returncode}", "wall_s": math.nan, "build_s": math.nan,
                  "env_steps": 0, "episodes": 0, "return_mean": math.nan, "cap": None}
    return {**result, "peak_rss_mb": usage.ru_maxrss / 1024}


def describe(name: str, seed: int, r: dict[str, Any]) -> str:
    what = r.get("error") or (f"solved in {r['wall_s']:.1f} s" if r["solved"] else f"not solved ({r['cap']})")
    return (f"{name:<10} seed {seed}: {what}; {r['env_steps']:,} env steps, {r['episodes']:,} episodes, "
            f"last-{WINDOW} mean {r['return_mean']:.1f}, built in {r['build_s']:.1f} s, peak RSS "
            f"{r['peak_rss_mb']:.0f} MB")


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over every seed a contender ran; an unsolved run counts as infinitely slow."""
    def med(values: list[float]) -> float:
        return statistics.median(values) if values else math.nan

    return {"solved": sum(r["solved"] for r in runs), "runs": len(runs),
            "unsolved": [r["seed"] for r in runs if not r["solved"]],
            "sps": med([r["env_steps"] / (r["wall_s"] - r["build_s"]) for r in runs if r["env_steps"]]),
            "wall": med([r["wall_s"] if r["solved"] else math.inf for r in runs]),
            "steps": med([r["env_steps"] if r["solved"] else math.inf for r in runs]),
            "build": med([r["build_s"] for r in runs if not math.isnan(r["build_s"])]),
            "rss": med([r["peak_rss_mb"] for r in runs])}


def ratio(wall: float, base: float, cap: float) -> str:
    if math.isinf(wall):
        return f"> {cap / base:.1f}" if math.isfinite(base) else "-"
    return f"{wall / base:.2f}" if math.isfinite(base) else "-"


def print_table(stats: dict[str, dict[str, Any]], cap: float) -> None:
    head = ("contender", "seeds", "solved", "env steps/s", "wall s to solved", "env steps to solved", "build s",
            "peak RSS MB", "wall / ours PPO", "wall / ours DQN")
    ppo, dqn = (stats.get(k, {}).get("wall", math.nan) for k in ("ours/PPO", "ours/DQN"))
    rows = [head]
    for name, s in stats.items():
        unsolved = f"> {cap:g}" if math.isinf(s["wall"]) else f"{s['wall']:.1f}"
        rows.append((name, f"0-{s['runs'] - 1}", f"{s['solved']}/{s['runs']}", f"{s['sps']:,.0f}", unsolved,
                     "-" if math.isinf(s["steps"]) else f"{s['steps']:,.0f}", f"{s['build']:.1f}", f"{s['rss']:.0f}",
                     ratio(s["wall"], ppo, cap), ratio(s["wall"], dqn, cap)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for i, row in enumerate(rows):
        print("| " + " | ".join(cell.ljust(w) if j == 0 else cell.rjust(w)
                                for j, (cell, w) in enumerate(zip(row, widths, strict=True))) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 1) + ":" if j else ":" + "-" * (w + 1) for j, w in enumerate(widths)) + "|")


def target_line(ours: str, peer: str, stats: dict[str, dict[str, Any]], *, target: float, cap: float) -> str:
    """Whether `ours` solved in at most `target` times `peer`'s wall time (a bound when the peer never solved)."""
    mine, theirs = stats[ours]["wall"], stats[peer]["wall"]
    if math.isinf(mine):
        return f"{ours} vs {peer}: {ours} did not solve; target {target:.2f} NOT MET"
    bound = math.isinf(theirs)
    value = mine / (cap if bound else theirs)
    met = "met" if value <= target else "NOT MET"
    shown = f"< {value:.3f} ({peer} not solved within {cap:g} s)" if bound else f"{value:.3f}"
    seeds = "" if stats[peer]["runs"] == stats[ours]["runs"] else \
        f" (medians over {stats[ours]['runs']} and {stats[peer]['runs']} seeds)"
    return f"{ours} wall / {peer} wall = {shown}; target <= {target:.2f}: {met}{seeds}"


def solved_line(name: str, s: dict[str, Any]) -> str:
    """`ours/PPO: solved 10/10 seeds (0-9)`, naming the seeds that did not solve."""
    missed = f"; not solved: seed {', '.join(map(str, s['unsolved']))}" if s["unsolved"] else ""
    return f"{name}: solved {s['solved']}/{s['runs']} seeds (0-{s['runs'] - 1}){missed}"


def report(runs: dict[str, list[dict[str, Any]]], cap: float) -> None:
    stats = {name: summary(rs) for name, rs in runs.items() if rs}
    print(f"\nCartPole-v1 to solved (mean of the last {WINDOW} training episodes >= {TARGET:g}), one thread, "
          "medians over each row's seeds, an unsolved seed counted as infinitely slow:\n")
    print_table(stats, cap)
    print()
    for name, s in stats.items():
        print(solved_line(name, s))
    peers = [p for p in PEERS if p in stats]
    if "ours/PPO" in stats and peers:
        fastest = min(peers, key=lambda p: stats[p]["wall"])
        print(target_line("ours/PPO", fastest, stats, target=0.1, cap=cap) + " (fastest peer)")
    if "ours/DQN" in stats and "rllib/DQN" in stats:
        print(target_line("ours/DQN", "rllib/DQN", stats, target=1 / 3, cap=cap))


def add_run_args(parser: argparse.ArgumentParser, contenders: tuple[str, ...]) -> None:
    """The SB3 venv, the JSON output and the hidden flags a contender's subprocess gets (run_child)."""
    parser.add_argument("--sb3-venv", type=Path, default=ROOT / "bench" / ".venv-sb3",
                        help="venv for SB3 and rl_zoo3, created on first use (default bench/.venv-sb3)")
    parser.add_argument("--json", type=Path, help="also write every run's result to this file")
    parser.add_argument("--child", choices=contenders, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)


def run_own_ppo(values: dict[str, Any], *, env_id: str, seed: int, clock_args: dict[str, Any],
                target: float) -> dict[str, Any]:
    """Our PPO with `values` on `env_id` and `seed`, trained until the target or a cap (bench/solve_pendulum.py and
    bench/halfcheetah.py)."""
    import torch

    torch.set_num_threads(1)
    from tune_runner.algos import PPO, PPOConfig

    values = {**values, "metrics_num_episodes_for_smoothing": WINDOW, "seed": seed}
    clock = Clock(**clock_args)
    learner = PPO(PPOConfig.from_dict(values), env_id=env_id)
    clock.mark_built()
    return train_ours(learner, clock, config=values, target=target)


def seed_args(description: str, argv: list[str] | None, *, contenders: tuple[str, ...], seeds: int, max_wall: float,
              max_env_steps: int) -> argparse.Namespace:
    """The flags of a benchmark of `contenders` on seeds --first-seed and up (bench/solve_pendulum.py,
    bench/halfcheetah.py), each checked > 0."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, default=seeds, help=f"how many seeds, from --first-seed (default {seeds})")
    parser.add_argument("--first-seed", type=int, default=1000, help="the first seed (default 1000)")
    parser.add_argument("--max-wall", type=float, default=max_wall,
                        help=f"wall-clock cap per run in s (default {max_wall:g})")
    parser.add_argument("--max-env-steps", type=int, default=max_env_steps,
                        help=f"env-step cap per run (default {max_env_steps:g})")
    parser.add_argument("--contenders", nargs="+", choices=contenders, default=list(contenders))
    add_run_args(parser, contenders)
    args = parser.parse_args(argv)
    for flag in ("seeds", "max_wall", "max_env_steps"):
        if not getattr(args, flag) > 0:
            parser.error(f"--{flag.replace('_', '-')} must be > 0, got {getattr(args, flag)}")
    return args


def run_seeds(args: argparse.Namespace, *, declared: dict[str, dict], script: Path) -> dict[str, list[dict[str, Any]]]:
    """Every contender of `args` on seeds --first-seed and up, each in its own process (`script --child`), seeds
    outermost so that drift in the machine's load hits every contender alike; `declared` configs are printed."""
    pythons = contender_pythons(args, declared=declared)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in pythons}
    with tempfile.TemporaryDirectory(prefix=f"{script.stem}-") as logs:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for name, python in pythons.items():
                result = run_child(name, seed, python=python, args=args, logs=Path(logs), script=script)
                if name == "sb3/PPO" and seed == args.first_seed and "config" in result and name not in declared:
                    print(f"sb3/PPO config: {json.dumps(result['config'])}")
                print(describe(name, seed, result), flush=True)
                runs[name].append({**result, "seed": seed})
    return runs


def ours_against_sb3(args: argparse.Namespace, *, run_ours: Any, run_sb3: Any, declared: dict[str, dict],
                     script: Path, report: Any) -> int:
    """The main of a benchmark of ours/PPO against sb3/PPO (bench/solve_pendulum.py, bench/halfcheetah.py): a
    contender's child process runs `run_ours` or `run_sb3(seed, clock_args)`; the driver runs every seed, then
    `report(runs, args)`. Exit status 1 when a run failed."""
    clock_args = {"max_wall": args.max_wall, "max_env_steps": args.max_env_steps}
    if args.child:
        result = (run_ours if args.child == "ours/PPO" else run_sb3)(args.seed, clock_args)
        args.result.write_text(json.dumps(result))
        return 0
    runs = run_seeds(args, declared=declared, script=script)
    report(runs, args)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 1 if any("error" in r for rs in runs.values() for r in rs) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 for every contender (default 10)")
    parser.add_argument("--rllib-seeds", type=int,
                        help="seeds 0 .. N-1 for RLlib's contenders only, N <= --seeds (default: all of --seeds)")
    parser.add_argument("--max-wall", type=float, default=300.0,
                        help="wall-clock cap per run in seconds, from construction (default 300)")
    parser.add_argument("--max-env-steps", type=int, default=500_000, help="env-step cap per run (default 500000)")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS),
                        help="which to run (default: all)")
    add_run_args(parser, CONTENDERS)
    args = parser.parse_args(argv)
    for flag in ("seeds", "max_wall", "max_env_steps"):
        if not (value := getattr(args, flag)) > 0:
            flag = "--" + flag.replace("_", "-")
            parser.error(f"{flag} must be > 0, got {value}")
    if args.rllib_seeds is None:
        args.rllib_seeds = args.seeds
    if not 0 < args.rllib_seeds <= args.seeds:
        parser.error(f"--rllib-seeds must be between 1 and --seeds ({args.seeds}), got {args.rllib_seeds}")
    return args


def contender_pythons(args: argparse.Namespace, *, declared: dict[str, dict] | None = None) -> dict[str, Path]:
    """The interpreter each chosen contender runs under (SB3: its own venv; left out if that fails); the
    `declared` configs (CartPole's by default) are printed."""
    pythons = {name: Path(sys.executable) for name in args.contenders}
    if "sb3/PPO" in pythons:
        sb3 = sb3_python(args.sb3_venv)
        if sb3 is None:
            del pythons["sb3/PPO"]
        else:
            pythons["sb3/PPO"] = sb3
    if declared is None:
        declared = {"ours/PPO": OUR_PPO, "ours/DQN": OUR_DQN, "rllib/PPO": RLLIB_PPO, "rllib/DQN": RLLIB_DQN}
    for name in pythons:
        if name in declared:  # SB3's comes from the zoo file in its venv: printed with its first run
            print(f"{name} config: {json.dumps(declared[name])}")
    return pythons


def main() -> int:
    args = parse_args()
    if args.child:
        result = child_main(args.child, args.seed, {"max_wall": args.max_wall, "max_env_steps": args.max_env_steps})
        args.result.write_text(json.dumps(result))
        return 0
    pythons = contender_pythons(args)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in pythons}
    with tempfile.TemporaryDirectory(prefix="solve_cartpole-") as logs:
        for seed in range(args.seeds):  # seeds outermost: drift in machine load hits every contender alike
            for name, python in pythons.items():
                if name in RLLIB and seed >= args.rllib_seeds:
                    continue
                result = run_child(name, seed, python=python, args=args, logs=Path(logs))
                if name == "sb3/PPO" and seed == 0 and "config" in result:
                    print(f"sb3/PPO config: {json.dumps(result['config'])}")
                print(describe(name, seed, result), flush=True)
                runs[name].append({**result, "seed": seed})
    report(runs, args.max_wall)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 1 if any("error" in r for rs in runs.values() for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
