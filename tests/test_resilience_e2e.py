"""Resilience against real processes and real signals: Ctrl-C, kill -9 of the driver, resume, failing and
diverging trials. The driver runs as a subprocess (its own local Ray) where a signal is the point."""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tune_runner.cluster.reaper import alive, descendants, marked, started

pytestmark = pytest.mark.e2e

BUDGET, STEP = 24_000, 1_000


def slow_oracle(path: Path, *, trials: int = 3, sleep_s: float = 0.25, **fixed) -> Path:
    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": BUDGET},
           "searcher": {"name": "random", "seed": 1}, "scheduler": "fifo", "num_samples": trials,
           "reevaluate": False,
           "fixed": {"optimum": {"x": 0.5}, "steps_per_iteration": STEP, "sleep_s": sleep_s, **fixed},
           "space": {"x": {"uniform": [0.0, 1.0]}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def start_driver(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TUNE_RL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "tune_runner", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_for(proc: subprocess.Popen, text: str, *, timeout: float = 120) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"never printed {text!r}:\n{''.join(lines)}")


def steps_by_trial(exp: Path) -> dict[str, list[int]]:
    out = {}
    for progress in exp.glob("*/progress.csv"):
        with progress.open() as f:
            out[progress.parent.name] = [int(float(row["env_steps"])) for row in csv.DictReader(f)]
    return out


def assert_finished_without_restarts(exp: Path, trials: int) -> dict[str, int]:
    """Every trial ran its whole budget; none went back to its first step after the resume. Returns the
    env steps each trial re-ran (its lost progress)."""
    from ray.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis(str(exp))
    assert len(analysis.trials) == trials and {t.status for t in analysis.trials} == {"TERMINATED"}
    lost = {}
    for name, steps in steps_by_trial(exp).items():
        assert steps[-1] == BUDGET, (name, steps)
        assert steps.count(STEP) == 1, (name, steps)  # never restarted from zero
        back = [a - b + STEP for a, b in zip(steps, steps[1:], strict=False) if b <= a]
        lost[name] = max(back, default=0)
    return lost


def mlflow_run_count(home: Path, experiment: str, *, uri: str | None = None) -> tuple[int, int]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri or f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return len(parents), len(runs) - len(parents)


def test_ctrl_c_saves_exits_130_and_resume_finishes_without_redoing_work(ray_session, cli, _isolated_home, tmp_path):
    """Started with a non-default --mlflow-uri: the printed command, which does not repeat it, continues the
    same parent run in that store (the run options are saved with the search)."""
    space = slow_oracle(tmp_path / "s.yaml")
    store = f"sqlite:///{tmp_path / 'team' / 'mlflow.db'}"
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "cc", "--num-cpus", "2",
                        "--mlflow-uri", store)
    wait_for(proc, "50%")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Continue it with:\n  tune-rl resume cc\n" in out
    deadline = time.monotonic() + 15
    while marked(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not marked(proc.pid)  # the driver's Ray is gone
    started = time.monotonic()
    result = cli("resume", "cc")
    print(f"\nresume after Ctrl-C: {time.monotonic() - started:.1f} s")
    assert result.status == 0, result.out + result.err
    assert "resuming:" in result.out
    lost = assert_finished_without_restarts(_isolated_home / "results" / "cc", 3)
    print(f"env steps re-run per trial after Ctrl-C: {lost}")
    assert max(lost.values()) <= 5 * STEP + STEP  # at most one checkpoint interval (5 iterations)
    assert mlflow_run_count(_isolated_home, "s", uri=store) == (1, 3)  # continued, not duplicated
    assert not (_isolated_home / "mlflow.db").exists()  # nothing went to the default store
    again = cli("resume", "cc")
    assert again.status == 0 and "finished already" in again.out


def test_a_second_ctrl_c_stops_at_once_and_the_search_still_resumes(ray_session, cli, _isolated_home, tmp_path,
                                                                     monkeypatch):
    """With a URI --storage; the printed command, run with another TUNE_RL_HOME (as on another machine: no local
    copy, other default stores), fetches the saved state from the URI and continues the same MLflow runs."""
    space = slow_oracle(tmp_path / "d.yaml", trials=2)
    bucket = (tmp_path / "bucket").as_uri()
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "cc2", "--num-cpus", "2",
                        "--storage", bucket)
    wait_for(proc, "25%")
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:  # a user hammering Ctrl-C, exit hooks included
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    printed = re.findall(r"(tune-rl resume .*)$", out, re.MULTILINE)[-1]
    assert printed == f"tune-rl resume cc2 --storage {bucket}", out
    elsewhere = tmp_path / "another-home"
    monkeypatch.setenv("TUNE_RL_HOME", str(elsewhere))
    result = cli(*shlex.split(printed)[1:])
    assert result.status == 0, result.out + result.err
    assert "resuming: " in result.out
    assert_finished_without_restarts(elsewhere / "results" / "cc2", 2)
    assert mlflow_run_count(_isolated_home, "d") == (1, 2)
    assert not (elsewhere / "mlflow.db").exists()


