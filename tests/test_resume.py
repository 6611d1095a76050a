"""What a search saves to be resumed, read back without Ray: the run options round trip, the flags a resume
refuses, the printed resume command, and finding the MLflow parent run in a real SQLite store."""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import replace

import pytest
import yaml

from tests.resume_helpers import options, record_runs, saved_search
from tune_runner.errors import UserError
from tune_runner.spec.experiment import load_spec
from tune_runner.tracking import callback as tracking
from tune_runner.tracking import parent as parent_run
from tune_runner.tuning import resume, runner

SECRET = "tune-rl-secret-9c1e"


@pytest.fixture
def no_run(monkeypatch):
    return record_runs(monkeypatch)


def test_the_run_options_come_back_as_saved_whatever_the_current_defaults(_isolated_home, tmp_path, monkeypatch,
                                                                          cli, no_run):
    opts = options(tmp_path)
    folder = saved_search(opts)
    monkeypatch.setenv("TUNE_RL_HOME", str(tmp_path / "another-home"))  # new defaults for store and results
    result = cli("resume", str(folder))
    assert result.status == 0, result.err
    [(spec, again)] = no_run
    assert again == replace(opts, name="exp", resume=True)
    assert spec == resume.read_spec(folder)
    assert "note:" not in result.out


def test_the_options_file_is_plain_yaml_with_absolute_paths_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = options(tmp_path, mlflow_uri="sqlite:///mlflow.db", address="ray://head:10001")
    folder = saved_search(opts)
    raw = yaml.safe_load((folder / resume.RUN_FILE).read_text())
    assert raw["mlflow_uri"] == f"sqlite:///{tmp_path / 'mlflow.db'}"  # not relative to the folder it ran from
    assert raw["storage"] == str(tmp_path / "elsewhere") and raw["address"] == "ray://head:10001"
    assert resume.read_run(folder) == raw
    assert sorted(p.name for p in folder.parent.iterdir()) == ["exp"]  # no staging folder left behind

    secret = options(tmp_path, mlflow_uri=f"postgresql://ann:{SECRET}@db:5432/mlflow?sslmode=require")
    folder = saved_search(secret, "with-secret")
    text = (folder / resume.RUN_FILE).read_text()
    assert SECRET not in text and "postgresql://ann:***@db:5432/mlflow?sslmode=require" in text


def test_a_uri_secret_is_asked_for_again_and_then_used(tmp_path, cli, no_run):
    uri = f"postgresql://ann:{SECRET}@db:5432/mlflow"
    folder = saved_search(options(tmp_path, mlflow_uri=uri))
    missing = cli("resume", str(folder))
    assert missing.status == 2 and len(missing.err.strip().splitlines()) == 1
    assert "--mlflow-uri: missing; exp logs to postgresql://ann:***@db:5432/mlflow" in missing.err
    assert SECRET not in missing.err and not no_run
    given = cli("resume", str(folder), "--mlflow-uri", uri.replace(SECRET, "rotated"))
    assert given.status == 0, given.err
    assert no_run[0][1].mlflow_uri == uri.replace(SECRET, "rotated")


@pytest.mark.parametrize("argv, fragment", [
    (["--mlflow-uri", "sqlite:////tmp/somewhere-else.db"],
     "--mlflow-uri sqlite:////tmp/somewhere-else.db: exp logs to sqlite:///"),
    (["--storage", "file:///tmp/bucket"], "--storage file:///tmp/bucket: exp keeps its results in the folder "),
])
def test_a_resume_that_would_split_the_search_is_refused(argv, fragment, _isolated_home, cli, no_run):
    saved_search(options(_isolated_home, storage=_isolated_home / "results"))
    result = cli("resume", "exp", *argv)
    assert result.status == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert fragment in result.err and not no_run


