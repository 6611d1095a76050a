"""--mlflow-uri checks against small local HTTP servers that answer as a refusing, foreign or
MLflow-like server would; credentials go in headers and never into what we print."""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from tune_runner.errors import UserError
from tune_runner.tracking.uri import auth_headers, check_uri, redacted

MARKER = "tune-rl-secret-7f3a"


class Answers(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the server's `status` and `body`; remembers each request's path and headers."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.seen.append((self.path, dict(self.headers)))
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json" if self.server.body.startswith(b"{") else "text/html")
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator:
    """start(status, body) -> (url, seen): a server answering so, and the requests it received."""
    servers = []

    def start(status: int, body: bytes) -> tuple[str, list]:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
        server.status, server.body, server.seen = status, body, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", server.seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_mlflow_like_server_passes_and_gets_the_env_credentials(http_server, monkeypatch):
    url, seen = http_server(200, json.dumps({"experiments": []}).encode())
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ann")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", MARKER)
    assert check_uri(url + "/") is None
    # One call to MLflow's REST API, carrying the env credentials as MLflow's client sends them.
    ((path, headers),) = seen
    assert path == "/api/2.0/mlflow/experiments/search?max_results=1"
    assert base64.b64decode(headers["Authorization"].removeprefix("Basic ")).decode() == f"ann:{MARKER}"


@pytest.mark.parametrize("status, body, fragment", [
    (401, b"{}", "the server refused us (HTTP 401 Unauthorized); set MLFLOW_TRACKING_USERNAME"),
    (403, b"{}", "the server refused us (HTTP 403 Forbidden)"),
    (404, b"<html>not here</html>", "not an MLflow tracking server (HTTP 404"),
    (200, b"<html>a web page</html>", "not an MLflow tracking server"),
])
def test_refusing_or_foreign_servers_are_named(http_server, monkeypatch, status, body, fragment):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", MARKER)
    url, seen = http_server(status, body)
    with pytest.raises(UserError, match="^--mlflow-uri http://127") as caught:
        check_uri(url)
    assert fragment in str(caught.value) and MARKER not in str(caught.value)
    assert [headers["Authorization"] for _, headers in seen] == [f"Bearer {MARKER}"]  # refused what we sent


@pytest.mark.parametrize("uri, fragment", [
    ("ftp://host/mlflow", "unknown scheme 'ftp'"),
    ("mlflow.db", "not a tracking URI"),
    ("http://127.0.0.1:9", "MLflow server unreachable"),
])
def test_bad_uris(uri, fragment):
    with pytest.raises(UserError, match=fragment):
        check_uri(uri)


def test_a_database_where_nothing_listens_is_refused_with_its_password_masked():
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UserError) as caught:
        check_uri(f"postgresql://ann:{MARKER}@127.0.0.1:{port}/mlflow")
    assert str(caught.value) == (f"--mlflow-uri postgresql://ann:***@127.0.0.1:{port}/mlflow: nothing answers at "
                                 f"127.0.0.1:{port} (Connection refused); start the database server or fix the "
                                 f"host and port")


def test_a_database_port_that_never_answers_is_given_up_after_the_connect_timeout(monkeypatch):
    """A host that takes the TCP connection and then says nothing (a firewall, a wrong service) must not
    hold the search up: the driver's own connect timeout ends it. Run in a thread, so that a check
    without a timeout fails this test instead of hanging it."""
    from tune_runner.tracking import uri as mlflow_uri
    from tune_runner.tracking.uri import CONNECT_TIMEOUT_S

    # The check's 5 s made 2 s (psycopg's least): what is tested is that the driver gets a timeout and keeps it.
    monkeypatch.setitem(mlflow_uri._check_database.__kwdefaults__, "timeout_s", 2)
    raised: list[Exception] = []

    def check(uri: str) -> None:
        try:
            check_uri(uri)
        except Exception as exc:  # noqa: BLE001 - examined below
            raised.append(exc)

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshake; nobody ever reads or answers
        port = silent.getsockname()[1]
        worker = threading.Thread(target=check, args=(f"postgresql://ann:{MARKER}@127.0.0.1:{port}/mlflow",),
                                  daemon=True)
        worker.start()
        worker.join(CONNECT_TIMEOUT_S + 5)
    assert not worker.is_alive(), f"still connecting after {CONNECT_TIMEOUT_S + 5} s"
    assert len(raised) == 1 and isinstance(raised[0], UserError), raised
    assert re.match(rf"--mlflow-uri postgresql://ann:\*\*\*@127.0.0.1:{port}/mlflow: cannot connect to the "
                    r"database \(.*timeout.*\); check the user", str(raised[0])), raised[0]


