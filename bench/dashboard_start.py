"""Start time and memory of `tune-rl dashboard` against MLflow's default `mlflow server`, same store.

For each: the time from launch to the first HTTP 200 on /health, then to the UI's first page
(/) and one search API call; the peak RSS summed over the whole process tree (sampled every
0.1 s, until 3 s after the first page); then a SIGINT, how long the tree takes to be gone,
and the exit status.

    .venv/bin/python bench/dashboard_start.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree(pid: int) -> list[int]:
    """pid and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def measure(name: str, cmd: list[str], env: dict[str, str], port: int) -> dict:
    base = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    peak, up, page, pids = 0.0, None, None, [proc.pid]
    while time.monotonic() - start < 180:
        pids = tree(proc.pid)
        peak = max(peak, rss_mb(pids))
        if up is None and get(f"{base}/health"):
            up = time.monotonic() - start
        if up is not None and page is None:
            if get(f"{base}/") and get(f"{base}/ajax-api/2.0/mlflow/experiments/search?max_results=10"):
                page = time.monotonic() - start
        if page is not None and time.monotonic() - start > page + 3:
            break
        time.sleep(0.1)
    processes = len(pids)
    stopping = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        status = proc.wait(60)
    except subprocess.TimeoutExpired:
        status = "hung"
    while tree(proc.pid)[1:] or any(Path(f"/proc/{p}").exists() for p in pids if p != proc.pid):
        if time.monotonic() - stopping > 60:
            break
        time.sleep(0.1)
    gone = time.monotonic() - stopping
    left = [p for p in pids if Path(f"/proc/{p}").exists()]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return {"name": name, "up": up, "page": page, "peak": peak, "processes": processes, "status": status,
            "gone": gone, "left": len(left)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TUNE_RL_HOME": home, "PYTHONPATH": str(ROOT)}
        db = f"sqlite:///{home}/mlflow.db"
        subprocess.run([sys.executable, "-c", f"import mlflow; mlflow.MlflowClient('{db}').search_experiments()"],
                       env=env, check=True, capture_output=True)  # the schema exists before either starts
        for _ in range(args.rounds):
            port = free_port()
            results.append(measure("tune-rl dashboard", [sys.executable, "-m", "tune_runner", "dashboard",
                                                         "--port", str(port)], env, port))
            port = free_port()
            results.append(measure("mlflow server (defaults)", [sys.executable, "-m", "mlflow", "server",
                                   "--backend-store-uri", db, "--port", str(port)], env, port))
    print(f"{'':26} {'to /health':>10} {'to UI page':>10} {'peak RSS':>9} {'procs':>5} {'exit':>5} {'gone in':>8}")
    for r in results:
        print(f"{r['name']:26} {r['up'] or float('nan'):9.1f}s {r['page'] or float('nan'):9.1f}s "
              f"{r['peak']:7.0f}MB {r['processes']:5d} {r['status']!s:>5} {r['gone']:7.1f}s"
              + (f"  {r['left']} left, killed" if r["left"] else ""))
    ours = [r for r in results if r["name"].startswith("tune-rl")]
    peer = [r for r in results if not r["name"].startswith("tune-rl")]
    up, peak = (statistics.median(r[key] for r in ours) / statistics.median(r[key] for r in peer)
                for key in ("up", "peak"))
    print(f"ratio (medians): start {up:.2f}x the default's time, {peak:.2f}x its memory")


if __name__ == "__main__":
    main()