def test_kill_9_of_the_driver_leaves_no_ray_process_and_resume_finishes(ray_session, cli, _isolated_home, tmp_path):
    space = slow_oracle(tmp_path / "k.yaml")
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "kk", "--num-cpus", "2")
    wait_for(proc, "25%")
    before = ray_processes(proc.pid)
    assert len(before) >= 5, before  # GCS, raylet, the dashboard and runtime-env agents, workers...
    proc.kill()  # SIGKILL to the driver only, as `kill -9 PID` does
    proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while still_running(before) and time.monotonic() < deadline:
        time.sleep(0.5)
    stray = still_running(before)
    print(f"\nRay processes of the killed driver: {len(before)} before, {len(stray)} left after the reaper")
    assert stray == [] and marked(proc.pid) == []
    result = cli("resume", "kk")
    assert result.status == 0, result.out + result.err
    lost = assert_finished_without_restarts(_isolated_home / "results" / "kk", 3)
    print(f"env steps re-run per trial after kill -9: {lost}")
    assert mlflow_run_count(_isolated_home, "k") == (1, 3)


def test_a_trial_that_fails_once_is_retried_from_its_checkpoint(ray_session, cli, _isolated_home, tmp_path):
    space = slow_oracle(tmp_path / "f.yaml", trials=2, sleep_s=0.0, fail_at=12_000, fail_once=True)
    result = cli("search", "--space", str(space), "--name", "flaky")
    assert result.status == 0, result.out + result.err
    assert "errored" not in result.out.split("trials", 1)[-1].splitlines()[0]
    assert_finished_without_restarts(_isolated_home / "results" / "flaky", 2)


def test_a_trial_that_keeps_failing_is_errored_everywhere_and_the_search_finishes(ray_session, cli, _isolated_home,
                                                                                 tmp_path):
    from mlflow.tracking import MlflowClient

    space = slow_oracle(tmp_path / "e.yaml", trials=2, sleep_s=0.0, fail_at=12_000)
    result = cli("search", "--space", str(space), "--name", "broken", "--max-failures", "1")
    assert result.status == 3, result.out + result.err  # every trial failed
    assert "ERROR" in result.out and "errors     2 trial(s) errored; most common (2x): " in result.out
    assert "Traceback" not in result.out + result.err  # one line per failure, not Tune's stack traces
    assert "injected failure at 12,000 env steps" in result.out
    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("e").experiment_id],
                              filter_string="tags.`tune_rl.status` = 'errored'")
    assert len(runs) == 2 and all("injected failure" in r.data.tags["tune_rl.error"] for r in runs)


