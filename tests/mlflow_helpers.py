"""Helpers for the MLflow tests: servers as real subprocesses, process trees, and a search's
MLflow records written by tune-rl's own logging code from synthetic trials (no Ray).

The synthetic search goes through the same functions a real one does (parent.open_run,
tracking.MlflowTracking's hooks, report.write, parent.log_outcome), fed with the trial
objects and progress tables that Ray Tune would hand them, so the dashboard and the stores can
be tested in seconds; the e2e tests check the same records after real searches.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CREDENTIAL_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")

# Loads a model with tune_runner made unimportable, as a caller without tune-rl would.
LOAD_WITHOUT_TUNE_RL = """
import sys
class NoTuneRl:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tune_runner":
            raise ImportError("tune_runner is not installed here")
sys.meta_path.insert(0, NoTuneRl())
import numpy as np, mlflow
mlflow.set_tracking_uri(sys.argv[1])
obs = np.load(sys.argv[2])
for i, uri in enumerate(sys.argv[3:]):
    np.save(f"actions{i}.npy", mlflow.pyfunc.load_model(uri).predict(obs))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a `python -m tune_runner` / `-m mlflow` child: this checkout first on
    sys.path (an editable install may point elsewhere), one thread per library."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}
    return env


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc)."""
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
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def running(pids: list[int]) -> list[int]:
    """Those of `pids` still running (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def wait_http(url: str, *, proc: subprocess.Popen | None = None, timeout: float = 180.0) -> None:
    """Until `url` answers 200 (or `proc` exits, or the time is up: AssertionError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args[:4]} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout:.0f} s")


def stop_tree(proc: subprocess.Popen, *, sig: int = signal.SIGINT, timeout: float = 30.0) -> list[int]:
    """Signal `proc`, wait, kill what is left of its tree; the pids that were still running."""
    pids = process_tree(proc.pid)
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 5
    while running(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = running(pids)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    return left


def mlflow_server(*, backend: str, artifacts: Path, port: int, log: Path) -> subprocess.Popen:
    """A real `mlflow server` (one worker, no job consumers) in its own process group."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend, "--artifacts-destination",
           str(artifacts), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=subprocess_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


class Postgres:
    """A throwaway PostgreSQL cluster on a free loopback port, password-protected (scram).

    PostgreSQL refuses to run as root: as root, its folder goes to the `postgres` user and every
    server command runs through `runuser -u postgres`. It lives in its own folder under /tmp,
    since pytest's tmp folders are root-only (0700) and the postgres user cannot enter them.
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tune-rl-pg-"))
        self.data, self.port, self.password = self.root / "data", free_port(), secrets.token_hex(12)
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            import pwd

            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.uri = f"postgresql://tune:{self.password}@127.0.0.1:{self.port}/mlflow"

    def start(self) -> Postgres:
        password_file = self.root / "password"
        password_file.write_text(self.password)
        if self.as_user:
            shutil.chown(password_file, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "tune", "--pwfile", str(password_file),
                  "--auth=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w", "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tune", "mlflow")
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run([*self.as_user, postgres_binary(program), *args], capture_output=True, text=True,
                              env={**os.environ, "PGPASSWORD": self.password}, timeout=120)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-1500:] if log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()[-1500:]}\n{tail}")


def postgres_binary(name: str) -> str:
    """A PostgreSQL program: on PATH, or in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                       None)
    if found is None:
        raise FileNotFoundError(f"PostgreSQL's {name} is not installed (apt-get install -y postgresql)")
    return found


# ---- checkpoints of our learners, written as OwnTrainable writes them ----------------------------------

LEARNER_CONFIGS = {
    "ppo": {"env": "CartPole-v1", "num_envs_per_env_runner": 4, "train_batch_size": 256, "fcnet_hiddens": [16, 16],
            "fcnet_activation": "relu"},
    "dqn": {"env": "CartPole-v1", "num_envs_per_env_runner": 4, "train_batch_size": 256, "fcnet_hiddens": [16, 8],
            "dueling": True, "num_steps_sampled_before_learning_starts": 64},
}


def trained_checkpoint(name: str, trial: Path) -> tuple[object, dict]:
    """A learner after one iteration, checkpointed as OwnTrainable does, among older checkpoints."""
    from tune_runner.trainables import checkpoints
    from tune_runner.trainables.agents import build_learner

    config = LEARNER_CONFIGS[name]
    learner = build_learner(name, config)
    learner.train_iteration()
    for index in (1, 12, 3):  # numbered, not sorted by name or creation order
        (trial / f"checkpoint_{index:06d}").mkdir(parents=True)
    checkpoints.write(trial / "checkpoint_000012", learner=learner.get_state(), runners=None)
    return learner, config



# ---- a search's MLflow records, from synthetic trials ----------------------------------------------