def test_a_missing_database_driver_is_named_with_its_package(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    with pytest.raises(UserError, match=r"^--mlflow-uri postgresql://ann:\*\*\*@db/mlflow: its database driver is "
                                        r"not installed \(.*psycopg.*\); install it in tune-rl's Python "
                                        r"\(pip install 'psycopg\[binary\]'\)$"):
        check_uri(f"postgresql://ann:{MARKER}@db/mlflow")


def test_sqlite_stores_are_checked_without_creating_anything(tmp_path):
    import sqlite3

    from tune_runner.tracking.uri import create_store_folder

    new = tmp_path / "new" / "m.db"
    assert check_uri(f"sqlite:///{new}") is None
    assert list(tmp_path.iterdir()) == []  # the folder is made when the search opens the store
    with pytest.raises(UserError, match=r"/new does not exist, and tune-rl makes only the last folder of a path"):
        check_uri(f"sqlite:///{tmp_path / 'new' / 'dir' / 'm.db'}")  # two folders to make: a typo, likely
    create_store_folder(f"sqlite:///{new}")  # what tracking.client does first
    assert new.parent.is_dir() and not new.exists()
    with sqlite3.connect(tmp_path / "store.db") as database:
        database.execute("CREATE TABLE runs (id TEXT)")
    assert check_uri(f"sqlite:///{tmp_path / 'store.db'}") is None
    (tmp_path / "notes.db").write_text("not a database, but long enough to be taken for one's header\n" * 4)
    with pytest.raises(UserError, match=r"notes.db is not an SQLite database \(file is not a database\)"):
        check_uri(f"sqlite:///{tmp_path / 'notes.db'}")
    with pytest.raises(UserError, match=r"cannot write .*/new \(Is a directory\); choose a file"):
        check_uri(f"sqlite:///{tmp_path / 'new'}")
    with pytest.raises(UserError, match=r"cannot write the store's folder \(.*notes.db: Not a directory\)"):
        check_uri(f"sqlite:///{tmp_path / 'notes.db' / 'm.db'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "notes.db", "store.db"]  # no probe left behind


def test_the_store_opened_while_ray_starts_is_one_that_exists_already(tmp_path):
    from tune_runner.tracking.uri import client, opens_without_writing
    from tune_runner.tuning.runner import _store_if_there

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    assert not opens_without_writing(uri) and _store_if_there(uri) is None
    assert list(tmp_path.iterdir()) == []  # a search refused by the checks on Ray leaves no store
    client(uri).search_experiments()  # the search creates it after those checks
    assert opens_without_writing(uri) and _store_if_there(uri).search_experiments()
    assert opens_without_writing("http://127.0.0.1:5000") and opens_without_writing("databricks")
    assert not opens_without_writing("postgresql://db/mlflow")  # an empty database gets its tables on opening
    assert not opens_without_writing("sqlite:///:memory:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits: nothing to refuse as root")
def test_a_store_folder_without_write_permission_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UserError, match=r"cannot write the store's folder \(.*locked: Permission denied\)"):
        check_uri(f"sqlite:///{locked / 'm.db'}")


def test_auth_headers_follow_mlflows_precedence(monkeypatch):
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert auth_headers() == {}
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok")
    assert auth_headers() == {"Authorization": "Bearer tok"}
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "u")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "p")
    assert auth_headers() == {"Authorization": "Basic dTpw"}  # username/password win, as in MLflow


def test_redacted_hides_passwords_in_uris():
    assert redacted("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert redacted(f"postgresql://ann:{MARKER}@db:5432/mlflow") == "postgresql://ann:***@db:5432/mlflow"
    assert redacted(f"https://{MARKER}@host/") == "https://***@host/"
    assert redacted("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"
    assert redacted(f"postgresql://db/mlflow?sslmode=require&password={MARKER}") == \
        "postgresql://db/mlflow?sslmode=require&password=***"  # libpq takes it in the query string too
    assert redacted(f"https://host/?access_token={MARKER}") == "https://host/?access_token=***"


def test_a_store_left_with_a_hot_journal_by_a_killed_writer_is_accepted_and_recovered(tmp_path):
    """kill -9 of a search mid-write leaves mlflow.db-journal: `resume` and `best` must still take the store
    (read-only, SQLite cannot roll the journal back and called it 'attempt to write a readonly database')."""
    import signal
    import sqlite3
    import subprocess
    import sys
    from contextlib import closing

    from tune_runner.tracking.uri import check_uri, read_sqlite

    path = tmp_path / "mlflow.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE runs (value)")
        db.executemany("INSERT INTO runs VALUES (?)", [(i,) for i in range(50_000)])
        db.commit()
    writer = ("import sqlite3, sys, time\ndb = sqlite3.connect(sys.argv[1])\ndb.execute('PRAGMA cache_size=2')\n"
              "db.execute('UPDATE runs SET value = value + 1')\nprint('mid-transaction', flush=True)\ntime.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", writer, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "mid-transaction"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    journal = path.with_name("mlflow.db-journal")
    assert journal.stat().st_size > 0  # the spilled pages' originals: a hot journal
    check_uri(f"sqlite:///{path}")
    with closing(read_sqlite(path)) as db:
        assert db.execute("SELECT SUM(value) FROM runs").fetchone()[0] == sum(range(50_000))  # rolled back
    assert not journal.exists()
