"""The `--mlflow-uri` a search logs to: checked before anything starts, shown without secrets.

Kept apart from tune_runner.tracking.callback (which imports Ray Tune), so that `tune-rl dashboard`
and bad-input errors stay light.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError

# Schemes MLflow tracks to: its REST API, or a store it opens itself (SQLAlchemy databases, files).
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
SCHEMES = ("http", "https", "file", "databricks", "databricks-uc", *DATABASE_SCHEMES)
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}  # mssql's host may be an ODBC DSN: probed if a port is given
# Driver modules whose pip package has another name (the others install under the module's name).
DRIVER_PACKAGES = {"psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient"}
CONNECT_TIMEOUT_S = 5  # a database that has not answered by then will not answer MLflow either
MAX_PARAM_LENGTH = 500  # MLflow's limit on a param value in older stores
CREDENTIAL_HINT = "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN"


def check_uri(uri: str) -> None:
    """Refuse a tracking URI that cannot work before anything starts: an unknown scheme, a server or
    database that is unreachable, refuses our credentials or is not MLflow's, a file we cannot write.
    Nothing is created (create_store_folder does that once the search starts)."""
    from tune_runner.paths import check_home, default_mlflow_uri

    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    shown = redacted(uri)
    if uri == default_mlflow_uri():
        check_home()  # its folder: named as the variable it comes from, not as a flag never given
    if not scheme and not uri.startswith("databricks"):
        raise UserError(f"--mlflow-uri {shown}: not a tracking URI; use sqlite:///path/to/mlflow.db "
                        f"or http://host:port")
    if scheme and scheme not in SCHEMES:
        raise UserError(f"--mlflow-uri {shown}: unknown scheme {scheme!r}; use sqlite:///path/to/mlflow.db, "
                        f"http(s)://host:port or a database URI ({', '.join(DATABASE_SCHEMES[1:])}://...)")
    if scheme in ("http", "https"):
        _check_server(uri)
    elif scheme == "sqlite":
        _check_sqlite(uri)
    elif scheme == "file":
        _check_folder(uri, Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path)))
    elif scheme in DATABASE_SCHEMES:
        _check_database(uri)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (sqlite:////abs or sqlite:///relative); None in memory."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path.removeprefix("/"))
    return Path(path).expanduser() if path and path != ":memory:" else None


def read_sqlite(path: Path) -> Any:
    """An SQLite connection for reading `path` (use it in `closing`), read-only where it can be. A writer killed
    mid-transaction (kill -9 of a search) leaves a hot journal that only a writer may roll back: read-only,
    SQLite then answers "attempt to write a readonly database". Such a file is opened read-write (never
    created), which rolls it back as MLflow's own first connection would."""
    import sqlite3

    where = path.resolve().as_uri()
    database = sqlite3.connect(f"{where}?mode=ro", uri=True)
    try:
        database.execute("PRAGMA schema_version")
        return database
    except sqlite3.OperationalError as exc:
        database.close()
        if "readonly" not in str(exc):
            raise
    return sqlite3.connect(f"{where}?mode=rw", uri=True)


def opens_without_writing(uri: str) -> bool:
    """Whether opening a client on `uri` creates nothing: a SQLite file that exists already, or a
    server (a new SQLite store, or an empty database, is created with its tables on opening)."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if scheme == "sqlite":
        path = sqlite_path(uri)
        return path is not None and path.is_file()
    return scheme in ("http", "https") or uri.startswith("databricks")


def create_store_folder(uri: str) -> Path | None:
    """Make the folder of a SQLite store (MLflow creates the database file, not its folder); the file's path,
    or None for any other store."""
    path = sqlite_path(uri) if uri.lower().startswith("sqlite:") else None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _check_folder(uri: str, folder: Path) -> None:
    """The store's folder can be created (its last folder only) and written, tried without leaving anything."""
    from tune_runner.paths import writable_folder

    writable_folder(folder, setting=f"--mlflow-uri {redacted(uri)}", what="write the store's folder")


