"""`tune-rl best runs:/<parent run id>`: the same selection and export as from the results folder, read
from a real MLflow store that tune-rl's own logging code wrote (tests/mlflow_helpers.py), no Ray."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.mlflow_helpers import RETURNS, SEARCHED, hand_spec, log_folder_search, write_search_folder
from tune_runner.errors import UserError


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A finished search's folder, and the MLflow store its trials were logged to."""
    root = tmp_path_factory.mktemp("best-mlflow")
    folder = root / "results" / "hand-search"
    folder.mkdir(parents=True)
    spec = hand_spec()
    write_search_folder(folder, spec)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    parent = log_folder_search(uri, folder, spec)
    return SimpleNamespace(folder=folder, uri=uri, parent=parent, spec=spec, root=root)


def both(cli, logged, *flags):
    """`best` on the folder and on the parent run, with the same flags."""
    folder = cli("best", str(logged.folder), *flags)
    tracked = cli("best", f"runs:/{logged.parent}", "--mlflow-uri", logged.uri, *flags)
    assert folder.status == 0 and tracked.status == 0, (folder.err, tracked.err)
    return folder, tracked


@pytest.mark.parametrize("flags, trial", [
    ([], "h_00003"),                                  # last: the one that reached stop_at, soonest
    (["--scope", "max"], "h_00001"),                  # Ray's scope "all"
    (["--scope", "avg-last-3"], "h_00000"),           # our own mean of the last 3
    (["--scope", "avg-last-5"], "h_00003"),           # Ray's last-5-avg
    (["--mode", "min"], "h_00001"),                   # last, without stop_at (another mode)
])
def test_best_from_mlflow_picks_what_the_folder_picks(flags, trial, cli, logged):
    folder, tracked = both(cli, logged, *flags)
    assert f"best       {trial} " in folder.out, folder.out
    search_line, *rest = tracked.out.splitlines()
    assert search_line == f"search     hand-search  (MLflow run {logged.parent}, {logged.uri})"
    assert rest == folder.out.splitlines()  # the same trial, value, scope and config, shown the same