def test_a_uri_search_resumes_from_the_uri_and_refuses_another_one(tmp_path, _isolated_home, cli, no_run,
                                                                   monkeypatch):
    bucket = (tmp_path / "bucket").as_uri()
    opts = options(tmp_path, storage=bucket)
    folder = saved_search(opts)
    assert folder == _isolated_home / "results" / "exp"
    (tmp_path / "bucket" / "exp" / "tuner.pkl").write_bytes(b"stub")  # Tune's state lives at the URI
    wrong = cli("resume", "exp", "--storage", (tmp_path / "other-bucket").as_uri())
    assert wrong.status == 2 and f"exp keeps its results at {bucket}" in wrong.err
    monkeypatch.setenv("TUNE_RL_HOME", str(tmp_path / "second-machine"))  # no local copy: fetched from the URI
    result = cli("resume", "exp", "--storage", bucket)
    assert result.status == 0, result.err
    assert no_run[0][1] == replace(opts, name="exp", resume=True)
    assert (tmp_path / "second-machine" / "results" / "exp" / resume.RUN_FILE).is_file()


def test_num_cpus_may_change_on_resume_but_not_for_a_cluster(tmp_path, cli, no_run):
    local = saved_search(options(tmp_path), "local")
    assert cli("resume", str(local), "--num-cpus", "1", "--verbose").status == 0
    assert no_run[0][1].num_cpus == 1 and no_run[0][1].verbose
    cluster = saved_search(options(tmp_path, address="auto", num_cpus=None, num_gpus=None), "cluster")
    result = cli("resume", str(cluster), "--num-cpus", "1")
    assert result.status == 2 and "--num-cpus: sizes a local Ray; cluster joins the Ray cluster at auto" in result.err


@pytest.mark.parametrize("flags", [["--space", "oracle"], ["--set", "budget=5000"], ["--max-failures", "3"],
                                   ["--no-reevaluate"], ["--register-model", "m"], ["--address", "auto"]])
def test_search_resume_refuses_what_it_would_drop(flags, tmp_path, cli, no_run):
    folder = saved_search(options(tmp_path))
    result = cli("search", "--resume", str(folder), *flags)
    assert result.status == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert f"{flags[0]}: a resumed search keeps the space and options it was started with" in result.err
    assert f"run: tune-rl resume {folder}" in result.err and not no_run
    assert cli("search", "--resume", str(folder), "--num-cpus", "1").status == 0 and no_run


def test_a_search_saved_before_run_options_resumes_with_this_commands_flags(tmp_path, _isolated_home, cli, no_run):
    folder = saved_search(options(_isolated_home, storage=_isolated_home / "results"))
    (folder / resume.RUN_FILE).unlink()
    result = cli("resume", "exp", "--mlflow-uri", f"sqlite:///{tmp_path / 'given.db'}")
    assert result.status == 0, result.err
    assert result.out.startswith("note: exp has no tune_rl_run.yaml (started before tune-rl saved run options)")
    opts = no_run[0][1]
    assert opts == runner.RunOptions(storage=folder.parent, mlflow_uri=f"sqlite:///{tmp_path / 'given.db'}",
                                     name="exp", resume=True)
    assert resume.run_command("exp", opts) == f"tune-rl resume exp --mlflow-uri sqlite:///{tmp_path / 'given.db'}"


def test_the_printed_resume_command_parses_back_to_the_same_search(tmp_path, _isolated_home):
    from tune_runner.cli.main import build_parser

    default = options(_isolated_home, storage=_isolated_home / "results")
    assert resume.run_command("exp", default) == "tune-rl resume exp"  # the saved options carry the rest
    odd = options(tmp_path, storage=tmp_path / "it's here")
    line = resume.run_command("exp", odd)
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert (args.command, args.name, args.storage, args.mlflow_uri) == ("resume", "exp", odd.storage, None)
    uri = options(tmp_path, storage="s3://bucket/results", mlflow_uri=f"https://{SECRET}@mlflow.example")
    assert resume.run_command("exp", uri) == ("tune-rl resume exp --storage s3://bucket/results --mlflow-uri "
                                          "'https://***@mlflow.example'  # put the secret back in place of ***")