def _check_sqlite(uri: str) -> None:
    """The store's folder must be writable (SQLite writes journals beside the file), and an existing
    file must be a writable SQLite database. Tried without writing anything."""
    import sqlite3

    shown, path = redacted(uri), sqlite_path(uri)
    if path is None:
        return
    _check_folder(uri, path.parent)
    if not path.exists():
        return
    try:
        with open(path, "r+b"):
            pass
        with closing(read_sqlite(path)) as database:
            database.execute("PRAGMA schema_version")
    except OSError as exc:
        raise UserError(f"--mlflow-uri {shown}: cannot write {path} ({exc.strerror}); choose a file you "
                        f"can write to") from None
    except sqlite3.Error as exc:
        raise UserError(f"--mlflow-uri {shown}: {path} is not an SQLite database ({exc}); point it at an "
                        f"MLflow store or at a new file") from None


def _check_database(uri: str, *, timeout_s: int = CONNECT_TIMEOUT_S) -> None:
    """Connect once, as MLflow will (SQLAlchemy and the URI's driver), giving up after `timeout_s`."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    shown = redacted(uri)
    try:
        url = sqlalchemy.engine.make_url(uri)
        engine = sqlalchemy.create_engine(url, poolclass=NullPool,
                                          connect_args=_timeout_args(url.get_driver_name(), timeout_s))
    except ImportError as exc:  # create_engine imports the driver
        package = f" (pip install {DRIVER_PACKAGES.get(exc.name, exc.name)})" if exc.name else ""
        raise UserError(f"--mlflow-uri {shown}: its database driver is not installed ({exc}); install it in "
                        f"tune-rl's Python{package}") from None
    except sqlalchemy.exc.ArgumentError as exc:
        raise UserError(f"--mlflow-uri {shown}: not a database URI SQLAlchemy reads ({exc}); write "
                        f"{uri.split('://', 1)[0].split('+', 1)[0]}://user:password@host:port/database") from None
    if url.host:
        _check_reachable(url, shown=shown, timeout_s=timeout_s)
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.DBAPIError as exc:
        reason = _first_line(str(exc.orig), secret=url.password)
        raise UserError(f"--mlflow-uri {shown}: cannot connect to the database ({reason}); check the user, the "
                        f"password and the database name (the database must exist: MLflow creates its tables, "
                        f"not the database)") from None
    finally:
        engine.dispose()


def _check_reachable(url: Any, *, shown: str, timeout_s: float) -> None:
    """The host and port answer at all: a clear line, and no driver waits on a dead host."""
    import socket

    port = url.port or DEFAULT_PORTS.get(url.get_backend_name())
    if port is None:
        return
    try:
        with socket.create_connection((url.host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise UserError(f"--mlflow-uri {shown}: nothing answers at {url.host}:{port} ({reason}); start the "
                        f"database server or fix the host and port") from None


def _timeout_args(driver: str, timeout_s: int) -> dict[str, Any]:
    """The driver's own connect-timeout argument (each names it differently)."""
    name = {"psycopg": "connect_timeout", "psycopg2": "connect_timeout", "pymysql": "connect_timeout",
            "mysqldb": "connect_timeout", "mysqlconnector": "connection_timeout", "pg8000": "timeout",
            "pyodbc": "timeout", "pymssql": "login_timeout"}.get(driver)
    return {name: timeout_s} if name else {}


def _first_line(text: str, *, secret: str | None) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "no reason given")
    return line.replace(secret, "***") if secret else line


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


def flat_params(values: dict[str, Any]) -> dict[str, str]:
    """Params as MLflow strings; nested dicts become dotted keys."""
    out: dict[str, str] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in flat_params(value).items()})
        else:
            out[key] = str(value)[:MAX_PARAM_LENGTH]
    return out


