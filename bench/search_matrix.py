"""Every valid searcher x scheduler pair on the oracle trainable (known optimum), on one local Ray.

Prints, per pair: the best oracle peak among the configs tried and the peak of the config
the search selects as best (500 = the optimum; a config's peak is the value its curve
converges to, so the score of the config, not of its noisy curve), the trials stopped
early, and the search's wall seconds. Not a timing benchmark: the point is what
each pair finds with the same small budget (16 trials x 10,000 env steps, noise std 5).

    .venv/bin/python bench/search_matrix.py [--samples 16]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPACE = {"lr": {"loguniform": [1.0e-5, 1.0e-1]}, "x": {"uniform": [0.0, 1.0]}}
SEARCHERS = {"random": {"name": "random"}, "optuna-tpe": {"name": "optuna", "n_startup_trials": 5},
             "optuna-cmaes": {"name": "optuna", "sampler": "cmaes", "n_startup_trials": 5},
             "hyperopt": {"name": "hyperopt", "n_initial_points": 5}, "bohb": {"name": "bohb"}}
SCHEDULERS = ["fifo", "asha", "hyperband", "median", "pbt", "pb2", "bohb"]


def valid(searcher: str, scheduler: str) -> bool:
    if (searcher == "bohb") != (scheduler == "bohb"):
        return False
    return scheduler not in ("pbt", "pb2") or searcher == "random"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tune-rl-matrix-"))
    os.environ["TUNE_RL_HOME"] = str(home)
    from ray.tune import ExperimentAnalysis

    from tune_runner.spec.experiment import build_spec
    from tune_runner.trainables.oracle import peak
    from tune_runner.tuning import runner

    runner.ensure_ray(num_cpus=2, verbose=False)
    rows = []
    for searcher, settings in SEARCHERS.items():
        for scheduler in SCHEDULERS:
            if not valid(searcher, scheduler):
                continue
            sched = {"name": scheduler}
            if scheduler in ("pbt", "pb2"):
                sched.update(perturbation_interval=2000, quantile_fraction=0.25)
            raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 10000},
                   "searcher": {**settings, "seed": args.seed}, "scheduler": sched, "num_samples": args.samples,
                   "fixed": {"optimum": {"lr": 1.0e-3, "x": 0.7}, "log_scale": ["lr"], "noise": 5.0,
                             "steps_per_iteration": 1000, "rate": 0.3},
                   "space": SPACE}
            spec = build_spec(yaml.safe_load(yaml.safe_dump(raw)), name="matrix", source="bench/search_matrix.py")
            name = f"{searcher}-{scheduler}"
            started = time.monotonic()
            outcome = runner.run(spec, runner.RunOptions(storage=home / "results", name=name,
                                                         mlflow_uri=f"sqlite:///{home / 'mlflow.db'}"),
                                 out=io.StringIO())
            seconds = time.monotonic() - started
            trials = ExperimentAnalysis(str(outcome.experiment_path)).trials
            best = max(peak(t.config) for t in trials)
            chosen = peak(outcome.best.config) if outcome.best else float("nan")
            early = sum(1 for t in trials if (t.last_result or {}).get("env_steps", 0) < 10000)
            rows.append((searcher, scheduler, best, chosen, early, len(trials), seconds))
            print(f"{name:24s} best peak {best:6.1f}  selected {chosen:6.1f}  stopped early {early:2d}/{len(trials)}"
                  f"  {seconds:5.1f} s", flush=True)
    print("\n| searcher | scheduler | best config's peak | selected config's peak | stopped early | search s |")
    print("|---|---|---:|---:|---:|---:|")
    for searcher, scheduler, best, chosen, early, n, seconds in rows:
        print(f"| {searcher} | {scheduler} | {best:.1f} | {chosen:.1f} | {early}/{n} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