def test_finding_the_parent_run_in_a_real_store_with_quotes_in_the_path(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, "space", uri)
    spec = load_spec("oracle")
    paths = [tmp_path / "it's", tmp_path / 'say "hi"', tmp_path / "both ' and \"", tmp_path / "back\\slash",
             tmp_path / "100%_done"]
    decoys = [tmp_path / "it_s", tmp_path / "both _ and _", tmp_path / "back_slash", tmp_path / "100%xdone"]
    for decoy in decoys:  # what a LIKE pattern would also match: the newest, so found first if not excluded
        parent_run.open_run(client, exp_id, spec, name="decoy", exp_path=decoy)
    parents = {}
    for path in paths:
        parents[path] = parent_run.open_run(client, exp_id, spec, name=path.name, exp_path=path)
        client.create_run(exp_id, tags={"mlflow.parentRunId": parents[path], "tune_rl.experiment_path": str(path)})
    for decoy in decoys:
        parent_run.open_run(client, exp_id, spec, name="decoy", exp_path=decoy)
    for path in paths:
        assert tracking.find_parent(client, exp_id, search_id=None, exp_path=path) == parents[path], path
    assert tracking.find_parent(client, exp_id, search_id=None, exp_path=tmp_path / "never") is None
    by_id = parent_run.open_run(client, exp_id, spec, name="moved", exp_path=tmp_path / "old place",
                                search_id="ab" * 16)
    assert tracking.find_parent(client, exp_id, search_id="ab" * 16, exp_path=tmp_path / "new place") == by_id


def test_a_finished_search_says_so_and_starts_nothing(tmp_path, cli, no_run):
    folder = saved_search(options(tmp_path))
    resume.mark_finished(folder, status="finished", counts={"done": 3})
    result = cli("resume", str(folder))
    assert result.status == 0 and "exp finished already (3 trials: 3 done); nothing to resume" in result.out
    assert not no_run


def test_save_refuses_a_folder_that_appeared_meanwhile(tmp_path):
    opts = options(tmp_path)
    saved_search(opts)
    with pytest.raises(UserError, match="--name exp: cannot create .*/exp"):
        resume.save(runner.local_folder(opts.storage, "exp"), spec=load_spec("oracle"), options=opts)
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["exp"]


def test_the_report_finds_the_parent_run_by_search_id_or_by_a_quoted_path(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, "oracle", uri)
    spec = load_spec("oracle")
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("<html></html>")
    old = parent_run.open_run(client, exp_id, spec, name="old", exp_path=tmp_path / "it's old")
    assert parent_run.log_report(uri, "oracle", tmp_path / "it's old", report) == old
    new = parent_run.open_run(client, exp_id, spec, name="new", exp_path=tmp_path / "was here",
                              search_id="cd" * 16)
    assert parent_run.log_report(uri, "oracle", tmp_path / "moved", report, search_id="cd" * 16) == new
    assert [a.path for a in client.list_artifacts(new, "report")] == ["report/index.html"]


def followed(printed: str, cli, no_run: list) -> runner.RunOptions:
    """Run the `tune-rl resume ...` command at the end of `printed` word for word, as a shell reads it (a note
    after # is not a word); the options the resume would run the search with."""
    line = printed[printed.index("tune-rl resume "):].strip()
    argv = shlex.split(line, comments=True)
    assert argv[:2] == ["tune-rl", "resume"], line
    result = cli(*argv[1:])
    assert result.status == 0, (line, result.err)  # past "no such folder": the resume reached runner.run
    return no_run.pop()[1]


@pytest.fixture
def elsewhere(tmp_path, _isolated_home):
    """A search saved under a --storage other than the default (a quote and a space in its path) and logging to
    a store other than the default."""
    opts = options(tmp_path, storage=tmp_path / "it's results", mlflow_uri=f"sqlite:///{tmp_path / 'store.db'}")
    saved_search(opts)
    return replace(opts, name="exp", resume=True)


def test_the_hint_of_a_refused_search_resume_works_as_printed(elsewhere, cli, no_run):
    refused = cli("search", "--resume", "exp", "--storage", str(elsewhere.storage), "--space", "oracle")
    assert refused.status == 2 and not no_run, refused.err
    assert followed(refused.err, cli, no_run) == elsewhere


