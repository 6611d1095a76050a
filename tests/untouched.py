"""What a refused command must leave as it found it, checked after the fact: no file written under
TUNE_RL_HOME or the working folder, no MLflow run in the store it was pointed at, no Ray (the
`untouched` fixture in conftest.py pairs this with `forbid_ray`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tune_runner.tracking.uri import redacted


def files_under(roots: Iterable[Path]) -> dict[Path, tuple[int, int] | None]:
    """Every path under `roots`, with (mtime, size) for a file: what a command could have written."""
    found: dict[Path, tuple[int, int] | None] = {}
    for root in roots:
        for path in root.rglob("*"):
            found[path] = (path.stat().st_mtime_ns, path.stat().st_size) if path.is_file() else None
    return found


def mlflow_runs(uri: str) -> int:
    """How many runs an MLflow database store holds, read with SQL: 0 where it or its tables do not
    exist, or where it cannot be opened at all (then no command could have written a run there either)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    if uri.startswith("sqlite:") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return 0  # connecting would create the file
    try:
        engine = sqlalchemy.create_engine(uri, poolclass=NullPool)
        with engine.connect() as connection:
            if not sqlalchemy.inspect(connection).has_table("runs"):
                return 0
            return connection.execute(sqlalchemy.text("SELECT COUNT(*) FROM runs")).scalar_one()
    except (ImportError, sqlalchemy.exc.SQLAlchemyError):
        return 0


class Untouched:
    """What a refused command must leave as it was: no file written under TUNE_RL_HOME or the working
    folder (a results folder, mlflow.db, ./mlruns...), no MLflow run in any store it was pointed at, no Ray."""

    def __init__(self, *, ray_calls: list[str], roots: Sequence[Path], default_store: str) -> None:
        self.ray_calls, self.roots, self.default_store = ray_calls, roots, default_store
        self.mark()

    def mark(self) -> None:
        """Take the picture of 'before' now (once a test has laid out its own files)."""
        self.before = files_under(self.roots)

    def check(self, argv: Sequence[str] = ()) -> None:
        """After the command `argv`: its --mlflow-uri (or the default store) holds no run."""
        assert not self.ray_calls, "Ray was started:\n" + "\n".join(self.ray_calls)
        after = files_under(self.roots)
        changed = sorted(str(p) for p in set(after) | set(self.before) if after.get(p, 0) != self.before.get(p, 0))
        assert not changed, f"written: {changed}"
        uris = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--mlflow-uri"] or [self.default_store]
        for uri in uris:
            if uri.split(":", 1)[0].split("+", 1)[0] in ("sqlite", "postgresql", "mysql"):
                assert mlflow_runs(uri) == 0, f"an MLflow run was left in {redacted(uri)}"