class FakeAnalysis:
    """What report.write reads of an ExperimentAnalysis: trials and their progress tables."""

    def __init__(self, trials: list[Any], frames: dict[str, Any]) -> None:
        self.trials, self.trial_dataframes = trials, frames


def synthetic_trials(spec: Any, *, count: int = 3, stop_early: tuple[int, ...] = (0,)) -> tuple[list, dict]:
    """`count` trials of `spec`: trial i's return rises to 100 * (i + 1); those in `stop_early`
    end at half the budget, as ASHA would stop them."""
    import pandas as pd

    step = spec.budget_env_steps // 10
    trials, frames = [], {}
    for i in range(count):
        trial_id = f"fake_{i:05d}"
        last_step = spec.budget_env_steps // 2 if i in stop_early else spec.budget_env_steps
        rows = [{"env_steps": s, "episode_return_mean": 100.0 * (i + 1) * s / spec.budget_env_steps,
                 "training_iteration": k + 1, "time_total_s": 0.1 * (k + 1), "sps": 10000.0}
                for k, s in enumerate(range(step, last_step + 1, step))]
        config = {"lr": 10.0 ** -(i + 2), "x": 0.1 * i, "activation": "tanh", "env": spec.env,
                  **spec.fixed}
        trials.append(SimpleNamespace(trial_id=trial_id, config=config, status="TERMINATED", last_result=rows[-1],
                                      error_file=None, error_msg="", path=f"/nowhere/{trial_id}"))
        frames[trial_id] = pd.DataFrame(rows)
    return trials, frames


def log_synthetic_search(uri: str, *, name: str, folder: Path, count: int = 3) -> dict[str, Any]:
    """A finished oracle search's MLflow records, written by tune-rl's logging code; what it wrote."""
    from tune_runner.results import analysis
    from tune_runner.results import summary as report
    from tune_runner.spec.experiment import load_spec
    from tune_runner.tracking import callback as tracking
    from tune_runner.tracking import parent as parent_run
    from tune_runner.tuning import runner

    spec = load_spec("oracle", overrides=["budget=5000"])
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, spec.name, uri)
    folder.mkdir(parents=True, exist_ok=True)
    parent = parent_run.open_run(client, exp_id, spec, name=name, exp_path=folder)
    callback = tracking.MlflowTracking(uri=uri, experiment_id=exp_id, parent_run_id=parent,
                                       logged_keys=tuple(spec.fixed) + spec.searched, ending=spec.ending)
    trials, frames = synthetic_trials(spec, count=count)
    for trial in trials:
        callback.on_trial_start(0, trials, trial)
    for trial in trials:
        for row in frames[trial.trial_id].to_dict("records"):
            callback.on_trial_result(0, trials, trial, row)
        callback.on_trial_complete(0, trials, trial)
    callback.on_experiment_end(trials)  # as Tune does before it returns: every write has landed
    fake = FakeAnalysis(trials, frames)
    top = max(trials, key=lambda t: t.last_result["episode_return_mean"])
    best = analysis.Best(trial_id=top.trial_id, config=top.config, value=top.last_result["episode_return_mean"],
                         metric=spec.metric, mode=spec.mode, scope="last", last_result=top.last_result,
                         trial_path=top.path)
    from tune_runner.results import export
    from tune_runner.trainables.catalog import backend

    export_path = export.bundle(spec, best, record=backend(spec.trainable), experiment=name).write(
        folder / "best.yaml")
    written = report.write(fake, spec, folder=folder, title=name)
    counts = Counter(spec.ending(t.last_result).replace("_", " ") for t in trials)
    outcome = runner.Outcome(folder, best, export_path, counts, 1.0, None, report=tuple(written))
    parent_run.log_outcome(client, parent, spec=spec, outcome=outcome)
    parent_run.close(client, parent, status="FINISHED")
    return {"spec": spec, "experiment_id": exp_id, "parent": parent, "trials": trials, "best": best,
            "client": client}


# A finished ppo_small search written by hand, as Ray Tune leaves it (tests/test_best_mlflow.py): with
# the space's stop_at 475, `best` picks a different trial under each scope. trial id -> returns per
# 25k env steps; its searched values.
RETURNS = {"h_00000": [100.0, 200.0, 300.0, 300.0, 300.0, 300.0],    # avg-last-3: 300
           "h_00001": [100.0, 490.0, 200.0, 150.0, 120.0, 100.0],    # max: 490; last with --mode min
           "h_00002": [50.0, 60.0, 70.0, 80.0, 90.0, 400.0],         # the best last value that did not solve
           "h_00003": [100.0, 476.0],                                # last: solved soonest (stop_at 475)
           "h_00004": [100.0, 490.0, 200.0, 150.0, 120.0, 100.0]}    # ties h_00001: the first trial wins
