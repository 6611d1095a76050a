"""Search-level peer: wall time to a verified CartPole-v1 PPO config, rl-baselines3-zoo's optimizer against ours.

One run, one side after the other, each on the same CPUs (--cpus, default 2: this machine's cores):

1. The zoo: `python -m rl_zoo3.train --algo ppo --env CartPole-v1 -optimize --n-trials 10 --n-timesteps 50000
   --sampler tpe --pruner median` in the SB3 venv that bench/solve_cartpole.py builds. Its wall time runs from
   the process's start to its exit: imports, 10 trials one after another (its default --n-jobs 1, torch's
   default threads), each judged by the zoo's own evaluation (5 deterministic episodes after its 50k steps;
   it re-evaluates nothing on other seeds), and the report it writes (report_*.csv and the pickled study).
2. Ours: `tune-rl search --space ppo_small --num-cpus N` with the space's shipped defaults (N is the local Ray's
   default on a machine with N cores). Its wall time runs from the process's start to its exit: imports, Ray's
   start, 8 trials with ASHA, the automatic re-evaluation of the top 2 configs on 3 fresh seeds, MLflow
   logging, the report and the exported best.yaml. It runs under /tmp/ray-e2e.lock (one Ray at a time on this
   machine); the wait for that lock is outside the timed part.
3. The check: each side's best config is trained on --verify-seeds seeds that neither search saw (5000 and up;
   ours searched on seed 0 and re-evaluated on 1000-1002, the zoo draws a random seed) with the same
   solve test and budget for both: solved when the mean return of the last 100 training episodes reaches 475
   within --verify-steps env steps (default 250,000, ppo_small's budget and 5x the zoo's per-trial budget).
   The zoo's config is trained with SB3 as a zoo trial builds it (hyperparams/ppo.yml's CartPole-v1 entry,
   updated with the best trial's converted parameters), ours with our PPO as a trial builds it (best.yaml's
   config). Both with the loops of bench/solve_cartpole.py, one thread per seed, --jobs seeds at a time.

Printed per side: the search's wall time, the check's, their sum, and how many seeds solved; then the target
of issue 16 (ours at most 1/5 of the zoo's search wall time, with at least as many seeds solved).

    nice -n 10 flock /tmp/bench.lock .venv/bin/python bench/search_vs_zoo.py [--verify-seeds 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import solve_cartpole as solve  # noqa: E402  (stdlib only at import: the SB3 venv's child imports it too)

ROOT = solve.ROOT
ZOO_ARGS = ("-m", "rl_zoo3.train", "--algo", "ppo", "--env", solve.ENV_ID, "-optimize", "--n-trials", "10",
            "--n-timesteps", "50000", "--sampler", "tpe", "--pruner", "median")
ZOO_BUDGET = 50_000  # env steps per zoo trial: the check also says how many seeds solved within it
OURS_ARGS = ("-m", "tune_runner", "search", "--space", "ppo_small")
FIRST_SEED = 5000
RAY_LOCK = Path("/tmp/ray-e2e.lock")
TARGET = 1 / 5
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@dataclass
class Side:
    """One contender's search and the check of its best config."""

    name: str
    search_wall: float = math.nan
    search_status: int | None = None
    best: Path | None = None  # the zoo's pickled study, or our best.yaml
    claim: str = ""  # what the search itself said of its best config
    check_wall: float = math.nan
    seeds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def solved(self) -> int:
        return sum(bool(r.get("solved")) for r in self.seeds)

    @property
    def total_wall(self) -> float:
        return self.search_wall + self.check_wall


# ---- inside a check's subprocess ----------------------------------------------------------------------


