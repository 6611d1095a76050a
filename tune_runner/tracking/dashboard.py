"""`tune-rl dashboard`: the MLflow UI on the store that searches write to, lean and on loopback.

MLflow 3's default server runs 4 workers plus job consumers (about 22 s and 2.5 GB to start);
the UI of one user's searches needs one worker and no job execution (`--workers 1`,
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false). The server runs in its own process group, so a
Ctrl-C here stops it (and everything it started) before tune-rl exits. Beside its URL it prints a
deep link to the newest search's trials (dashboard_link), which `--open` opens in a browser.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tune_runner import paths
from tune_runner.errors import UserError
from tune_runner.tracking import dashboard_link
from tune_runner.tracking import uri as mlflow_uri

DEFAULT_PORT = 5000
START_TIMEOUT_S = 180.0  # a cold start on a busy 2-core machine takes 10-20 s
STOP_TIMEOUT_S = 15.0
# The server's security settings come from our flags only, never from the caller's environment.
SECURITY_ENV = ("MLFLOW_SERVER_ALLOWED_HOSTS", "MLFLOW_SERVER_CORS_ALLOWED_ORIGINS",
                "MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE")


@dataclass(frozen=True)
class Server:
    """An `mlflow server` command line for one store, and where it answers."""

    uri: str
    host: str
    port: int
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """Where a browser on this machine reaches it."""
        return f"http://{_connect_host(self.host)}:{self.port}"

    def command(self) -> list[str]:
        """`mlflow server` with one worker, artifacts served from beside a SQLite store."""
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.uri,
               "--host", self.host, "--port", str(self.port), "--workers", "1"]
        root = mlflow_uri.artifact_location(self.uri)
        folder = Path(root.removeprefix("file://")) if root else paths.default_artifact_root()
        cmd += ["--artifacts-destination", str(folder)]
        if self.allowed_hosts:
            cmd += ["--allowed-hosts", ",".join(self.allowed_hosts)]
        if self.cors_origins:
            cmd += ["--cors-allowed-origins", ",".join(self.cors_origins)]
        return cmd

    def env(self) -> dict[str, str]:
        """The caller's environment without MLflow's security overrides, and no job consumers."""
        env = {k: v for k, v in os.environ.items() if k not in SECURITY_ENV}
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        return env


def plan(*, uri: str, host: str, port: int | None, allowed_hosts: str | None = None,
         cors_origins: str | None = None, open_browser: bool = False) -> Server:
    """Check the flags and pick the port; start nothing, write nothing."""
    if uri.startswith(("http://", "https://")):
        raise UserError(f"--mlflow-uri {mlflow_uri.redacted(uri)}: already a tracking server with its own UI; "
                        f"open it in a browser (the dashboard serves a store: sqlite:///... or postgresql://...)")
    _check_host(host)
    hosts, origins = _listed("--allowed-hosts", allowed_hosts), _listed("--cors-origins", cors_origins)
    port = _free_port(host, port)
    hosts = hosts or (_default_allowed_hosts(host, port) if not _loopback(host) else ())
    origins = origins or tuple(f"http://{h}" for h in hosts)
    mlflow_uri.check_uri(uri)
    if open_browser:
        _check_browser()
    return Server(uri=uri, host=host, port=port, allowed_hosts=hosts, cors_origins=origins)


def serve(server: Server, *, out: TextIO, verbose: bool = False, open_browser: bool = False) -> int:
    """Start the server, print its URL and the newest search's link once it answers (and open that in
    a browser), and stop it on Ctrl-C (KeyboardInterrupt)."""
    new_store = dashboard_link.store_is_new(server.uri)  # holds no search; asked before the server creates it
    # With --open the lookup comes first, so that a store without a search is refused before anything
    # starts. Else it overlaps the server's start on a SQLite file that exists (its tables do), not on a
    # database whose tables the server may be creating as we would.
    look_first = not new_store and (open_browser or not server.uri.lower().startswith("sqlite:"))
    link = dashboard_link.newest_search(server.uri) if look_first else None
    if open_browser and link is None:
        raise UserError(f"--open: no search in {mlflow_uri.redacted(server.uri)} yet; run one first (tune-rl search "
                        f"--space oracle), or leave --open out to browse the store")
    mlflow_uri.create_store_folder(server.uri)  # the server opens the file, not its folder
    log_path = paths.home() / "logs" / f"dashboard-{server.port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"tune-rl dashboard: MLflow UI on {mlflow_uri.redacted(server.uri)}", file=out, flush=True)
    started = time.monotonic()
    with open(log_path, "wb") as log, _signals_interrupt():
        proc = subprocess.Popen(server.command(), env=server.env(), start_new_session=True,
                                stdout=None if verbose else log, stderr=None if verbose else subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        try:
            if not new_store and not look_first:
                link = dashboard_link.newest_search(server.uri)  # while the server starts
            _wait_until_up(server, proc, log_path)
            print(f"  {server.url}  (up in {time.monotonic() - started:.1f}s; Ctrl-C stops it)", file=out)
            _announce(server, link, out=out, log_path=None if verbose else log_path)
            if open_browser:  # a browser command may not return until it is closed: not in our way
                threading.Thread(target=webbrowser.open, args=(f"{server.url}/{link.path}",), daemon=True).start()
            proc.wait()
            raise RuntimeError(f"the MLflow server exited with status {proc.returncode}: {_last_line(log_path)}")
        finally:
            stop(proc)


def _announce(server: Server, link: dashboard_link.DeepLink | None, *, out: TextIO, log_path: Path | None) -> None:
    """The lines under the URL: where the newest search is, who may connect, where the log goes."""
    if link is not None:
        print(f"  newest search {link.search}: {server.url}/{link.path}", file=out)
    else:
        print(f"  no search in this store yet; experiments: {server.url}/{dashboard_link.experiments_path()}",
              file=out)
    if server.allowed_hosts:
        print(f"  allowed hosts {','.join(server.allowed_hosts)}; CORS origins "
              f"{','.join(server.cors_origins)}", file=out)
    if log_path is not None:
        print(f"  server log {log_path}", file=out)
    out.flush()


def stop(proc: subprocess.Popen) -> None:
    """SIGINT to the server (it forwards it to uvicorn), then make sure its whole process group is gone."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
    for sig in (signal.SIGTERM, signal.SIGKILL):  # anything the server left in its group
        if not _signal_group(proc.pid, sig):
            break
        time.sleep(0.5)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when the group is empty."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP stop the dashboard and its server (SIGINT too when the shell that
    started us in the background ignored it), so the server never outlives it."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM if tune-rl dies without cleaning up (SIGKILL)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_until_up(server: Server, proc: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"--mlflow-uri {mlflow_uri.redacted(server.uri)}: the MLflow server did not start: "
                            f"{_last_line(log_path)}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the MLflow server did not answer within {START_TIMEOUT_S:.0f} s; see {log_path}")


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _check_browser() -> None:
    try:
        webbrowser.get()
    except webbrowser.Error:
        raise UserError("--open: no web browser found on this machine (Python's webbrowser module finds none); "
                        "set BROWSER to one, e.g. BROWSER=firefox, or leave --open out and open the printed "
                        "link yourself") from None


