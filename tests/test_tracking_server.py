"""A real deployment shape: `mlflow server` on a PostgreSQL backend store with a local artifact
root (served through the server), started here; tune-rl logs to it over HTTP.

The PostgreSQL tests fail, not skip, where PostgreSQL cannot be started: CI has it installed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.mlflow_helpers import (
    CREDENTIAL_VARS,
    SEARCHED,
    Postgres,
    free_port,
    hand_spec,
    log_folder_search,
    log_synthetic_search,
    mlflow_server,
    postgres_binary,
    stop_tree,
    subprocess_env,
    trained_checkpoint,
    wait_http,
    write_search_folder,
)
from tune_runner.errors import UserError
from tune_runner.tracking.uri import check_uri
from tune_runner.trainables.catalog import backend

MARKER = "tune-rl-credential-5c1d"


@pytest.fixture(scope="module")
def postgres():
    try:
        cluster = Postgres().start()
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        pytest.fail(f"PostgreSQL could not be started for the tracking-server tests: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def server(postgres, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    proc = mlflow_server(backend=postgres.uri, artifacts=folder / "artifacts", port=port, log=folder / "server.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", proc=proc)
    except AssertionError:
        stop_tree(proc)
        raise AssertionError((folder / "server.log").read_text()[-3000:]) from None
    yield SimpleNamespace(url=url, proc=proc, folder=folder, log=folder / "server.log", postgres=postgres)
    assert not stop_tree(proc), "the MLflow server left processes behind"


def runs_of(client, experiment: str) -> tuple[list, list]:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return ([r for r in runs if "mlflow.parentRunId" not in r.data.tags],
            [r for r in runs if "mlflow.parentRunId" in r.data.tags])


def database_dump(postgres: Postgres) -> str:
    """Everything the server stored in PostgreSQL, as SQL text."""
    done = subprocess.run([*postgres.as_user, postgres_binary("pg_dump"), "-h", "127.0.0.1", "-p", str(postgres.port),
                           "-U", "tune", "mlflow"], capture_output=True, text=True, timeout=120,
                          env={**subprocess_env(), "PGPASSWORD": postgres.password})
    assert done.returncode == 0, done.stderr
    return done.stdout


def files_text(folder: Path) -> str:
    return "\n".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


@pytest.mark.e2e  # a real mlflow server on PostgreSQL: not for the quick unit run
def test_the_uri_check_passes_the_real_server_and_refuses_an_address_that_is_not_its_api(server):
    """The check calls the real server's REST API: the server's root passes, a path beneath it that
    is not MLflow's API (the same host, port and HTTP server) is refused by name."""
    assert check_uri(server.url) is None
    assert check_uri(server.url + "/") is None
    with pytest.raises(UserError, match=rf"^--mlflow-uri {server.url}/no-such-prefix: not an MLflow tracking "
                                        rf"server \(HTTP 404"):
        check_uri(server.url + "/no-such-prefix")