def test_the_console_script_leaves_with_the_searchs_status_its_output_and_no_ray_behind(_isolated_home, tmp_path):
    """`tune-rl search` in its own process ends without Python's teardown once it has ended its local Ray itself
    (cli.main.leave, cluster.end_local_ray): the exit status is still the search's, every line of its summary is
    out, nothing of Ray's is printed after it, and no Ray process remains, with the reaper paused (SIGSTOP) so
    that only the driver can have ended them."""
    space = slow_oracle(tmp_path / "x.yaml", trials=2, sleep_s=0.0, fail_at=12_000)
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "leaves", "--num-cpus", "2",
                        "--max-failures", "0")
    reaper = None
    while reaper is None and proc.poll() is None:
        reaper = _reaper_of(proc.pid)
        time.sleep(0.05)
    assert reaper is not None, "the search ended before its reaper was seen"
    os.kill(reaper, signal.SIGSTOP)
    try:
        seen: dict[int, str | None] = {}
        while proc.poll() is None:  # every Ray process the driver had, agents included
            seen.update(ray_processes(proc.pid))
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=300)
        assert len(seen) >= 4, seen
        deadline = time.monotonic() + 5
        while (still_running(seen) or marked(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert still_running(seen) == [] and marked(proc.pid) == []  # ended by the driver: its reaper was paused
    finally:
        os.kill(reaper, signal.SIGCONT)  # it reaps whatever the driver left, and exits
    assert proc.returncode == 3, out  # every trial failed: not 0 from a hurried exit
    assert out.rstrip().splitlines()[-1].startswith("exported "), out[-2000:]  # the summary's last line, flushed
    assert (_isolated_home / "results" / "leaves" / "tune_rl_finished.json").is_file()


def ray_processes(driver: int) -> dict[int, str | None]:
    """The driver's Ray processes now (its descendants and the marked ones, never its reaper), each with the moment
    it started: a pid alone could be a later, unrelated process by the time it is checked again."""
    return {pid: started(pid) for pid in {*descendants(driver), *marked(driver)}}


def still_running(processes: dict[int, str | None]) -> list[int]:
    """Those of `processes` that are still the same, living processes (not zombies)."""
    return [pid for pid, start in processes.items() if start is not None and started(pid) == start and alive(pid)]


def _reaper_of(driver: int) -> int | None:
    """The pid of the reaper that watches `driver` (python -m tune_runner.cluster.reaper DRIVER), if running."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tune_runner.cluster.reaper" in args and str(driver).encode() in args:
                return int(entry.name)
    return None


def test_nan_in_a_loss_stops_the_trial_as_errored_with_the_reason(ray_session, cli, _isolated_home, tmp_path):
    space = slow_oracle(tmp_path / "n.yaml", trials=2, sleep_s=0.0, nan_at=5_000)
    result = cli("search", "--space", str(space), "--name", "nan", "--max-failures", "0")
    assert result.status == 3
    assert "policy_loss is nan at 5,000 env steps" in result.out


def test_losing_a_worker_node_reschedules_its_trials_from_checkpoints(_isolated_home, tmp_path):
    """A real two-node Ray cluster (ray.cluster_utils.Cluster: two raylets on this machine); the worker
    node is really removed mid-search. Runs in its own process: it needs its own Ray cluster."""
    import json

    from ray.tune import ExperimentAnalysis

    space = slow_oracle(tmp_path / "n.yaml", trials=3, sleep_s=0.25)
    env = {**os.environ, "TUNE_RL_HOME": str(_isolated_home), "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "node_loss_driver.py"), str(_isolated_home),
                           str(space)], env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["trials_on_worker_before"] >= 1, report
    assert report["status"] == 0 and report["counts"] == {"done": 3}, report
    exp = _isolated_home / "results" / "node-loss"
    trials = ExperimentAnalysis(str(exp)).trials
    assert all(t.last_result["node_id"] != report["worker_id"] for t in trials)  # all ended on the head
    lost = assert_finished_without_restarts(exp, 3)
    print(f"\nnode loss: trials on the worker before: {report['trials_on_worker_before']}; env steps re-run: {lost}")


def test_a_killed_gcs_ends_the_search_at_once_with_the_command_that_continues_it(ray_session, cli, _isolated_home,
                                                                                  tmp_path):
    """SIGKILL to the local Ray's GCS under a search (as the OOM killer might): Ray's driver would wait 60 s and
    exit 1 with its own C++ log line. The driver says at once which part of Ray died and how to continue, exits 1,
    leaves no Ray process, and that command, run as printed, finishes the search."""

    space = slow_oracle(tmp_path / "g.yaml")
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "kg", "--num-cpus", "2")
    seen = wait_for(proc, "25%")
    before = ray_processes(proc.pid)
    gcs = [pid for pid in before if b"gcs_server" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(gcs) == 1, before
    killed = time.monotonic()
    os.kill(gcs[0], signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - killed
    lines = [line for line in out.splitlines() if line.strip()]
    assert proc.returncode == 1 and took < 10, (proc.returncode, took, "".join(seen) + out)
    assert lines[-1].startswith("tune-rl: Ray's GCS (its state of the cluster) died under the search"), lines[-3:]
    hint = lines[-1].split("continue it with: ", 1)[1]
    deadline = time.monotonic() + 20
    while still_running(before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert still_running(before) == []
    words = shlex.split(hint)
    assert words[:3] == ["tune-rl", "resume", "kg"], hint
    result = cli(*words[1:])
    assert result.status == 0, result.out + result.err
    assert_finished_without_restarts(_isolated_home / "results" / "kg", 3)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 8 MB, as a results folder that fills (mounting needs root: skipped without it)."""
    folder = Path(tempfile.mkdtemp(prefix="tune-rl-full-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()[:100]}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


# Filled to its last block instead, the search usually stops the same way, but not always: Ray's syncer copies Tune's
# state from its staging folder into the results folder, and that copy can be cut short (CI, 2026-11-28, under load).
# Not fixed yet: see the fault table in bench/README.md.
@pytest.mark.parametrize("left", [2**20], ids=["1MB-left"])
def test_a_results_folder_that_fills_stops_the_search_with_what_to_free_and_resume_finishes_it(
        ray_session, cli, _isolated_home, tmp_path, small_disk, left):
    """The results folder (a tmpfs) is filled by another file while the search trains, to 1 MB free: the search
    stops at once, in one line naming the folder, its free space and what the search needs, and the command that
    continues it; no file of the search is left cut short (every JSON, YAML and pickle reads back); once the file
    is deleted, that command, as printed, finishes the search."""
    import json
    import pickle

    storage = small_disk / "results"
    space = slow_oracle(tmp_path / "d.yaml")
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "dd", "--storage", str(storage),
                        "--num-cpus", "2")
    seen = wait_for(proc, "25%")
    filler = small_disk / "filler"
    free = shutil.disk_usage(small_disk).free
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        f.write(b"\0" * (free - left))
        while not left:  # to the last block: the next checkpoint or state the search writes finds no space
            f.write(b"\0" * 4096)
    out, _ = proc.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.strip()]
    assert proc.returncode == 1, "".join(seen) + out
    said = next(line for line in lines if line.startswith("tune-rl: "))
    assert said.startswith(f"tune-rl: {storage / 'dd'}: ") and " free, the search needs about " in said, said
    exp = storage / "dd"
    for path in exp.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml", ".pkl"):
            data = path.read_bytes()
            try:
                if path.suffix == ".pkl" or data[:1] == b"\x80":  # Tune's basic-variant-state-*.json is a pickle
                    pickle.loads(data)  # noqa: S301 - the search's own files
                elif path.suffix == ".json" and path.name != "result.json":
                    json.loads(data)
                elif path.suffix == ".yaml":
                    yaml.safe_load(data)
            except Exception as exc:
                raise AssertionError(f"{path} ({len(data)} bytes) does not read back: {exc!r}") from None
    filler.unlink()
    words = shlex.split(said.split("then run: ", 1)[1])
    assert words[:3] == ["tune-rl", "resume", "dd"], said
    result = cli(*words[1:])
    assert result.status == 0, result.out + result.err
    assert_finished_without_restarts(exp, 3)


def test_a_running_search_refuses_a_second_process_that_resumes_it(ray_session, cli, _isolated_home, tmp_path):
    """`tune-rl resume NAME` while another process runs that search: one line naming that process, exit 2, and the
    search itself finishes untouched."""
    space = slow_oracle(tmp_path / "r.yaml")
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "rr", "--num-cpus", "2")
    try:
        wait_for(proc, "25%")
        second = cli("resume", "rr")
        assert second.status == 2 and second.out == "", second.out + second.err
        assert second.err.strip() == (f"tune-rl: rr: another tune-rl process (pid {proc.pid}) is running this search "
                                      f"now; wait for it to end, or stop it, then run this again"), second.err
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert_finished_without_restarts(_isolated_home / "results" / "rr", 3)


def test_two_searches_on_the_default_store_at_once_both_finish_complete(ray_session, _isolated_home, tmp_path):
    """Two drivers, each with its local Ray, logging to the one default SQLite store at once: both finish, and the
    store holds each one's parent run and its every trial's run with its whole curve."""
    from mlflow.tracking import MlflowClient

    procs = [start_driver(_isolated_home, "search", "--space", str(slow_oracle(tmp_path / f"{name}.yaml")), "--name",
                          name, "--num-cpus", "1") for name in ("two-a", "two-b")]
    outs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    for name in ("two-a", "two-b"):
        exp = _isolated_home / "results" / name
        runs = client.search_runs([client.get_experiment_by_name(name).experiment_id], max_results=100)
        children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
        assert len(runs) == 4 and len(children) == 3 and {r.info.status for r in runs} == {"FINISHED"}
        for run in children:
            history = client.get_metric_history(run.info.run_id, "episode_return_mean")
            assert sorted(m.step for m in history) == steps_by_trial_id(exp)[run.data.tags["tune_rl.trial_id"]]


def steps_by_trial_id(exp: Path) -> dict[str, list[int]]:
    """Per trial id, the env steps of its results (result.json)."""
    import json

    out = {}
    for trial in (p for p in exp.iterdir() if (p / "result.json").is_file()):
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]
        out[rows[0]["trial_id"]] = sorted(int(r["env_steps"]) for r in rows)
    return out
