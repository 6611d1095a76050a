"""--mlflow-uri checks against small local HTTP servers that answer as a refusing, foreign or
MLflow-like server would; credentials go in headers and never into what we print."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from tune_runner.errors import UserError
from tune_runner.mlflow_uri import auth_headers, check_uri, redacted

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


def test_database_uris_pass_without_a_connection(monkeypatch):
    """MLflow opens a database store itself; the check must not look the host up or connect to it."""
    tried = []

    def refuse(*args: object, **kwargs: object) -> None:
        tried.append(args)
        raise OSError("a test forbids the network here")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for uri in ("postgresql://mlflow@db.invalid:5432/mlflow", "postgresql+psycopg2://mlflow@db.invalid/mlflow",
                "mysql://ann@db.invalid/mlflow"):
        assert check_uri(uri) is None, uri
    assert tried == []
    with pytest.raises(UserError, match="MLflow server unreachable"):  # the same guard sees an HTTP check
        check_uri("http://db.invalid:5000")
    assert tried


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
