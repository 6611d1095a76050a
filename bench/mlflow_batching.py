"""Batched vs per-metric MLflow logging, on a real SQLite store and over HTTP to a real
`mlflow server` (one worker, on its own SQLite store), in one process.

The peer is what Ray's stock MLflowLoggerCallback does: one `log_metric` request per
metric per result. Ours sends one `log_batch` per result. Prints the time per result (the
logging overhead of one training iteration) and the ratio, for each store.

    .venv/bin/python bench/mlflow_batching.py [--results 20] [--no-http]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tune_runner.tracking.callback import client, experiment_id, metrics_of

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


def measure(uri: str, results: int) -> tuple[float, float]:
    """(per-metric, batched) seconds per result on the store at `uri`."""
    mlflow = client(uri)
    exp = experiment_id(mlflow, "bench", uri)
    peer_run = mlflow.create_run(exp).info.run_id
    ours_run = mlflow.create_run(exp).info.run_id
    batched(mlflow, ours_run, 1)  # warm up the store once for both
    return per_metric(mlflow, peer_run, results) / results, batched(mlflow, ours_run, results) / results


def http_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """A local `mlflow server` as tune-rl's dashboard runs it: one worker, no job consumers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
           "--artifacts-destination", str(folder / "artifacts"), "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(cmd, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(900):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("the MLflow server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=int, default=20)
    parser.add_argument("--no-http", action="store_true", help="SQLite only, no server")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("SQLite", *measure(f"sqlite:///{Path(tmp) / 'mlflow.db'}", args.results)))
        if not args.no_http:
            proc, url = http_server(Path(tmp))
            try:
                rows.append(("HTTP (mlflow server)", *measure(url, args.results)))
            finally:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(30)
    print(f"{args.results} results x {len(RESULT)} metrics; ms per result (the logging overhead of one iteration)")
    print(f"{'store':22} {'per-metric (Ray stock)':>22} {'log_batch (tune-rl)':>20} {'ratio':>6}")
    for name, peer, ours in rows:
        print(f"{name:22} {peer * 1000:20.1f}ms {ours * 1000:18.1f}ms {peer / ours:5.1f}x")


if __name__ == "__main__":
    main()
