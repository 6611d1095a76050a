"""The Ray a search runs on: a local instance, or a joined cluster with our package and the user's plugin
files shipped to its workers; and the driver's logging kept quiet around it."""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError
from tune_runner.spec.experiment import ExperimentSpec

SHIPPED_PLUGINS = "tune_rl_user_plugins"  # the package a joined cluster's workers import user plugins from


def quiet_logs(*, verbose: bool) -> None:
    """Keep the driver's output to our live view: RLlib, Tune and MLflow chatter only with --verbose."""
    if verbose:
        return
    for name in ("ray.rllib", "ray.train"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # Tune logs every failed trial's traceback at ERROR; the live view and summary say it in one line.
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is first imported
    for name in ("mlflow", "alembic", "optuna", "hpbandster"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # PB2's Gaussian process fit warns about convergence on almost every perturbation.
    warnings.filterwarnings("ignore", module=r"sklearn\.gaussian_process")
    warnings.filterwarnings("ignore", message=r".*TPESampler.*|.*CmaEsSampler.*|.*multivariate.*")


def ensure_ray(*, num_cpus: int | None, verbose: bool, num_gpus: float | None = None,
               address: str | None = None, plugins: Sequence[str] = (),
               worker_modules: Sequence[str] = ()) -> dict[str, str]:
    """Start a local Ray, or join the cluster at `address`; reuse a session already started. The plugins
    shipped to a joined cluster (path -> module reference for trial_plugins); {} when none were.

    A local Ray starts one idle worker per CPU, which imports `worker_modules` (the trainable's: Ray Tune,
    torch, gymnasium) while the driver sets up, and the first trial actors are placed on those workers
    (see `_trial_actors_inherit_env`): their first iteration starts within about a second of being scheduled,
    not after a new Python has imported Ray, Ray Tune and torch (5-12 s on 2 cores).

    A local Ray is never a running cluster joined by accident (address="local"). Joining one
    ships our package to its workers through Ray's runtime environment, so workers that only
    have Ray and our dependencies installed still run our trainables. Inside a Ray job
    (tune-rl submit) the search joins the job's cluster.
    """
    for key, value in (("RAY_enable_worker_prestart", "0"), ("RAY_DEDUP_LOGS", "0"),
                       ("RAY_AIR_NEW_OUTPUT", "0"),  # with verbose=0 the old engine prints nothing
                       ("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1"),  # we add CSV+JSON, not TensorBoard
                       ("TUNE_GLOBAL_CHECKPOINT_S", "2")):  # experiment-state snapshots at most 2 s old
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        return {}
    logs = {"log_to_driver": verbose, "logging_level": logging.INFO if verbose else logging.ERROR}
    from tune_runner.cluster.jobs import inside_job

    if address or inside_job():
        return _join(address or "auto", logs, plugins=plugins)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, loopback-only instance
    try:
        from ray.tune.execution import class_cache
    except ImportError:  # a Ray whose Tune is laid out otherwise: Tune's behaviour, slower trial starts
        class_cache = None
    for key, value in getattr(class_cache, "DEFAULT_ENV_VARS", {}).items():  # in every trial actor's runtime env
        os.environ.setdefault(key, value)
    from tune_runner.cluster import reaper

    os.environ[reaper.MARK] = str(os.getpid())  # inherited by every Ray process we start
    preload = {"preload_python_modules": list(worker_modules)} if worker_modules else None
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
             _system_config=preload, **logs)
    _LOCAL["driver"] = os.getpid()
    _watch_heads()
    if class_cache is not None:
        _trial_actors_inherit_env(class_cache)
    import subprocess

    unmarked = {k: v for k, v in os.environ.items() if k != reaper.MARK}  # the reaper must not reap itself
    subprocess.Popen([sys.executable, "-m", "tune_runner.cluster.reaper", str(os.getpid())], start_new_session=True,
                     env=unmarked, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {}


_LOCAL: dict[str, object] = {}  # the local Ray we started: its job id and the environment its workers inherited
# The processes a local Ray cannot run without, and what a user reads when one dies under a search
HEADS = {"gcs_server": "Ray's GCS (its state of the cluster)", "raylet": "Ray's raylet (it runs the trials)"}
WATCH_EVERY_S = 0.5


def _watch_heads() -> None:
    """Watch the local Ray's GCS and raylet from a daemon thread while a search runs (`watching`). When one dies
    under it, Ray's driver would wait 60 s for it and exit 1 with a C++ log line; we say at once which died and
    the command that continues the search (its state is saved every 2 s), and leave with status 1: the reaper
    ends the rest of Ray."""
    import threading
    import time

    import ray

    node = getattr(ray._private.worker.global_worker, "node", None)  # noqa: SLF001 - the processes we started
    processes = {kind: infos[0].process for kind in HEADS
                 if (infos := (getattr(node, "all_processes", None) or {}).get(kind))}

    def watch() -> None:
        while True:
            time.sleep(WATCH_EVERY_S)
            hint = _LOCAL.get("watching")
            for kind, process in processes.items():
                if hint and process.poll() is not None and _LOCAL.get("watching") == hint:
                    sys.stdout.flush()
                    sys.stderr.write(f"\ntune-rl: {HEADS[kind]} died under the search (pid {process.pid}, exit "
                                     f"{process.returncode}); the search's state is saved; continue it with: "
                                     f"{hint}\n")
                    sys.stderr.flush()
                    os._exit(1)

    threading.Thread(target=watch, name="tune-rl-ray-heads", daemon=True).start()


class watching:  # noqa: N801 - used as a context manager, like contextlib's
    """While a search runs on the local Ray we started, a death of its GCS or raylet ends the driver with one
    line naming it and `hint` (the command that continues the search)."""

    def __init__(self, hint: str) -> None:
        self.hint = hint

    def __enter__(self) -> None:
        _LOCAL["watching"] = self.hint

    def __exit__(self, *exc: object) -> None:
        _LOCAL.pop("watching", None)


def end_local_ray() -> bool:
    """End the local Ray this process started, for a command about to leave: SIGKILL to every process of it at
    once (this process's descendants: GCS, raylet, agents, workers; and any other carrying the reaper's mark;
    not the reaper). True when it did; False, with nothing
    done, when this process started no local Ray (none, or a joined cluster) or where there is no /proc to find
    Ray's processes in (not Linux): ray.shutdown then.

    ray.shutdown stops Ray's processes one type at a time and waits up to a second for each (1.2 s after `make
    search`), and a finished command needs none of them: its files and MLflow runs are written by then. Our
    stderr goes to /dev/null first, so a Ray thread of this process that notices its GCS go cannot print into
    the summary; the caller leaves at once with os._exit."""
    import signal

    from tune_runner.cluster import reaper

    if _LOCAL.get("driver") != os.getpid() or not os.path.isdir("/proc"):  # the process table is read from /proc
        return False
    pids = sorted(set(reaper.marked(os.getpid())) | set(reaper.descendants(os.getpid())))
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return True


def _trial_actors_inherit_env(class_cache: Any) -> None:
    """Let Ray Tune register trial actors without a runtime env on the local Ray we started.

    Tune registers every trainable with a runtime env of environment variables (PL_DISABLE_FORK, and
    AWS_*, RAY_CHDIR_TO_TRIAL_DIR and Ray Train's, copied from the driver). A worker with a runtime env
    is never one of the idle workers Ray started with the node, so each trial actor waited for a new
    Python. On a local Ray the workers inherit the driver's environment as it was at ray.init; while every
    variable Tune would set has that value there, the runtime env changes nothing but the wait, and is
    left out. Anything else (a joined cluster, a variable changed since) keeps Tune's own behaviour.
    """
    import ray
    from ray.tune.execution import tune_controller

    _LOCAL.update(job=ray.get_runtime_context().get_job_id(), env=dict(os.environ))

    class InheritedEnvActorClassCache(class_cache._ActorClassCache):
        def get(self, trainable_cls: type) -> object:
            if trainable_cls not in self._cache and _inherited(class_cache):
                self._cache[trainable_cls] = ray.remote(trainable_cls)
            return super().get(trainable_cls)

    if not getattr(tune_controller._ActorClassCache, "inherits_env", False):
        InheritedEnvActorClassCache.inherits_env = True
        tune_controller._ActorClassCache = InheritedEnvActorClassCache


def _inherited(class_cache: Any) -> bool:
    """Whether this process drives the local Ray we started and its workers already have every variable Tune
    would give a trial actor (class_cache.get's rule), with the same value."""
    import ray

    if not ray.is_initialized() or _LOCAL.get("job") != ray.get_runtime_context().get_job_id():
        return False
    wanted = {**class_cache.DEFAULT_ENV_VARS,
              **{key: os.environ[key] for key in class_cache.ENV_VARS_TO_PROPAGATE if key in os.environ}}
    env = _LOCAL["env"]
    return all(env.get(key) == value for key, value in wanted.items())


def _join(address: str, logs: dict, *, plugins: Sequence[str] = ()) -> dict[str, str]:
    """ray.init on an existing cluster (`auto`, host:port or ray://host:10001), with our package shipped;
    the plugins shipped with it (shipped_names).

    A Ray job's driver has it already: the job's runtime env (tune-rl submit) applies to everything
    the job starts, and Ray refuses a ray.init that sets py_modules again.
    """
    import ray

    from tune_runner.cluster.jobs import inside_job
    from tune_runner.paths import package_for_cluster

    try:
        if inside_job():
            ray.init(address=address, **logs)
            return {}
        check_address(address)
        with package_for_cluster() as package, tempfile.TemporaryDirectory(prefix="tune-rl-plugins-") as tmp:
            modules = [str(package)]  # uploaded by ray.init; the staged copies can go after
            if plugins:
                modules.append(str(stage_plugins(plugins, Path(tmp))))
            ray.init(address=address, runtime_env={"py_modules": modules}, **logs)
            return shipped_names(plugins)
    except ImportError as exc:
        raise UserError(f"--address {address}: Ray Client needs more packages ({exc}); "
                        f"pip install 'tune-rl[cluster]'") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"--address {address}: cannot join the Ray cluster "
                        f"({str(exc).strip().splitlines()[0]}); check the address, or drop --address "
                        f"for a local Ray") from None


def shipped_names(plugins: Sequence[str]) -> dict[str, str]:
    """Each plugin path -> its module reference in the shipped package (the n-th file is p<n>_<stem>)."""
    return {path: f"module:{SHIPPED_PLUGINS}.p{n}_{re.sub(r'[^0-9a-zA-Z_]', '_', Path(path).stem)}"
            for n, path in enumerate(plugins)}


def stage_plugins(plugins: Sequence[str], tmp: Path) -> Path:
    """The user's plugin files copied into a package for a runtime env's py_modules (workers may not see
    this machine's files), each under the module shipped_names gives it, which the trials import instead."""
    package = tmp / SHIPPED_PLUGINS
    package.mkdir()
    (package / "__init__.py").write_text("")
    for path, reference in shipped_names(plugins).items():
        shutil.copy2(path, package / f"{reference.rpartition('.')[2]}.py")
    return package


def trial_plugins(spec: ExperimentSpec, shipped: Mapping[str, str]) -> ExperimentSpec:
    """The spec as trials see it: plugins shipped to a joined cluster (ensure_ray's answer) are imported
    from there."""
    return replace(spec, plugins=tuple(shipped.get(p, p) for p in spec.plugins))


def check_address(address: str, *, timeout_s: float = 5.0) -> None:
    """A cluster address (host:port or ray://host:port) where nothing answers fails here in seconds;
    ray.init would retry it for about a quarter of an hour before giving up."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if address == "auto" or "://" in target or not sep or not port.isdigit():
        return  # ray.init judges these (and finds `auto` itself)
    import socket

    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise UserError(f"--address {address}: nothing answers at {host}:{port} ({reason}); check the address "
                        f"(the head's GCS port, 6379 by default, or ray://host:10001), or drop --address for "
                        f"a local Ray") from None