def test_the_hint_of_a_name_taken_works_as_printed(elsewhere, cli, forbid_ray, monkeypatch):
    refused = cli("search", "--space", "oracle", "--storage", str(elsewhere.storage), "--name", "exp")
    assert refused.status == 2 and "--name exp: " in refused.err and "exists already" in refused.err, refused.err
    assert followed(refused.err, cli, record_runs(monkeypatch)) == elsewhere


def test_the_hints_of_an_interrupted_search_work_as_printed(elsewhere, cli, monkeypatch, no_run):
    """tr.Interrupted names the Python call and the shell command; each continues the same search."""
    import tune_runner as tr

    def interrupted(spec, opts, **_):
        return runner.Outcome(runner.local_folder(opts.storage, opts.name), None, None, Counter(), 1.0,
                              interrupted=True)

    monkeypatch.setattr(runner, "run", interrupted)
    with pytest.raises(tr.Interrupted) as raised:
        tr.search("oracle", name="exp", storage=elsewhere.storage, mlflow_uri=elsewhere.mlflow_uri)
    message = str(raised.value)
    no_run = record_runs(monkeypatch)
    call = message[message.index("tune_runner.resume("):message.index(" or, in a shell")]
    exec(call, {"tune_runner": tr})  # noqa: S102 - the printed call, as printed
    assert no_run.pop()[1] == elsewhere
    assert followed(message, cli, no_run) == elsewhere


def test_a_missing_secret_is_asked_for_with_a_command_that_finds_the_search(tmp_path, cli, no_run):
    uri = f"postgresql://ann:{SECRET}@db:5432/mlflow"
    saved_search(options(tmp_path, storage=tmp_path / "results", mlflow_uri=uri))
    missing = cli("resume", "exp", "--storage", str(tmp_path / "results"))
    assert missing.status == 2 and SECRET not in missing.err
    line = missing.err[missing.err.index("tune-rl resume "):].strip()
    assert line.endswith("  # put the secret back in place of ***"), line
    given = followed(line.replace("***", SECRET), cli, no_run)
    assert given.mlflow_uri == uri and given.storage == tmp_path / "results"


def test_resume_with_no_plugins_keeps_discovery_off_and_refuses_a_search_that_imported_plugins(tmp_path, cli,
                                                                                                no_run):
    folder = saved_search(options(tmp_path))
    result = cli("resume", str(folder), "--no-plugins")
    assert result.status == 0, result.err
    [(spec, _)] = no_run
    assert not spec.discover_plugins and spec.as_dict()["plugins"] is False
    plugin = tmp_path / "my plugin.py"
    with_plugin = runner.local_folder(tmp_path / "other", "exp")
    resume.save(with_plugin, spec=replace(load_spec("oracle"), plugins=(str(plugin),)), options=options(tmp_path))
    (with_plugin / "tuner.pkl").write_bytes(b"stub")
    refused = cli("resume", str(with_plugin), "--no-plugins")
    assert refused.status == 2 and len(no_run) == 1
    assert refused.err.strip() == (f"tune-rl: --no-plugins: search exp (resumed) names plug-in files, code the "
                                   f"search would import ({plugin}); read them, then run without --no-plugins")


def test_a_search_running_in_another_process_cannot_be_resumed_at_the_same_time(tmp_path):
    """The run lock (resume.hold): a process that holds it, as a running search or resume does, makes a second one
    refused in one line naming that process; once it ends (even by kill -9, the kernel lets go), the lock is free."""
    import subprocess
    import sys
    import time

    from tune_runner.errors import UserError
    from tune_runner.tuning import resume

    folder = tmp_path / "s"
    folder.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from tune_runner.tuning import resume; resume.hold(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(60)", str(folder)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError) as caught:
            resume.hold(folder)
        assert str(caught.value) == (f"s: another tune-rl process (pid {holder.pid}) is running this search now; "
                                     f"wait for it to end, or stop it, then run this again")
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    resume.hold(folder)  # free again
    resume.release()
    resume.hold(folder)  # and let go by release, for the next search of this process
    resume.release()