def check_ours(bundle_path: Path, seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    """Our best.yaml's config trained on `seed` the way a trial builds its learner."""
    import torch
    import yaml

    torch.set_num_threads(1)
    from tune_runner.trainables.agents import build_learner

    bundle = yaml.safe_load(bundle_path.read_text())
    config = {**bundle["config"], "env": bundle["env"], "env_config": bundle.get("env_config") or {}, "seed": seed}
    clock = solve.Clock(**clock_args)
    learner = build_learner(bundle["trainable"], config)
    clock.mark_built()
    return solve.train_ours(learner, clock, config=bundle["config"])


def check_zoo(study_path: Path, seed: int, clock_args: dict[str, Any]) -> dict[str, Any]:
    """The zoo's best trial trained on `seed` with SB3, as a zoo trial builds it: the env's ppo.yml entry
    updated with the trial's sampled parameters, converted as the zoo converts them."""
    import pickle

    from rl_zoo3.hyperparams_opt import HYPERPARAMS_CONVERTER

    best = pickle.loads(study_path.read_bytes()).best_trial
    hyper, source = solve.zoo_hyperparams()
    kwargs = {**solve.sb3_kwargs(hyper), **HYPERPARAMS_CONVERTER["ppo"](best.params)}
    budget = clock_args["max_env_steps"]
    model, window, clock = solve.train_sb3(kwargs, policy=hyper["policy"], n_envs=int(hyper["n_envs"]), seed=seed,
                                           clock_args=clock_args, budget=budget)
    cap = None if window.solved() else clock.capped(model.num_timesteps) or f"budget {budget}"
    return clock.result(solved=window.solved(), env_steps=model.num_timesteps, episodes=window.episodes,
                        return_mean=window.mean(), cap=cap,
                        config={"trial": best.number, **best.params, "defaults": source})


# ---- the driver ---------------------------------------------------------------------------------------


def pin(cpus: int) -> None:
    """Run this process (a search about to exec) and everything it starts on the first `cpus` CPUs."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])


def timed(cmd: list[str], *, cwd: Path, env: dict[str, str], log: Path, cpus: int) -> tuple[float, int]:
    """Wall seconds and exit status of one command run from its start to its exit, its output in `log`."""
    cwd.mkdir(parents=True, exist_ok=True)
    print(f"$ {' '.join(cmd)}   (in {cwd}, log {log})", flush=True)
    with log.open("w") as out:
        start = time.perf_counter()
        status = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: pin(cpus)).returncode
        return time.perf_counter() - start, status


def zoo_claim_text(output: str) -> str:
    """The zoo's own score of its best trial: `Value:` after `Best trial:` in its output."""
    found = re.search(r"Best trial:\s*\nValue:\s*(\S+)", output)
    return f"best trial's mean eval return (5 episodes) {float(found.group(1)):.1f}" if found else "no best trial"


def search_zoo(python: Path, work: Path, cpus: int) -> Side:
    """The zoo's optimizer as the issue runs it; its pickled study is its best config's record."""
    side, log = Side("zoo"), work / "zoo-search.log"
    folder = work / "zoo"
    side.search_wall, side.search_status = timed([str(python), *ZOO_ARGS], cwd=folder, log=log, cpus=cpus,
                                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
    studies = sorted((folder / "logs" / "ppo").glob("report_*.pkl"))
    side.best = studies[-1] if studies else None
    side.claim = zoo_claim_text(log.read_text(errors="replace"))
    return side


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """flock(1)'s lock on `lock`, taken here so that the wait stays outside the timed search."""
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {lock} (another session's Ray) ...", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def search_ours(work: Path, cpus: int) -> Side:
    """`tune-rl search --space ppo_small` from this checkout, in a TUNE_RL_HOME of its own."""
    side, home = Side("ours"), work / "ours"
    env = {**os.environ, "TUNE_RL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, *OURS_ARGS, "--num-cpus", str(cpus)]
    with held(RAY_LOCK):
        side.search_wall, side.search_status = timed(cmd, cwd=ROOT, env=env, log=work / "ours-search.log", cpus=cpus)
    bundles = sorted((home / "results").glob("*/best.yaml"))
    side.best = bundles[-1] if bundles else None
    if side.best:
        import yaml

        evaluation = yaml.safe_load(side.best.read_text()).get("evaluation") or {}
        side.claim = f"re-evaluation: {evaluation.get('summary', 'none')}"
    return side


def check_seed(side: Side, seed: int, *, python: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One seed of a side's check, in a subprocess on one thread; its result, or an error and the log's tail."""
    result, log = work / f"check-{side.name}-{seed}.json", work / f"check-{side.name}-{seed}.log"
    cmd = [str(python), str(Path(__file__).resolve()), "--child", side.name, "--best", str(side.best), "--seed",
           str(seed), "--verify-steps", str(args.verify_steps), "--max-wall", str(args.max_wall), "--result",
           str(result)]
    env = {**os.environ, **ONE_THREAD, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    with log.open("w") as out:
        status = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if result.exists():
        return {**json.loads(result.read_text()), "seed": seed}
    tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
    return {"seed": seed, "solved": False, "error": f"exit status {status}: {tail}"}


def check(side: Side, *, python: Path, args: argparse.Namespace, work: Path) -> None:
    """Train the side's best config on the fresh seeds, --jobs at a time; the check's wall time."""
    if side.best is None:
        return
    seeds = range(FIRST_SEED, FIRST_SEED + args.verify_seeds)
    start = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        side.seeds = list(pool.map(lambda s: check_seed(side, s, python=python, args=args, work=work), seeds))
    side.check_wall = time.perf_counter() - start
    for r in side.seeds:
        print(f"  {side.name} seed {r['seed']}: {seed_text(r)}", flush=True)
    print(f"  {side.name} config checked: {json.dumps(side.seeds[0].get('config'), default=str)}", flush=True)


def seed_text(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"failed ({r['error']})"
    what = f"solved at {r['env_steps']:,} env steps in {r['wall_s']:.1f} s" if r["solved"] else \
        f"not solved ({r['cap']}; {r['env_steps']:,} env steps, {r['wall_s']:.1f} s)"
    return f"{what}, last-100 mean {r['return_mean']:.1f}"


def within(side: Side, steps: int) -> int:
    """Seeds of the check that solved within `steps` env steps."""
    return sum(bool(r.get("solved")) and r["env_steps"] <= steps for r in side.seeds)


def verdict(ours: Side, zoo: Side, *, target: float = TARGET) -> str:
    """Issue 16's target: ours' search at most `target` of the zoo's wall time, with at least as many seeds solved."""
    if ours.best is None or zoo.best is None:
        missing = " and ".join(s.name for s in (ours, zoo) if s.best is None)
        return f"target NOT MET: no best config from {missing} (see its log)"
    ratio, total = ours.search_wall / zoo.search_wall, ours.total_wall / zoo.total_wall
    fast, enough = ratio <= target, ours.solved >= zoo.solved
    met = "met" if fast and enough else "NOT MET"
    return (f"ours / zoo search wall = {ratio:.3f} (target <= {target:.2f}: {'ok' if fast else 'no'}); seeds solved "
            f"{ours.solved} vs {zoo.solved} (at least as many: {'ok' if enough else 'no'}) -> target {met}. "
            f"Including the {len(ours.seeds)}-seed checks: {total:.3f}")


def report(sides: list[Side], *, args: argparse.Namespace) -> None:
    """The table: per side, the search's and the check's wall time and the seeds that solved."""
    n = args.verify_seeds
    print(f"\nCartPole-v1 PPO, search to a config checked on {n} fresh seeds (seeds {FIRST_SEED}-{FIRST_SEED + n - 1}; "
          f"solved: last-100 mean >= {solve.TARGET:g} within {args.verify_steps:,} env steps), {args.cpus} CPUs "
          f"each, {time.strftime('%Y-%m-%d')}:\n")
    print("| side | search wall s | its own verdict on its best | check wall s | search + check s | solved | "
          f"within {ZOO_BUDGET // 1000}k steps | env steps to solved, per seed |")
    print("|:--|--:|:--|--:|--:|--:|--:|:--|")
    for s in sides:
        steps = ", ".join(f"{r['env_steps'] / 1000:.0f}k" if r.get("solved") else "-" for r in s.seeds)
        status = "" if s.search_status == 0 else f" (exit {s.search_status})"
        print(f"| {s.name} | {s.search_wall:.1f}{status} | {s.claim or '-'} | {s.check_wall:.1f} | "
              f"{s.total_wall:.1f} | {s.solved}/{n} | {within(s, ZOO_BUDGET)}/{n} | {steps or '-'} |")
    print()
    print("zoo search: `python " + " ".join(ZOO_ARGS) + "`, process start to exit (10 trials one at a time, "
          "each scored by the zoo's 5-episode evaluation; its report written)")
    print("ours search: `tune-rl " + " ".join(OURS_ARGS[2:]) + f" --num-cpus {args.cpus}`, process start to exit "
          "(Ray start, 8 trials with ASHA, re-evaluation of the top 2 on 3 fresh seeds, MLflow, report, best.yaml)")
    print(f"check: {n} seeds per side, {args.jobs} at a time, one thread each, the same solve test and budget")
    print(verdict(*sides[::-1]) if [s.name for s in sides] == ["zoo", "ours"] else "")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs for each side's search (default 2)")
    parser.add_argument("--verify-seeds", type=int, default=5,
                        help=f"fresh seeds per side, from {FIRST_SEED} (default 5)")
    parser.add_argument("--verify-steps", type=int, default=250_000,
                        help="env-step budget of each check seed, the same for both sides (default 250000)")
    parser.add_argument("--max-wall", type=float, default=600.0,
                        help="wall cap in seconds per check seed; a capped seed did not solve (default 600)")
    parser.add_argument("--jobs", type=int, default=2, help="check seeds trained at once (default 2)")
    parser.add_argument("--sides", nargs="+", choices=("zoo", "ours"), default=["zoo", "ours"],
                        help="run only these (default both)")
    parser.add_argument("--sb3-venv", type=Path, default=BENCH / ".venv-sb3",
                        help="venv for SB3 and rl_zoo3, built by bench/solve_cartpole.py's sb3_python on first use")
    parser.add_argument("--keep", type=Path,
                        help="keep the searches' files and logs here (default: a temporary folder)")
    parser.add_argument("--child", choices=("zoo", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--best", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag in ("cpus", "verify_seeds", "verify_steps", "max_wall", "jobs"):
        if not (value := getattr(args, flag)) > 0:
            parser.error(f"--{flag.replace('_', '-')} must be > 0, got {value}")
    if args.cpus > len(os.sched_getaffinity(0)):
        parser.error(f"--cpus {args.cpus}: this process may use only {len(os.sched_getaffinity(0))} CPUs")
    return args


def run(args: argparse.Namespace, work: Path) -> int:
    sb3 = solve.sb3_python(args.sb3_venv) if "zoo" in args.sides else None
    if "zoo" in args.sides and sb3 is None:
        return 1
    sides = []
    if "zoo" in args.sides:
        sides.append(search_zoo(sb3, work, args.cpus))
        print(f"zoo search: {sides[-1].search_wall:.1f} s, exit {sides[-1].search_status}; {sides[-1].claim}",
              flush=True)
    if "ours" in args.sides:
        sides.append(search_ours(work, args.cpus))
        print(f"ours search: {sides[-1].search_wall:.1f} s, exit {sides[-1].search_status}; {sides[-1].claim}",
              flush=True)
    for side in sides:
        check(side, python=sb3 if side.name == "zoo" else Path(sys.executable), args=args, work=work)
    report(sides, args=args)
    return 0 if all(s.search_status == 0 and s.seeds and "error" not in s.seeds[0] for s in sides) else 1


def main() -> int:
    args = parse_args()
    if args.child:
        clock_args = {"max_wall": args.max_wall, "max_env_steps": args.verify_steps}
        result = (check_zoo if args.child == "zoo" else check_ours)(args.best, args.seed, clock_args)
        args.result.write_text(json.dumps(result, default=str))
        return 0
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        return run(args, args.keep.resolve())
    with tempfile.TemporaryDirectory(prefix="search_vs_zoo-") as work:
        return run(args, Path(work))


if __name__ == "__main__":
    sys.exit(main())
