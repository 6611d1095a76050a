"""`tune-rl submit` and `tune-rl jobs`: a search sent as a Ray Job to a cluster's dashboard.

The job runs `python -m tune_runner search <the same flags>` on the cluster (the head node by
default), with our package and any local files the flags name (a space YAML, plugins) in the
job's runtime env. Nothing here starts Ray: it talks HTTP to the dashboard's job server
(ray.job_submission.JobSubmissionClient, which needs Ray's `default` extra).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from tune_runner.errors import UserError, closest

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# Set by Ray's job supervisor in the environment of a job's entrypoint (the job's config, runtime env included).
IN_JOB = "RAY_JOB_CONFIG_JSON_ENV_VAR"
# Tracking stores a job on the cluster reaches over the network; sqlite:/file: are files on this machine.
NETWORK_STORES = ("http", "https", "postgresql", "mysql", "mssql", "databricks", "databricks-uc")
FILE_STORES = ("sqlite", "file")
NEEDS_CLIENT = "tune-rl submit needs Ray's job client: pip install 'tune-rl[cluster]'"
COMPOSE_HINT = "e.g. --mlflow-uri http://mlflow:5000 with docker/compose.yaml"


def inside_job() -> bool:
    """Whether this process is a Ray job's entrypoint (or runs under one)."""
    return IN_JOB in os.environ


