"""A new SQLite store is a copy of a cached empty one (mlflow_uri.new_sqlite_store): the same tables, schema
version and rows as the store MLflow builds itself, made in a fraction of the time, never over a store that
exists, and MLflow's own way when the cache cannot be used."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tune_runner import paths
from tune_runner.tracking import uri as mlflow_uri


def dump(path: Path, *, skip_exp0: bool = True) -> dict:
    """Every table's schema and rows (the Default experiment's times and location left out)."""
    with closing(sqlite3.connect(path)) as db:
        # Tables and indexes by name (their SQL text differed between processes under xdist: not what is tested).
        schema = sorted(db.execute("SELECT type, name, '' FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        rows = {name: sorted(map(repr, db.execute(f'SELECT * FROM "{name}"')))  # noqa: S608 - our own table names
                for kind, name, _ in schema if kind == "table" and name != "experiments"}
        rows["experiments"] = list(db.execute("SELECT experiment_id, name, lifecycle_stage FROM experiments"))
    return {"schema": schema, "rows": rows}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_RL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.e2e  # MLflow's own migrations and ours into an empty cache (4-7 s): with the e2e tests
def test_a_new_store_is_the_store_mlflow_makes_with_the_default_experiment_beside_it(cache, tmp_path):
    from mlflow.tracking import MlflowClient

    own = tmp_path / "own" / "mlflow.db"
    own.parent.mkdir()
    MlflowClient(tracking_uri=f"sqlite:///{own}").search_experiments()  # MLflow's own way
    for name in ("a", "b"):  # the first builds the cached store, the second only copies it
        uri = f"sqlite:///{tmp_path / name / 'mlflow.db'}"
        client = mlflow_uri.client(uri)
        assert dump(tmp_path / name / "mlflow.db") == dump(own)
        (default,) = client.search_experiments()
        assert default.name == "Default" and default.artifact_location == f"{mlflow_uri.artifact_location(uri)}/0"
        run = client.create_run(client.create_experiment("e", artifact_location=mlflow_uri.artifact_location(uri)))
        client.log_metric(run.info.run_id, "m", 1.0)  # a working store
    assert [p.name for p in cache.iterdir()] == [f"mlflow-{__import__('mlflow').__version__}-empty.db"]
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.endswith(".tmp")]


def test_an_existing_store_is_never_replaced(tmp_path):
    # The session's cache (tests/conftest.py), built once: a fresh one would cost MLflow's migrations (2 s)
    # and change nothing tested, a copy of the cached store that must not land over the existing one.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_uri.client(uri)
    client.create_experiment("kept")
    mlflow_uri.new_sqlite_store(uri, tmp_path / "mlflow.db")  # as if another process had just made it
    # Read from the file, not through MLflow: its store for this uri stays cached with the old file open.
    with closing(sqlite3.connect(tmp_path / "mlflow.db")) as db:
        assert "kept" in [name for (name,) in db.execute("SELECT name FROM experiments")]


def test_an_unusable_cache_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TUNE_RL_CACHE", str(tmp_path / "file" / "cache"))  # cannot be made
    client = mlflow_uri.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]


def test_a_cache_file_that_is_no_store_leaves_the_store_to_mlflow(cache, tmp_path):
    from mlflow import __version__

    cache.mkdir()
    (cache / f"mlflow-{__version__}-empty.db").write_text("not a database")
    client = mlflow_uri.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    # Gone, so the next new store builds it as into an empty cache (the test above; 2 s of migrations again here)
    assert not (cache / f"mlflow-{__version__}-empty.db").exists()


def test_the_cache_folder_follows_tune_rl_cache_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("TUNE_RL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert paths.cache() == tmp_path / "tune-rl"
    monkeypatch.setenv("TUNE_RL_CACHE", str(tmp_path / "x"))
    assert paths.cache() == tmp_path / "x"