def artifact_location(uri: str) -> str | None:
    """For a SQLite store, artifacts go to `mlartifacts/` beside the database (MLflow's
    default would be ./mlruns in whatever folder the command ran from)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    return None


def client(uri: str) -> Any:
    """An MlflowClient for `uri` (imported lazily: mlflow is slow to import). A new SQLite store is a copy
    of a cached empty one (new_sqlite_store)."""
    from mlflow.tracking import MlflowClient

    path = create_store_folder(uri)
    if path is not None and not path.exists():
        new_sqlite_store(uri, path)
    return MlflowClient(tracking_uri=uri)


def new_sqlite_store(uri: str, path: Path) -> None:
    """Create the SQLite store at `path` as a copy of an empty one kept in the cache, one per MLflow version:
    MLflow builds a new store's tables through its whole chain of schema migrations, 1.7-3 s here, and a
    copy takes 0.05 s. The copy's Default experiment points at the store's mlartifacts/ folder (MLflow's
    own choice would be ./mlruns of whatever folder the command ran in). Without a usable cache, or if
    anything goes wrong, nothing is created here and MLflow creates the store as it always does."""
    import shutil
    import sqlite3

    try:
        template = _empty_store()
    except (OSError, sqlite3.Error):
        return
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(template, staged)
        with closing(sqlite3.connect(staged)) as database, database:
            database.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                             (f"{artifact_location(uri)}/0",))
        os.link(staged, path)  # never over a store another process made meanwhile
    except sqlite3.DatabaseError:
        template.unlink(missing_ok=True)  # a damaged cached store: made again next time
    except (OSError, sqlite3.Error):
        pass
    finally:
        staged.unlink(missing_ok=True)


def _empty_store() -> Path:
    """The cached empty store of this MLflow version, made by MLflow itself on first use."""
    import shutil
    import tempfile

    from mlflow import __version__
    from mlflow.tracking import MlflowClient

    from tune_runner.paths import cache

    template = cache() / f"mlflow-{__version__}-empty.db"
    if template.is_file():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=template.parent) as tmp:
        made = Path(tmp) / "empty.db"
        MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()  # creates every table
        shutil.copyfile(made, Path(tmp) / "copy.db")  # the first client's engine stays open on `made`
        os.replace(Path(tmp) / "copy.db", template)
    return template


# A population trial's member has a run under its trial's (tracking.callback), with these tags beside
# tune_rl.trial_id: what tells it from a trial's run, and the search it belongs to, two levels up.
MEMBER_TAG = "tune_rl.member_id"
SEARCH_TAG = "tune_rl.search_run_id"


def member_runs(mlflow: Any, experiment_id: str, parent: str) -> list[Any]:
    """The runs of the members of a search's population trials, found by the search's parent run id."""
    return mlflow.search_runs([experiment_id], filter_string=tag_filter(SEARCH_TAG, parent), max_results=50_000)


def find_parent(mlflow: Any, experiment_id: str, *, search_id: str | None, exp_path: Path) -> str | None:
    """The parent run of a search, for a resume: found by the search id saved with it (tune_rl_run.yaml),
    or, for a search saved before ids, by its experiment-path tag."""
    key, value = ("tune_rl.search_id", search_id) if search_id else ("tune_rl.experiment_path", str(exp_path))
    runs = mlflow.search_runs([experiment_id], filter_string=tag_filter(key, value), max_results=1000)
    parents = [r for r in runs if r.data.tags.get(key) == value and "mlflow.parentRunId" not in r.data.tags]
    return parents[0].info.run_id if parents else None


def tag_filter(key: str, value: str) -> str:
    """An MLflow filter for runs whose tag `key` is `value` (or, for some values, a few more: compare the
    tag exactly). MLflow's filter grammar has no escapes inside a string constant, so `value` is quoted
    with a quote it does not contain; one holding both quotes, or a backslash (which the SQL tokenizer
    reads as an escape), becomes a LIKE pattern with `_` (any one character) in their place."""
    if "\\" not in value:
        for quote in ("'", '"'):
            if quote not in value:
                return f"tags.`{key}` = {quote}{value}{quote}"
    pattern = "".join("_" if c in "'\"\\" else c for c in value)
    return f"tags.`{key}` LIKE '{pattern}'"


# MLflow work done in a short-lived child (`python -c ...`), so that MLflow's import neither sits on the
# caller's critical path nor stays in its memory: the child prints one JSON line, an answer or {"error"}.
def answer_in_child(work: Callable[[], dict[str, Any]]) -> None:
    """Run `work` in the child and print its answer, or the error it raised, as the last stdout line."""
    try:
        answer = work()
    except Exception as exc:  # noqa: BLE001 - the parent reports it in one line
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)


def child_answer(out: str, err: str, *, doing: str) -> dict[str, Any]:
    """The child's answer from its stdout (its stderr's last line if it died first); RuntimeError
    `<doing> failed: <reason>` for an error."""
    lines = out.strip().splitlines()
    answer = json.loads(lines[-1]) if lines else {"error": (err.strip().splitlines() or ["no output"])[-1]}
    if "error" in answer:
        raise RuntimeError(f"{doing} failed: {answer['error']}")
    return answer