@pytest.mark.e2e  # a real mlflow server on PostgreSQL: not for the quick unit run
def test_two_concurrent_writers_get_complete_runs(server, tmp_path):
    """Two searches' worth of logging at once (threads, like two drivers) into one experiment."""
    results, errors = {}, []

    def write(name: str) -> None:
        try:
            results[name] = log_synthetic_search(server.url, name=name, folder=tmp_path / name)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(name,)) for name in ("writer-a", "writer-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    client = results["writer-a"]["client"]
    parents, children = runs_of(client, "oracle")
    mine = {p.info.run_name: p for p in parents if p.info.run_name in results}
    assert set(mine) == {"writer-a", "writer-b"}
    for name, parent in mine.items():
        kids = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        assert sorted(c.info.run_name for c in kids) == ["fake_00000", "fake_00001", "fake_00002"]
        for kid in kids:
            history = client.get_metric_history(kid.info.run_id, "episode_return_mean")
            expected = list(range(500, 2501, 500)) if kid.data.tags["tune_rl.status"] == "stopped_early" \
                else list(range(500, 5001, 500))
            assert sorted(m.step for m in history) == expected, (name, kid.info.run_name)
        assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {
            "best.yaml", "learning_curves.png", "trials.csv", "tune_rl_spec.yaml"}
        png = Path(client.download_artifacts(parent.info.run_id, "learning_curves.png", str(tmp_path / name)))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The runs are in PostgreSQL, the artifacts in the server's artifact root.
    dump = database_dump(server.postgres)
    assert all(parent.info.run_id in dump for parent in mine.values())
    assert len(list((server.folder / "artifacts").rglob("learning_curves.png"))) >= 2


@pytest.mark.e2e  # a real mlflow server on PostgreSQL: not for the quick unit run
def test_credentials_never_reach_runs_models_or_artifacts(server, tmp_path, monkeypatch):
    from tune_runner.tracking import log_model as model

    for name in CREDENTIAL_VARS:
        monkeypatch.setenv(name, MARKER)
    written = log_synthetic_search(server.url, name="credentials", folder=tmp_path / "search")
    client, parent = written["client"], written["parent"]
    learner, config = trained_checkpoint("ppo", tmp_path / "trial")
    learner.close()
    best = SimpleNamespace(trial_path=str(tmp_path / "trial"), config=config, trial_id="trial_00000")
    logged = model.log_policy(uri=server.url, experiment_id=written["experiment_id"], run_id=parent,
                              record=backend("ppo"), best=best, register_as="credentials-check")
    assert logged.version == "1"

    parents, children = runs_of(client, "oracle")
    for run in (p for p in parents + children if p.info.run_id == parent or
                p.data.tags.get("mlflow.parentRunId") == parent):
        data = run.data
        assert MARKER not in repr((data.params, data.tags, sorted(data.metrics)))
    for found in client.search_logged_models(experiment_ids=[written["experiment_id"]]):
        assert MARKER not in repr((found.params, found.tags))
    downloads = tmp_path / "downloads"
    client.download_artifacts(parent, "", str(downloads / "run"))
    import mlflow

    mlflow.set_tracking_uri(server.url)
    mlflow.artifacts.download_artifacts(artifact_uri=logged.uri, dst_path=str(downloads / "model"))
    assert (downloads / "model" / "MLmodel").is_file() and (downloads / "run" / "trials.csv").is_file()
    assert MARKER not in files_text(downloads)
    assert MARKER not in database_dump(server.postgres)
    assert MARKER not in files_text(server.folder / "artifacts") + server.log.read_text()


@pytest.mark.e2e
def test_two_concurrent_searches_on_the_postgres_backed_server(server, tmp_path):
    """Two `tune-rl search` processes (each with its own tiny Ray) log to one server at once."""
    env = subprocess_env(TUNE_RL_HOME=str(tmp_path / "home"), **{name: MARKER for name in CREDENTIAL_VARS})
    procs = {}
    for name in ("search-a", "search-b"):
        cmd = [sys.executable, "-m", "tune_runner", "search", "--space", "oracle", "--num-samples", "2",
               "--set", "budget=5000", "--set", "noise=0.0", "--mlflow-uri", server.url, "--name", name,
               "--storage", str(tmp_path / "results"), "--num-cpus", "1"]
        procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = {name: proc.communicate(timeout=600) for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, (name, outputs[name][1][-3000:])
        out, err = outputs[name]
        assert MARKER not in out + err
        assert f"mlflow     {server.url}" in out and "model      not logged (the oracle has no policy)" in out

    from tune_runner.tracking.callback import client as mlflow_client

    client = mlflow_client(server.url)
    parents, children = runs_of(client, "oracle")
    mine = {p.info.run_name: p for p in parents if p.info.run_name in procs}
    assert set(mine) == set(procs)
    for name, parent in mine.items():
        assert parent.info.status == "FINISHED" and parent.data.tags["tune_rl.status"] == "finished"
        kids = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        assert len(kids) == 2 and all(k.info.status == "FINISHED" for k in kids)
        for kid in kids:
            history = client.get_metric_history(kid.info.run_id, "episode_return_mean")
            assert [m.step for m in sorted(history, key=lambda m: m.step)] == [1000, 2000, 3000, 4000, 5000]
            assert MARKER not in repr((kid.data.params, kid.data.tags))
        assert {"best.yaml", "learning_curves.png", "trials.csv"} <= {
            a.path for a in client.list_artifacts(parent.info.run_id)}
        client.download_artifacts(parent.info.run_id, "", str(tmp_path / "downloads" / name))
    assert MARKER not in files_text(tmp_path / "downloads") + files_text(tmp_path / "results")
    assert MARKER not in database_dump(server.postgres)


@pytest.mark.e2e  # a real mlflow server on PostgreSQL: not for the quick unit run
def test_best_over_http_from_a_real_mlflow_server(server, cli, tmp_path):
    """The laptop case: the search logged to a tracking server; best reads it over HTTP (runs, metric
    histories, the spec artifact served by the server) and exports what the folder would. (This module's
    server: one server start less than a server of its own.)"""
    url = server.url
    folder = tmp_path / "results" / "cluster-search"
    folder.mkdir(parents=True)
    spec = hand_spec()
    write_search_folder(folder, spec)
    parent = log_folder_search(url, folder, spec)
    for flags in ([], ["--scope", "max"], ["--scope", "avg-last-3"]):
        local = cli("best", str(folder), *flags)
        remote = cli("best", f"runs:/{parent}", "--mlflow-uri", url, *flags)
        assert remote.status == 0, remote.err
        assert remote.out.splitlines() == [f"search     cluster-search  (MLflow run {parent}, {url})",
                                           *local.out.splitlines()]
    by_name = cli("best", "cluster-search", "--mlflow-uri", url, "--export", str(tmp_path / "best.yaml"))
    assert by_name.status == 0, by_name.err
    bundle = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert bundle["source"]["mlflow_run"] == f"runs:/{parent}" and bundle["checkpoint"] is None
    assert bundle["config"] == {**spec.fixed, **SEARCHED["h_00003"]}