SEARCHED = {"h_00000": {"lr": 0.0021234567890123456, "num_epochs": 4, "minibatch_size": 512, "gamma": 0.99,
                        "lambda_": 0.9012345678901234, "fcnet_hiddens": [64, 64]},
            "h_00001": {"lr": 0.0049876543210987654, "num_epochs": 6, "minibatch_size": 1024, "gamma": 0.995,
                        "lambda_": 0.9487654321098765, "fcnet_hiddens": [128]},
            "h_00002": {"lr": 0.003, "num_epochs": 5, "minibatch_size": 1024, "gamma": 0.99,
                        "lambda_": 0.93, "fcnet_hiddens": [64, 64]},
            "h_00003": {"lr": 0.0033333333333333335, "num_epochs": 4, "minibatch_size": 512, "gamma": 0.995,
                        "lambda_": 0.9111111111111111, "fcnet_hiddens": [128]},
            "h_00004": {"lr": 0.004, "num_epochs": 6, "minibatch_size": 1024, "gamma": 0.995,
                        "lambda_": 0.94, "fcnet_hiddens": [128]}}


def hand_spec(*, scheduler: str = "asha") -> Any:
    """ppo_small with a list-valued choice too (fcnet_hiddens), as a search validates it."""
    import yaml

    from tune_runner.spec.experiment import build_spec, shipped_spaces

    raw = yaml.safe_load(shipped_spaces()["ppo_small"].read_text())
    backend = raw.pop("backends")["ppo"]
    raw["fixed"] = {**raw["fixed"], **backend["fixed"]}
    raw["space"]["fcnet_hiddens"] = {"choice": [[64, 64], [128]]}
    raw["scheduler"] = {"name": scheduler}
    return build_spec(raw, name="ppo_small", source=str(shipped_spaces()["ppo_small"]), sha256="ab" * 32)


def write_search_folder(folder: Path, spec: Any) -> None:
    """A finished search's folder: Tune's experiment state, a result.json and a checkpoint per trial,
    tune_rl_spec.yaml; what tune_runner.results reads."""
    import json

    import yaml

    from tune_runner.paths import SPEC_FILE

    trial_data = []
    for trial_id, returns in RETURNS.items():
        config = {"env": spec.env, "env_config": {}, **spec.fixed, **SEARCHED[trial_id]}
        rows = [{"episode_return_mean": r, "episode_len_mean": r, "env_steps": 25_000 * (k + 1),
                 "training_iteration": k + 1, "done": k == len(returns) - 1, "trial_id": trial_id,
                 "config": config} for k, r in enumerate(returns)]
        trial = folder / f"OwnPPO_{trial_id}"
        (trial / f"checkpoint_{len(rows):06d}").mkdir(parents=True)
        (trial / "result.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
        summary = {"max": max(returns), "min": min(returns), "avg": sum(returns) / len(returns), "last": returns[-1],
                   "last-5-avg": sum(returns[-5:]) / len(returns[-5:]),
                   "last-10-avg": sum(returns[-10:]) / len(returns[-10:])}
        trial_data.append([json.dumps({"trial_id": trial_id, "status": "TERMINATED", "relative_logdir": trial.name,
                                       "config": config}),
                           json.dumps({"last_result": rows[-1], "metric_analysis": {"episode_return_mean": summary}})])
    (folder / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps({"trial_data": trial_data}))
    (folder / SPEC_FILE).write_text(yaml.safe_dump(spec.as_dict(), sort_keys=False))


def log_folder_search(uri: str, folder: Path, spec: Any) -> str:
    """The MLflow records a search of `folder`'s trials leaves, written by tune-rl's own logging code
    (parent.open_run, tracking.MlflowTracking's hooks fed with every result); the parent run id."""
    from tune_runner.results import analysis
    from tune_runner.tracking import callback as tracking
    from tune_runner.tracking import parent as parent_run

    loaded = analysis.read(folder)
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, spec.name, uri)
    parent = parent_run.open_run(client, exp_id, spec, name=folder.name, exp_path=folder,
                                 search_id="cd" * 16)
    callback = tracking.MlflowTracking(uri=uri, experiment_id=exp_id, parent_run_id=parent,
                                       logged_keys=tuple(spec.fixed) + spec.searched, ending=spec.ending)
    for trial in loaded.trials:
        callback.on_trial_start(0, loaded.trials, trial)
    for trial in loaded.trials:
        for row in loaded.rows(trial.trial_id):
            callback.on_trial_result(0, loaded.trials, trial, row)
        callback.on_trial_complete(0, loaded.trials, trial)
    callback.on_experiment_end(loaded.trials)
    parent_run.close(client, parent, status="FINISHED")
    return parent
