"""GPUs per trial. CI has no GPU: these tests use LOGICAL GPUs (a local Ray that declares num_gpus on a
machine without one), which is what Ray's scheduling and CUDA_VISIBLE_DEVICES see; a real-GPU check
runs only where CUDA is available."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.e2e


def oracle_space(path, *, trials: int, sleep_s: float, env_steps: int = 8000):
    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": env_steps}, "searcher": "random",
           "scheduler": "fifo", "num_samples": trials, "reevaluate": False,
           "fixed": {"optimum": {"x": 0.5}, "sleep_s": sleep_s}, "space": {"x": {"uniform": [0.0, 1.0]}}}
    path.write_text(yaml.safe_dump(raw))
    return path


def test_logical_gpus_four_quarter_gpu_trials_share_one_gpu_at_once(_isolated_home, tmp_path):
    # Each trial lasts ~10 s: on 2 loaded cores (a CI run) Ray's worker processes came up ~5 s apart,
    # and a 3 s trial had ended before the other three began.
    space = oracle_space(tmp_path / "g.yaml", trials=4, sleep_s=1.0, env_steps=10_000)
    env = {**os.environ, "TUNE_RL_HOME": str(_isolated_home)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, "-m", "tune_runner", "search", "--space", str(space), "--name", "quarters",
                           "--num-cpus", "4", "--num-gpus", "1", "--gpus-per-trial", "0.25", "--cpus-per-trial", "0.5"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    spans, seen = [], set()
    for result_file in (_isolated_home / "results" / "quarters").glob("*/result.json"):
        rows = [json.loads(line) for line in result_file.read_text().splitlines() if line.strip()]
        assert rows and all(r["gpu_ids"] == "0" and r["cuda_visible_devices"] == "0" for r in rows)
        spans.append((rows[0]["timestamp"] - rows[0]["time_this_iter_s"], rows[-1]["timestamp"]))
        seen.add(rows[0]["trial_id"])
    assert len(seen) == 4
    latest_start, earliest_end = max(s for s, _ in spans), min(e for _, e in spans)
    assert latest_start < earliest_end, spans  # all four ran at the same time on the one GPU


def test_gpus_per_trial_beyond_the_cluster_is_refused_before_launch(ray_session, cli, _isolated_home, tmp_path):
    space = oracle_space(tmp_path / "g.yaml", trials=1, sleep_s=0.0)
    result = cli("search", "--space", str(space), "--name", "no-gpu", "--gpus-per-trial", "0.5")
    assert result.status == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "asks for 1 CPU, 0.5 GPU" in result.err and "the Ray cluster has 2 CPU, 0 GPU" in result.err
    assert not (_isolated_home / "results" / "no-gpu").exists()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a real NVIDIA GPU (CI has none)")
def test_on_a_real_gpu_our_ppo_trains_on_cuda(_isolated_home):
    # In a fresh process: its own Ray finds the GPU (the suite's shared Ray hides it).
    env = {**os.environ, "TUNE_RL_HOME": str(_isolated_home)}
    proc = subprocess.run([sys.executable, "-m", "tune_runner", "search", "--space", "ppo_small", "--name", "cuda",
                           "--no-reevaluate", "--num-samples", "1", "--scheduler", "fifo", "--set", "budget=4096",
                           "--gpus-per-trial", "0.25"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result_file,) = (_isolated_home / "results" / "cuda").glob("*/result.json")
    rows = [json.loads(line) for line in result_file.read_text().splitlines() if line.strip()]
    assert {r["device"] for r in rows} == {"cuda"}
