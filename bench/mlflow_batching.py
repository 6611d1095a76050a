"""Batched vs per-metric MLflow logging, on a real SQLite store and over HTTP to a real
`mlflow server` (one worker, on its own SQLite store), in one process.

The peer is what Ray's stock MLflowLoggerCallback does: one `log_metric` request per
metric per result. tune-rl sent one `log_batch` per result until issue 16; its callback
(MlflowTracking) now gathers each trial's results and hands them to a writer thread once a
second. Prints, per result: the time of each way, the time Tune's loop spends in
MlflowTracking's hook (what a trial waits for between iterations), and MlflowTracking's time
until every result has landed; the ratios are to the per-metric peer.

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


def tracked(uri: str, exp: str, parent: str, results: int) -> tuple[float, float]:
    """MlflowTracking fed `results` results of one trial, as Tune's loop would, one every 20 ms (an
    iteration of our PPO): (seconds in its hooks, seconds until every result has landed)."""
    from types import SimpleNamespace

    from tune_runner.tracking.callback import MlflowTracking

    trial = SimpleNamespace(trial_id="bench_00000", config={}, last_result={}, error_file=None, error_msg="")
    callback = MlflowTracking(uri=uri, experiment_id=exp, parent_run_id=parent, logged_keys=(), ending=str)
    callback.on_trial_start(0, [trial], trial)
    in_hooks, start = 0.0, time.perf_counter()
    for i in range(results):
        began = time.perf_counter()
        callback.on_trial_result(0, [trial], trial, {**RESULT, "env_steps": i * 4000})
        callback.on_step_end(0, [trial])
        in_hooks += time.perf_counter() - began
        time.sleep(0.02)
    callback.on_experiment_end([trial])
    return in_hooks, time.perf_counter() - start - 0.02 * results


def measure(uri: str, results: int) -> tuple[float, float, float, float]:
    """(per-metric, one log_batch per result, MlflowTracking's hooks, MlflowTracking to the last write)
    seconds per result on the store at `uri`."""
    mlflow = client(uri)
    exp = experiment_id(mlflow, "bench", uri)
    peer_run = mlflow.create_run(exp).info.run_id
    batch_run = mlflow.create_run(exp).info.run_id
    batched(mlflow, batch_run, 1)  # warm up the store once for all
    peer, batch = per_metric(mlflow, peer_run, results), batched(mlflow, batch_run, results)
    hooks, landed = tracked(uri, exp, mlflow.create_run(exp).info.run_id, results)
    return peer / results, batch / results, hooks / results, landed / results


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
    parser.add_argument("--results", type=int, default=100)
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
    print(f"{args.results} results x {len(RESULT)} metrics; ms per result")
    print(f"{'store':22} {'per-metric (Ray stock)':>22} {'log_batch each':>16} {'MlflowTracking in loop':>24} "
          f"{'to last write':>14}")
    for name, peer, batch, hooks, landed in rows:
        print(f"{name:22} {peer * 1000:20.1f}ms {batch * 1000:11.1f}ms {peer / batch:3.0f}x "
              f"{hooks * 1000:17.2f}ms {peer / hooks:4.0f}x {landed * 1000:12.1f}ms")


if __name__ == "__main__":
    main()