def dashboard_address(value: str | None) -> str:
    """--address as the dashboard's URL: host:port gets http://; by default $RAY_API_SERVER_ADDRESS, or
    $RAY_ADDRESS when it is an http(s) URL, else http://127.0.0.1:8265."""
    if value is None:
        api, ray_address = (os.environ.get(key, "").strip() for key in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"))
        value = api or (ray_address if ray_address.startswith(("http://", "https://")) else DEFAULT_ADDRESS)
    value = value.strip().rstrip("/")
    if not value:
        raise UserError(f"--address: empty; give the Ray dashboard's URL, e.g. {DEFAULT_ADDRESS}")
    scheme = value.split("://", 1)[0].lower() if "://" in value else ""
    if value == "auto" or scheme not in ("", "http", "https"):
        raise UserError(f"--address {value}: jobs go to the Ray dashboard's HTTP address, e.g. {DEFAULT_ADDRESS} "
                        f"(auto, ray:// and the GCS port are for tune-rl search --address)")
    return value if scheme else f"http://{value}"


def check_mlflow_uri(uri: str | None, *, shared_fs: bool) -> str:
    """The job's --mlflow-uri must be a store the cluster reaches; the line to print about it."""
    if not uri:
        raise UserError("--mlflow-uri: required by submit: the job runs on the cluster, which cannot write to "
                        f"this machine's sqlite store; pass the cluster's MLflow server ({COMPOSE_HINT})")
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if scheme in NETWORK_STORES:
        return f"mlflow     {uri}  (as the cluster sees it)"
    if scheme not in FILE_STORES:
        raise UserError(f"--mlflow-uri {uri}: not a tracking URI the cluster can reach; pass its MLflow server "
                        f"({COMPOSE_HINT}) or a database URI (postgresql://...)")
    if not shared_fs:
        raise UserError(f"--mlflow-uri {uri}: a file on this machine, out of the job's reach on the cluster; pass "
                        f"the cluster's MLflow server ({COMPOSE_HINT}), or add --shared-fs if the cluster's "
                        f"nodes share this filesystem")
    if scheme == "sqlite" and not uri.split("://", 1)[1].startswith("//"):  # sqlite:////abs, sqlite:///relative
        raise UserError(f"--mlflow-uri {uri}: a relative path would be relative to the job's folder on the "
                        f"cluster; give an absolute one (sqlite:////abs/path/mlflow.db)")
    return f"mlflow     {uri}  (works only while the cluster shares this filesystem: --shared-fs)"


def check_storage(value: str | None, *, shared_fs: bool) -> tuple[str | None, str]:
    """The job's --storage, as the cluster sees it, and the line to print about it."""
    from tune_runner.storage import is_uri

    if value is None:
        return None, "results    on the cluster, under the job's TUNE_RL_HOME (~/.tune-rl/results unless set there)"
    if is_uri(value) or value.startswith(("/", "~")):
        return value, f"results    {value}  (on the cluster)"
    if shared_fs:
        resolved = str(Path(value).resolve())
        return resolved, f"results    {resolved}"
    raise UserError(f"--storage {value}: a relative path would be relative to the job's temporary folder on the "
                    f"cluster; give an absolute path there (or ~/...), or a URI like s3://bucket/results")


STAGED_FLAGS = ("--space", "--scheduler", "--plugins")  # flags whose value may be a file on this machine


def stage_files(argv: list[str], folder: Path) -> list[str]:
    """`argv` with the local files its --space, --scheduler (a YAML) and --plugins name copied into `folder`
    (the job's working_dir, its current folder on the cluster) and rewritten to their names there."""
    out: list[str] = []
    pending = None
    for token in argv:
        flag, eq, inline = token.partition("=")
        if pending is not None:
            out.append(_staged(pending, token, folder))
            pending = None
        elif flag in STAGED_FLAGS and eq:
            out.append(f"{flag}={_staged(flag, inline, folder)}")
        else:
            pending = token if token in STAGED_FLAGS else None
            out.append(token)
    return out


def _staged(flag: str, value: str, folder: Path) -> str:
    if flag == "--plugins":
        return ",".join(_copy(part, root=folder, sub="plugins") if Path(part).expanduser().exists() else part
                        for part in value.split(","))
    if not Path(value).expanduser().is_file():  # a shipped name: the cluster has it
        return value
    return _copy(value, root=folder)


def _copy(value: str, *, root: Path, sub: str = "") -> str:
    """Copy a file or folder into root/sub (a fresh name if taken); its path relative to `root`."""
    source = Path(value).expanduser().resolve()
    into = root / sub
    into.mkdir(parents=True, exist_ok=True)
    target, n = into / source.name, 1
    while target.exists():
        n += 1
        target = into / f"{source.stem}-{n}{source.suffix}"
    if source.is_dir():
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        shutil.copy2(source, target)
    return target.relative_to(root).as_posix()


def entrypoint(argv: list[str]) -> str:
    """The job's shell command: our search, run as a module so a missing console script does not matter."""
    return shlex.join(["python", "-m", "tune_runner", "search", *argv])


@contextmanager
def runtime_env(argv: list[str], *, env_vars: dict[str, str] | None = None) -> Iterator[tuple[dict, list[str]]]:
    """The job's runtime env (our package; a working_dir with the local files the flags name) and the
    flags rewritten to those files' names there. The temporary folders go when the block ends."""
    from tune_runner.paths import package_for_cluster

    with package_for_cluster() as package, tempfile.TemporaryDirectory(prefix="tune-rl-job-") as tmp:
        staged = stage_files(argv, Path(tmp))
        env: dict[str, Any] = {"py_modules": [str(package)]}
        if any(Path(tmp).iterdir()):
            env["working_dir"] = tmp
        if env_vars:
            env["env_vars"] = dict(env_vars)
        yield env, staged


def submit(*, address: str, search_argv: list[str], job_id: str | None = None,
           env_vars: dict[str, str] | None = None) -> str:
    """Send `tune-rl search <search_argv>` to the cluster at `address` (the dashboard) as a Ray job, with
    our package and the local files the flags name; the job's submission id. Returns once submitted."""
    from tune_runner.version import __version__

    client = _client(address)
    with runtime_env(search_argv, env_vars=env_vars) as (env, argv), _answers(address):
        try:
            return client.submit_job(entrypoint=entrypoint(argv), runtime_env=env, submission_id=job_id,
                                     metadata={"submitted_by": f"tune-rl {__version__}"})
        except RuntimeError as exc:
            if job_id and "already exists" in str(exc):
                raise UserError(f"--job-id {job_id}: a job with this id exists already at {address}; choose "
                                f"another or leave --job-id out") from None
            raise UserError(f"--address {address}: the job server refused the job ({_first_line(exc)})") from None


def list_jobs(address: str) -> list[Job]:
    """Every job the cluster knows, oldest first."""
    client = _client(address)
    with _answers(address):
        found = client.list_jobs()
    jobs = [Job(j.submission_id or j.job_id or "?", _status(j.status),
                datetime.fromtimestamp(j.start_time / 1000) if j.start_time else None, j.entrypoint or "")
            for j in found]
    return sorted(jobs, key=lambda j: j.start or datetime.min)


def status(address: str, job_id: str) -> str:
    """The job's status: PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED."""
    return _status(_job(_client(address), address, job_id).status)


def logs(*, address: str, job_id: str, out: TextIO, follow: bool = False) -> str:
    """Print the job's output so far, or (follow) as it comes until the job ends; the job's status then."""
    import asyncio

    client = _client(address)
    _job(client, address, job_id)
    with _answers(address):
        if not follow:
            out.write(client.get_job_logs(job_id))
            out.flush()
            return _status(client.get_job_status(job_id))
        try:
            asyncio.run(_tail(client, job_id, out))
        except KeyboardInterrupt:
            print(f"\nstopped following {job_id}; the job goes on (tune-rl jobs stop {job_id} --address {address} "
                  f"stops it)", file=out, flush=True)
            raise
        return _settled(client, job_id)


def stop(address: str, job_id: str) -> bool:
    """Ask the job to stop; False when it was not running."""
    client = _client(address)
    _job(client, address, job_id)
    with _answers(address):
        return bool(client.stop_job(job_id))


async def _tail(client: Any, job_id: str, out: TextIO) -> None:
    async for chunk in client.tail_job_logs(job_id):
        out.write(chunk)
        out.flush()


def _settled(client: Any, job_id: str, *, timeout_s: float = 30.0) -> str:
    """The job's status once it is final (the log stream may close a moment before), or as it is then."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = _status(client.get_job_status(job_id))
        if now in ("STOPPED", "SUCCEEDED", "FAILED") or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def _job(client: Any, address: str, job_id: str) -> Any:
    """The job's details; an unknown id is one line listing the known ones, the closest first."""
    with _answers(address):
        try:
            return client.get_job_info(job_id)
        except RuntimeError as exc:
            if "404" not in str(exc) and "does not exist" not in str(exc):
                raise
        known = [j.submission_id or j.job_id for j in sorted(client.list_jobs(), key=lambda j: j.start_time or 0)]
    raise UserError(unknown_job(job_id, [k for k in known if k], address=address))


def unknown_job(job_id: str, known: list[str], *, address: str) -> str:
    """"job 'x': no such job at ADDRESS; did you mean y? (known: ...)"."""
    if not known:
        return f"job {job_id!r}: no such job at {address}, which has run no jobs yet"
    near = closest(job_id, known)
    hint = f"; did you mean {near}?" if near else ""
    shown = ", ".join(known[-5:]) + (f" and {len(known) - 5} older" if len(known) > 5 else "")
    return f"job {job_id!r}: no such job at {address}{hint} (known: {shown}; tune-rl jobs list)"


def _status(value: Any) -> str:
    return str(getattr(value, "value", value))


@dataclass(frozen=True)
class Job:
    """One job as `tune-rl jobs list` shows it."""

    job_id: str
    status: str
    start: datetime | None
    entrypoint: str

    def line(self, *, width: int = 0) -> str:
        """`id  STATUS  start  command`, the command without our module prefix and cut to fit."""
        start = f"{self.start:%Y-%m-%d %H:%M:%S}" if self.start else "-" * 19
        command = self.entrypoint.removeprefix("python -m tune_runner ")
        command = command if len(command) <= 70 else command[:69] + "…"
        return f"{self.job_id:<{width}}  {self.status:<9}  {start}  {command}"


def _client(address: str) -> Any:
    """A job client on the dashboard at `address` (checked: it answers and is a Ray dashboard)."""
    import importlib.util
    import logging

    if any(importlib.util.find_spec(name) is None for name in ("requests", "aiohttp")):
        raise UserError(NEEDS_CLIENT)
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise UserError(NEEDS_CLIENT) from None
    for name in ("ray.dashboard", "ray._private.runtime_env"):  # its "uploading package ..." chatter
        logging.getLogger(name).setLevel(logging.WARNING)
    with _answers(address):
        return JobSubmissionClient(address)


@contextmanager
def _answers(address: str) -> Iterator[None]:
    """The client's failures to talk to the dashboard, as one line naming --address."""
    from ray.exceptions import AuthenticationError

    try:
        yield
    except OSError as exc:  # ConnectionError from the client, requests' connection errors
        raise UserError(f"--address {address}: no Ray dashboard answers there ({_reason(exc)}); start the "
                        f"cluster with the dashboard (ray start --head --dashboard-host 127.0.0.1) or check the "
                        f"port (8265)") from None
    except AuthenticationError as exc:
        raise UserError(f"--address {address}: the dashboard refused us ({_first_line(exc)}); set RAY_AUTH_MODE=token "
                        f"and RAY_AUTH_TOKEN as the cluster has them") from None
    except (RuntimeError, ValueError) as exc:
        if "404" in str(exc) and "ersion" in str(exc):  # "Version check returned 404"
            raise UserError(f"--address {address}: not a Ray dashboard (no /api/version); give the dashboard's "
                            f"port (8265)") from None
        raise


def _reason(exc: BaseException) -> str:
    """The OS's words under the client's ('[Errno 111] Connection refused'), else its first line."""
    import re

    for link in (exc, exc.__context__, exc.__cause__):
        found = re.search(r"\[Errno -?\d+\] [^'\")\]]+", str(link or ""))
        if found:
            return found.group(0).strip()
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
