"""Batched vs per-metric MLflow logging, on a real SQLite store, in one process.

The peer is what Ray's stock MLflowLoggerCallback does: one `log_metric` request per
metric per result. Ours sends one `log_batch` per result. Prints the ratio.

    .venv/bin/python bench/mlflow_batching.py [--results 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tune_runner.tracking import client, experiment_id, metrics_of

RESULT = {"episode_return_mean": 120.0, "episode_return_max": 500.0, "episode_return_min": 9.0,
          "episode_len_mean": 120.0, "episodes": 40.0, "policy_loss": -0.01, "vf_loss": 2.0, "entropy": 0.6,
          "kl": 0.01, "total_loss": 2.0, "vf_explained_var": 0.3, "lr": 3e-4, "sps": 1300.0,
          "time_total_s": 10.0, "training_iteration": 3}


def per_metric(mlflow, run_id: str, results: int) -> float:
    start = time.perf_counter()
    for i in range(results):
        for key, value in RESULT.items():
            mlflow.log_metric(run_id, key, value, step=i * 4000)
    return time.perf_counter() - start


def batched(mlflow, run_id: str, results: int) -> float:
    start = time.perf_counter()
    for i in range(results):
        mlflow.log_batch(run_id, metrics=metrics_of(RESULT, step=i * 4000, now_ms=int(time.time() * 1000)))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        mlflow = client(uri)
        exp = experiment_id(mlflow, "bench", uri)
        peer_run = mlflow.create_run(exp).info.run_id
        ours_run = mlflow.create_run(exp).info.run_id
        batched(mlflow, ours_run, 1)  # warm up the store once for both
        peer = per_metric(mlflow, peer_run, args.results)
        ours = batched(mlflow, ours_run, args.results)
    n = len(RESULT)
    print(f"{args.results} results x {n} metrics on SQLite")
    print(f"per-metric requests (Ray's MLflowLoggerCallback): {peer / args.results * 1000:7.1f} ms per result")
    print(f"one log_batch per result (tune-rl):               {ours / args.results * 1000:7.1f} ms per result")
    print(f"ratio: batched is {peer / ours:.1f}x faster")


if __name__ == "__main__":
    main()
