"""The tracking store goes away under a search (issue 46), on a real local Ray and a real `mlflow server`: it is
killed with SIGKILL while the trials train and comes back only after the search has ended. The search trains on,
ends with exit 0 and one line that says the store was away and how to write what waited; `tune-rl sync` as
printed writes it, and then MLflow holds exactly what the search's folder holds: every trial's params and every
metric point of its curve. (A store that comes back while the search runs: tests/test_spool.py.)"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.mlflow_helpers import free_port, mlflow_server, stop_tree, subprocess_env, wait_http
from tests.test_resilience_e2e import wait_for
from tune_runner.paths import SPOOL_FILE

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("ray")]


def folder_curves(exp) -> dict[str, tuple[dict, list[tuple[int, float]]]]:
    """Per trial, from its folder: its searched values and its episode_return_mean at each env step."""
    out = {}
    for trial in (p for p in exp.iterdir() if (p / "result.json").is_file()):
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]
        config = rows[0]["config"]
        out[rows[0]["trial_id"]] = ({"x": str(config["x"])},
                                    [(int(r["env_steps"]), float(r["episode_return_mean"])) for r in rows])
    return out


def store_curves(uri: str, experiment: str) -> dict[str, tuple[dict, list[tuple[int, float]]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=1000)
    parent, = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FINISHED", parent.info.status
    out = {}
    for run in (r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id):
        assert run.info.status == "FINISHED", (run.info.run_name, run.info.status)
        points = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "episode_return_mean"))
        out[run.data.tags["tune_rl.trial_id"]] = ({"x": run.data.params["x"]}, points)
    return out


@pytest.mark.timeout(300)
def test_a_store_killed_mid_search_loses_nothing_the_search_ends_and_sync_writes_the_rest(ray_session, tmp_path):
    home, port = tmp_path / "home", free_port()
    backend, url = f"sqlite:///{tmp_path / 'server.db'}", f"http://127.0.0.1:{port}"
    server = mlflow_server(backend=backend, artifacts=tmp_path / "artifacts", port=port, log=tmp_path / "s1.log")
    wait_http(f"{url}/health", proc=server)
    space = tmp_path / "outage.yaml"
    space.write_text(yaml.safe_dump({
        "trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 12000}, "searcher": "random",
        "num_samples": 3, "max_concurrent": 1, "reevaluate": False,
        "fixed": {"optimum": {"lr": 1e-3, "x": 0.5}, "lr": 1e-3, "sleep_s": 0.4, "steps_per_iteration": 1000},
        "space": {"x": {"uniform": [0.0, 1.0]}}}))
    env = {**subprocess_env(TUNE_RL_HOME=str(home)), "PYTHONUNBUFFERED": "1", "PYTHONPATH": ""}
    driver = subprocess.Popen([sys.executable, "-m", "tune_runner", "search", "--space", str(space), "--name",
                               "outage", "--mlflow-uri", url, "--num-cpus", "2"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        seen = wait_for(driver, "25%")  # the first trial has reported: its run exists in the store
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        out, _ = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            stop_tree(driver)
    out = "".join(seen) + out
    assert driver.returncode == 0, out
    assert "mlflow     the store has been unreachable since" in out, out
    exp = home / "results" / "outage"
    assert (exp / SPOOL_FILE).is_file()
    sync_line = out.split("write them with: ", 1)[1].splitlines()[0].strip()
    assert sync_line == f"tune-rl sync outage --storage {home / 'results'}" or sync_line == "tune-rl sync outage"

    server = mlflow_server(backend=backend, artifacts=tmp_path / "artifacts", port=port, log=tmp_path / "s2.log")
    try:
        wait_http(f"{url}/health", proc=server)
        words = shlex.split(sync_line)
        assert words[:2] == ["tune-rl", "sync"]
        done = subprocess.run([sys.executable, "-m", "tune_runner", *words[1:]], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "MLflow call(s) of outage written to" in done.stdout and not (exp / SPOOL_FILE).exists()
        held, kept = store_curves(url, "outage"), folder_curves(exp)
        assert len(kept) == 3 and held == kept
        again = subprocess.run([sys.executable, "-m", "tune_runner", *words[1:]], env=env, capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 0 and "nothing to write" in again.stdout
    finally:
        stop_tree(server)
        time.sleep(0.1)
