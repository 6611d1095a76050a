"""The `--mlflow-uri` a search logs to: checked before anything starts, shown without secrets.

Kept apart from tune_runner.tracking (which imports Ray Tune), so that `tune-rl dashboard`
and bad-input errors stay light.
"""

from __future__ import annotations

import base64
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tune_runner.errors import UserError

# Schemes MLflow tracks to: its REST API, or a store it opens itself (SQLAlchemy databases, files).
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
SCHEMES = ("http", "https", "file", "databricks", "databricks-uc", *DATABASE_SCHEMES)
CREDENTIAL_HINT = "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN"


def check_uri(uri: str) -> None:
    """Refuse a tracking URI that cannot work before anything starts: an unknown scheme, a
    server that is unreachable, refuses our credentials or is not MLflow, a folder we cannot create."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    shown = redacted(uri)
    if not scheme and not uri.startswith("databricks"):
        raise UserError(f"--mlflow-uri {shown}: not a tracking URI; use sqlite:///path/to/mlflow.db "
                        f"or http://host:port")
    if scheme and scheme not in SCHEMES:
        raise UserError(f"--mlflow-uri {shown}: unknown scheme {scheme!r}; use sqlite:///path/to/mlflow.db, "
                        f"http(s)://host:port or a database URI ({', '.join(DATABASE_SCHEMES[1:])}://...)")
    if scheme in ("http", "https"):
        _check_server(uri)
    elif scheme == "sqlite":
        folder = Path(uri.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--mlflow-uri {shown}: cannot create {folder} ({exc.strerror})") from None


def _check_server(uri: str) -> None:
    """One authenticated API call, as the MLflow client will make them (the same env credentials)."""
    shown = redacted(uri)
    base = uri.rstrip("/")
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/search?max_results=1",
                                     headers=auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=10, context=_tls_context(uri)) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise UserError(f"--mlflow-uri {shown}: the server refused us (HTTP {exc.code} {exc.reason}); "
                            f"{CREDENTIAL_HINT} (or check the server's --allowed-hosts)") from None
        raise UserError(f"--mlflow-uri {shown}: not an MLflow tracking server (HTTP {exc.code} {exc.reason} "
                        f"on its REST API); fix the address") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"--mlflow-uri {shown}: MLflow server unreachable ({reason}); "
                        f"start it (mlflow server) or fix the address") from None
    if not body.lstrip().startswith(b"{"):
        raise UserError(f"--mlflow-uri {shown}: not an MLflow tracking server (its REST API answered "
                        f"something else than JSON); fix the address")


def _tls_context(uri: str) -> ssl.SSLContext | None:
    """TLS as MLflow's client does it: MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_TRACKING_INSECURE_TLS."""
    if not uri.startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() in ("true", "1"):
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def auth_headers() -> dict[str, str]:
    """The Authorization header MLflow's client sends for its standard env credentials."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    if token:
        return {"Authorization": f"Bearer {token}"}
    return {}


# Query parameters that carry a secret (libpq's password=, a SAS token's sig=, an api_key=...).
SECRET_PARAM = re.compile(r"pass|pwd|token|secret|sig|credential|api_?key|access_?key", re.IGNORECASE)


def redacted(uri: str) -> str:
    """`uri` without a password or token written into it (user info or query string): what we print,
    log and save beside a search."""
    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc
    if parts.password is not None or (parts.username and "@" in parts.netloc):
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" if parts.password is not None else f"***@{host}"
        if parts.port:
            netloc += f":{parts.port}"
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query = parts.query
    if any(SECRET_PARAM.search(key) for key, _ in pairs):
        query = "&".join(f"{key}=***" if SECRET_PARAM.search(key) else f"{key}={urllib.parse.quote(value)}"
                         for key, value in pairs)
    if netloc == parts.netloc and query == parts.query:
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def artifact_location(uri: str) -> str | None:
    """For a SQLite store, artifacts go to `mlartifacts/` beside the database (MLflow's
    default would be ./mlruns in whatever folder the command ran from)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    return None