def test_a_search_that_reevaluated_gives_its_winner_from_the_folder_and_from_mlflow_alike(cli, tmp_path):
    """Without --scope, --metric or --mode, the search's own pick, read from its folder (reevaluation.json) and
    from its parent run (report/reevaluation.json, logged with its report): the same trial, value and scope."""
    from tune_runner.results import report, robust

    folder = tmp_path / "results" / "hand-search"
    folder.mkdir(parents=True)
    spec = hand_spec()
    write_search_folder(folder, spec)
    runs = {"h_00001": (480.0, 490.0, 500.0), "h_00003": (300.0, 310.0, 320.0)}
    verdict = robust.rank([robust.summarise(robust.Candidate(trial, {}, 1.0),
                                            [robust.SeedRun(1000 + i, v, None) for i, v in enumerate(values)],
                                            target=None) for trial, values in runs.items()], mode="max")
    report.save_verdict(verdict, folder, metric=spec.metric)
    here = SimpleNamespace(folder=folder, uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    here.parent = log_folder_search(here.uri, folder, spec)
    from tune_runner.tracking.parent import log_report  # as the search's end logs its report, the verdict in it

    shown = tmp_path / "report"  # the report's own plots and pages left out: only the verdict is read back
    shown.mkdir()
    shutil.copy(folder / "reevaluation.json", shown)
    assert log_report(here.uri, spec.name, folder, shown, search_id="cd" * 16) == here.parent
    mine, tracked = both(cli, here)
    assert mine.out.startswith("best       h_00001  episode_return_mean 490 (reevaluated IQM, max)"), mine.out
    assert tracked.out.splitlines()[1:] == mine.out.splitlines()
    scoped = cli("best", f"runs:/{here.parent}", "--mlflow-uri", here.uri, "--scope", "last")
    assert "best       h_00003 " in scoped.out  # asked for a scope: the last results pick
    for damaged, why in (("[1, 2]", "not the saved re-evaluation (a JSON object)"),
                         ('{"ranking": [{"trial_id": "h_00001"}]}', "not a saved re-evaluation (KeyError: 'seeds')")):
        (shown / "reevaluation.json").write_text(damaged)  # logged again over the good one
        log_report(here.uri, spec.name, folder, shown, search_id="cd" * 16)
        refused = cli("best", f"runs:/{here.parent}", "--mlflow-uri", here.uri)
        assert refused.status == 2 and refused.out == "", refused.out
        assert refused.err.startswith(f"tune-rl: runs:/{here.parent}/report/reevaluation.json: {why}")
        assert len(refused.err.splitlines()) == 1 and "--scope" in refused.err


def test_json_config_is_typed_back_as_the_trial_had_it(cli, logged, untouched):
    store = logged.root / "mlflow.db"
    before = (store.stat().st_mtime_ns, store.stat().st_size)
    folder, tracked = both(cli, logged, "--json", "--scope", "max")
    assert tracked.out == folder.out
    config = json.loads(tracked.out)
    assert config == {**logged.spec.fixed, **SEARCHED["h_00001"]}
    assert isinstance(config["num_epochs"], int) and isinstance(config["minibatch_size"], int)
    assert config["fcnet_hiddens"] == [128] and config["vf_clip_param"] is None
    untouched.check()  # reading wrote nothing here, started no Ray
    assert (store.stat().st_mtime_ns, store.stat().st_size) == before  # nor in the store


def test_a_search_is_found_by_its_name_or_its_mlflow_experiment(cli, logged):
    by_name = cli("best", "hand-search", "--mlflow-uri", logged.uri, "--json")
    by_experiment = cli("best", "ppo_small", "--mlflow-uri", logged.uri, "--json")
    assert by_name.status == by_experiment.status == 0, (by_name.err, by_experiment.err)
    assert json.loads(by_name.out) == json.loads(by_experiment.out) == {**logged.spec.fixed, **SEARCHED["h_00003"]}


def test_runs_reference_alone_reads_the_default_store(cli, logged, _isolated_home):
    shutil.copy(logged.root / "mlflow.db", _isolated_home / "mlflow.db")
    shutil.copytree(logged.root / "mlartifacts", _isolated_home / "mlartifacts")  # where the spec artifact is
    result = cli("best", f"runs:/{logged.parent}", "--json")
    assert result.status == 0, result.err
    assert json.loads(result.out)["lr"] == SEARCHED["h_00003"]["lr"]


def test_export_from_mlflow_is_the_folders_bundle_without_its_checkpoint(cli, logged, tmp_path, monkeypatch):
    from tune_runner.results import export
    from tune_runner.results.bundle import KEYS
    from tune_runner.tuning import verify

    (tmp_path / "checkpoint_000009").mkdir()  # a trial without a folder must not take the working folder's
    monkeypatch.chdir(tmp_path)
    cli("best", str(logged.folder), "--scope", "avg-last-3", "--export", str(tmp_path / "folder.yaml"))
    cli("best", f"runs:/{logged.parent}", "--mlflow-uri", logged.uri, "--scope", "avg-last-3",
        "--export", str(tmp_path / "mlflow.yaml"))
    from_folder = yaml.safe_load((tmp_path / "folder.yaml").read_text())
    from_mlflow = yaml.safe_load((tmp_path / "mlflow.yaml").read_text())
    assert from_folder["checkpoint"].endswith("checkpoint_000006") and from_mlflow["checkpoint"] is None
    assert from_mlflow["source"] == {**from_folder["source"], "mlflow_run": f"runs:/{logged.parent}",
                                     "mlflow_uri": logged.uri}
    same = [k for k in KEYS if k not in ("checkpoint", "source")]
    as_text = [yaml.safe_dump({k: bundle[k] for k in same}) for bundle in (from_mlflow, from_folder)]
    assert as_text[0] == as_text[1]  # as text: an int that came back a float (6.0) would differ
    assert from_mlflow["result"] == {"episode_return_mean": 300.0, "env_steps": 150_000, "training_iteration": 6,
                                     "score": 300.0, "scope": "avg-last-3"}
    # train --config and verify read it as they read the folder's: the same one-trial spec, the same refusal
    assert export.load(tmp_path / "mlflow.yaml") == export.load(tmp_path / "folder.yaml").with_overrides(
        source=str(tmp_path / "mlflow.yaml"))
    with pytest.raises(UserError, match="evaluation.ci: missing; verify needs a bundle exported after a re-eval"):
        verify.load(tmp_path / "mlflow.yaml")
    refused = cli("evaluate", str(tmp_path / "mlflow.yaml"))
    assert refused.status == 2 and f"checkpoint: null, exported from MLflow (runs:/{logged.parent}), which holds " \
                                   "no trial checkpoints; export from the search's results folder" in refused.err


def test_a_search_logs_its_spec_on_its_parent_run(logged):
    from mlflow.tracking import MlflowClient

    from tune_runner.tuning.resume import read_spec

    client = MlflowClient(tracking_uri=logged.uri)
    text = client.download_artifacts(logged.parent, "tune_rl_spec.yaml", str(logged.root / "download"))
    assert Path(text).read_text() == (logged.folder / "tune_rl_spec.yaml").read_text()
    assert read_spec(logged.folder) == logged.spec


def test_params_are_typed_back_by_their_distribution():
    from tune_runner.results.tracked import typed
    from tune_runner.spec.search_space import Param

    where = "runs:/x trial t"
    assert typed(Param("mode", "choice", ("1", 1, None)), {"mode": "1"}, where=where) == "1"  # the first that logs "1"
    assert typed(Param("mode", "choice", (1, "1")), {"mode": "1"}, where=where) == 1
    assert typed(Param("act", "choice", ("None", None)), {"act": "None"}, where=where) == "None"
    assert typed(Param("flag", "grid", (True, False)), {"flag": "False"}, where=where) is False
    assert typed(Param("net", "choice", ({"a": 1}, {"a": 2})), {"net.a": "2"}, where=where) == {"a": 2}
    assert typed(Param("n", "randint", (1, 9)), {"n": "7"}, where=where) == 7
    assert typed(Param("lr", "loguniform", (1e-5, 1e-2)), {"lr": "0.00012345678901234567"},
                 where=where) == 0.00012345678901234567
    with pytest.raises(UserError, match="runs:/x trial t: its run has no param lr"):
        typed(Param("lr", "uniform", (0.0, 1.0)), {}, where=where)


def test_metric_summary_is_ray_tunes():
    from tune_runner.results.tracked import summary

    values = RETURNS["h_00001"]
    assert summary(values) == {"max": 490.0, "min": 100.0, "avg": sum(values) / 6, "last": 100.0,
                               "last-5-avg": (490 + 200 + 150 + 120 + 100) / 5, "last-10-avg": sum(values) / 6}
    assert summary([]) == {}