def _check_host(host: str) -> None:
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        raise UserError(f"--host {host}: not an address of this machine; use 127.0.0.1 (default) "
                        f"or 0.0.0.0 for every interface") from None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _free_port(host: str, port: int | None) -> int:
    """The given port if it is free, else a UserError; without one, 5000 if free, else any free port."""
    if port is not None and not 0 < port < 65536:
        raise UserError(f"--port {port}: must be between 1 and 65535")
    for candidate in ([port] if port is not None else [DEFAULT_PORT, 0]):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                sock.bind((host, candidate))
            except OSError as exc:
                if port is not None:
                    raise UserError(f"--port {port}: {host}:{port} is in use ({exc.strerror}); pick another "
                                    f"port or leave --port out for a free one") from None
                continue
            return sock.getsockname()[1]
    raise UserError(f"--host {host}: no free port to bind")


def _listed(flag: str, value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    if not items or "*" in items:
        raise UserError(f"{flag} {value!r}: list the names clients use (e.g. myhost:5000); "
                        f"'*' would turn MLflow's check off")
    return items


def _default_allowed_hosts(host: str, port: int) -> tuple[str, ...]:
    """The Host headers that reach an exposed server by this machine's names and the bound address."""
    names = ["localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()]
    if host not in ("0.0.0.0", "::"):
        names.append(_connect_host(host))
    return tuple(dict.fromkeys(f"{name}:{port}" for name in names if name))
