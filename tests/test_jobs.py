"""`tune-rl submit` and `tune-rl jobs` without a cluster: the job's command, its runtime env, the checks
before anything is sent, and the one-line answers of the job client. No Ray is started here."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_bad_inputs import assert_one_line_error
from tune_runner import paths, storage
from tune_runner.cli.main import build_parser, search_argv
from tune_runner.cluster import jobs
from tune_runner.errors import UserError
from tune_runner.tuning import runner

SPACE = paths.shipped("search_spaces") / "oracle.yaml"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the job's command -------------------------------------------------------------------------------

def test_search_argv_writes_the_flags_back_so_search_parses_the_same():
    argv = ["submit", "--space", "my space.yaml", "--set", "budget=2000", "--set", "noise=1.5", "--num-samples", "2",
            "--no-reevaluate", "--name", "it's mine", "--storage", "/shared/results", "--mlflow-uri",
            "http://mlflow:5000", "--address", "127.0.0.1:8265", "--job-id", "j1", "--wait", "--shared-fs"]
    submitted = build_parser().parse_args(argv)
    forwarded = search_argv(submitted)
    assert "--address" not in forwarded and "--job-id" not in forwarded and "--wait" not in forwarded
    again = build_parser().parse_args(["search", *forwarded])
    for key in ("space", "overrides", "num_samples", "no_reevaluate", "name", "mlflow_uri"):
        assert getattr(again, key) == getattr(submitted, key), key
    assert str(again.storage) == "/shared/results"
    assert again.address is None  # inside the job, the search joins the job's cluster by itself


def test_entrypoint_is_shell_quoted_and_runs_the_module():
    argv = ["--space", "a b.yaml", "--name", "x'; rm -rf ~", "--set", "env_config.k=$HOME"]
    command = jobs.entrypoint(argv)
    assert command.startswith("python -m tune_runner search ")
    assert shlex.split(command) == ["python", "-m", "tune_runner", "search", *argv]


# --- files that travel --------------------------------------------------------------------------------

def test_a_local_space_file_is_staged_and_the_flag_rewritten(tmp_path):
    space = tmp_path / "mine" / "tiny.yaml"
    space.parent.mkdir()
    space.write_text(SPACE.read_text())
    work = tmp_path / "work"
    work.mkdir()
    out = jobs.stage_files(["--space", str(space), "--name", "tiny.yaml"], work)
    assert out == ["--space", "tiny.yaml", "--name", "tiny.yaml"]  # only the flag's value moves
    assert (work / "tiny.yaml").read_text() == space.read_text()
    assert jobs.stage_files([f"--space={space}"], work) == ["--space=tiny-2.yaml"]  # a taken name gets a new one


def test_a_shipped_space_name_stays_a_name(tmp_path):
    assert jobs.stage_files(["--space", "oracle", "--scheduler", "asha"], tmp_path) == ["--space", "oracle",
                                                                                       "--scheduler", "asha"]
    assert not any(tmp_path.iterdir())


def test_a_local_scheduler_file_travels_too(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text((paths.shipped("schedulers") / "asha.yaml").read_text())
    work = tmp_path / "work"
    work.mkdir()
    assert jobs.stage_files(["--scheduler", str(preset)], work) == ["--scheduler", "mine.yaml"]
    assert (work / "mine.yaml").is_file()


def test_plugin_files_and_folders_travel_module_names_do_not(tmp_path):
    one = tmp_path / "one.py"
    one.write_text("X = 1\n")
    folder = tmp_path / "mine"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    out = jobs.stage_files(["--plugins", f"{one},{folder},some.module"], work)
    assert out == ["--plugins", "plugins/one.py,plugins/mine,some.module"]
    assert (work / "plugins" / "one.py").is_file() and (work / "plugins" / "mine" / "__init__.py").is_file()
    assert not (work / "plugins" / "mine" / "__pycache__").exists()


def test_runtime_env_ships_the_package_and_a_working_dir_only_when_needed(tmp_path):
    space = tmp_path / "tiny.yaml"
    space.write_text(SPACE.read_text())
    with jobs.runtime_env(["--space", "oracle"]) as (env, argv):
        assert set(env) == {"py_modules"} and argv == ["--space", "oracle"]
    with jobs.runtime_env(["--space", str(space)], env_vars={"A": "1"}) as (env, argv):
        [package] = env["py_modules"]
        work = Path(env["working_dir"])
        assert Path(package).name == "tune_runner" and (Path(package) / "search_spaces" / "oracle.yaml").is_file()
        assert argv == ["--space", "tiny.yaml"] and (work / "tiny.yaml").is_file()
        assert env["env_vars"] == {"A": "1"}
    assert not work.exists()  # the temporary folders are gone once submitted


def test_the_shipped_package_works_as_ray_unpacks_a_py_module(tmp_path):
    """Ray zips a py_modules folder with the folder at the top, unpacks it on the node and puts the unpacked
    folder on PYTHONPATH. Done here with Ray's own packaging functions (no Ray started): our modules import,
    the shipped folders resolve inside the package, and the schedulers/ data does not
    shadow tune_runner.schedulers (0.1.0's path of tuning.schedulers)."""
    from ray._private.runtime_env.packaging import create_package, unzip_package

    archive, unpacked = tmp_path / "pkg.zip", tmp_path / "node"
    with paths.package_for_cluster() as package:
        create_package(str(package), archive, include_gitignore=True, include_parent_dir=True)
    assert "tune_runner/search_spaces/oracle.yaml" in zipfile.ZipFile(archive).namelist()
    unzip_package(str(archive), str(unpacked), remove_top_level_directory=False, unlink_zip=False)
    probe = ("import json; from tune_runner import paths; from tune_runner.tuning import schedulers; "
             "from tune_runner.spec import experiment as spec; print(json.dumps({"
             "'spaces': str(paths.shipped('search_spaces')), 'envs': str(paths.shipped('envs')), "
             "'presets': sorted(schedulers.presets()), 'oracle': str(spec.resolve_space('oracle'))}))")
    done = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(unpacked)}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["spaces"] == str(unpacked / "tune_runner" / "search_spaces")
    assert found["envs"] == str(unpacked / "tune_runner" / "envs")
    assert "asha" in found["presets"] and found["oracle"].startswith(str(unpacked))


# --- checks before anything is sent ---------------------------------------------------------------------

@pytest.mark.parametrize("uri, shared, fragment", [
    (None, False, "--mlflow-uri: required by submit"),
    ("sqlite:////tmp/m.db", False, "add --shared-fs if the cluster's nodes share this filesystem"),
    ("file:///tmp/mlruns", False, "out of the job's reach on the cluster"),
    ("sqlite:///m.db", True, "give an absolute one"),
    ("mlflow.db", False, "not a tracking URI the cluster can reach"),
])
def test_mlflow_uris_the_cluster_cannot_reach_are_refused(uri, shared, fragment):
    with pytest.raises(UserError) as caught:
        jobs.check_mlflow_uri(uri, shared_fs=shared)
    assert fragment in str(caught.value)


def test_mlflow_uris_the_cluster_reaches():
    assert "as the cluster sees it" in jobs.check_mlflow_uri("http://mlflow:5000", shared_fs=False)
    assert "postgresql" in jobs.check_mlflow_uri("postgresql://u@db/mlflow", shared_fs=False)
    assert "--shared-fs" in jobs.check_mlflow_uri("sqlite:////tmp/m.db", shared_fs=True)


def test_storage_is_as_the_cluster_sees_it(tmp_path, monkeypatch):
    assert jobs.check_storage(None, shared_fs=False)[0] is None
    assert "TUNE_RL_HOME" in jobs.check_storage(None, shared_fs=False)[1]
    assert jobs.check_storage("~/r", shared_fs=False)[0] == "~/r"  # the cluster's home, not ours
    assert jobs.check_storage("s3://b/r", shared_fs=False)[0] == "s3://b/r"
    with pytest.raises(UserError, match="--storage results: a relative path"):
        jobs.check_storage("results", shared_fs=False)
    monkeypatch.chdir(tmp_path)
    assert jobs.check_storage("results", shared_fs=True)[0] == str(tmp_path / "results")


@pytest.mark.parametrize("given, expected", [
    ("127.0.0.1:8265", "http://127.0.0.1:8265"),
    ("http://head:8265/", "http://head:8265"),
    ("https://ray.example.org", "https://ray.example.org"),
])
def test_dashboard_address(given, expected):
    assert jobs.dashboard_address(given) == expected


@pytest.mark.parametrize("given", ["ray://127.0.0.1:10001", "auto", " "])
def test_dashboard_address_refused(given):
    with pytest.raises(UserError, match="--address"):
        jobs.dashboard_address(given)


def test_dashboard_address_default_from_the_environment(monkeypatch):
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "")  # set but empty: as if unset
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # a GCS address, not the dashboard: ignored
    assert jobs.dashboard_address(None) == jobs.DEFAULT_ADDRESS
    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")
    assert jobs.dashboard_address(None) == "http://head:8265"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "head2:8265")
    assert jobs.dashboard_address(None) == "http://head2:8265"


# --- the job client ---------------------------------------------------------------------------------------

def test_an_unreachable_dashboard_is_one_line(cli):
    # Ray's job client (ray[default], in the test extra) is installed: were it missing, this test
    # would fail on the install hint instead of skipping as if the check had passed.
    port = closed_port()
    for argv in (["jobs", "list", "--address", f"127.0.0.1:{port}"],
                 ["submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--address",
                  f"http://127.0.0.1:{port}"]):
        result = cli(*argv)
        assert_one_line_error(result, f"--address http://127.0.0.1:{port}: no Ray dashboard answers there",
                              "ray start --head --dashboard-host 127.0.0.1", "check the port (8265)")


def test_without_the_job_client_one_line_names_the_extra(cli, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aiohttp" else real(name, *a))
    result = cli("jobs", "list")
    assert_one_line_error(result, "tune-rl submit needs Ray's job client: pip install 'tune-rl[cluster]'")


class FakeClient:
    """What JobSubmissionClient answers, for one known job."""

    def __init__(self, *, final: str = "SUCCEEDED") -> None:
        self.final, self.submitted, self.stopped = final, None, []

    def submit_job(self, **kwargs):
        env = kwargs["runtime_env"]
        kwargs["seen"] = {"package": sorted(p.name for p in Path(env["py_modules"][0]).iterdir()),
                          "work": sorted(p.name for p in Path(env["working_dir"]).iterdir())
                          if "working_dir" in env else []}
        self.submitted = kwargs
        return kwargs["submission_id"] or "raysubmit_abc"

    def get_job_info(self, job_id):
        if job_id != "raysubmit_abc":
            raise RuntimeError(f"Request failed with status code 404: Job {job_id} does not exist.")
        return self._details()

    def _details(self):
        return SimpleNamespace(submission_id="raysubmit_abc", job_id="02000000", status="RUNNING",
                               start_time=1_700_000_000_000, entrypoint="python -m tune_runner search --space x")

    def list_jobs(self):
        return [self._details(), SimpleNamespace(submission_id=None, job_id="01000000", status="FAILED",
                                                 start_time=1_600_000_000_000, entrypoint="echo hi")]

    def get_job_logs(self, job_id):
        return "best       t1  return 1\n"

    def get_job_status(self, job_id):
        return self.final

    async def tail_job_logs(self, job_id):
        for chunk in ("trials     2\n", "best       t1\n"):
            yield chunk

    def stop_job(self, job_id):
        self.stopped.append(job_id)
        return True


@pytest.fixture
def fake(monkeypatch):
    client = FakeClient()
    monkeypatch.setattr(jobs, "_client", lambda address: client)
    return client


def test_submit_sends_the_search_with_its_files_and_prints_the_next_commands(cli, fake, tmp_path):
    space = tmp_path / "tiny.yaml"
    space.write_text(SPACE.read_text())
    result = cli("submit", "--space", str(space), "--num-samples", "2", "--mlflow-uri", "http://mlflow:5000",
                 "--address", "head:8265", "--job-id", "raysubmit_abc")
    assert result.status == 0, result.err
    sent = fake.submitted
    assert shlex.split(sent["entrypoint"]) == ["python", "-m", "tune_runner", "search", "--space", "tiny.yaml",
                                               "--num-samples", "2", "--mlflow-uri", "http://mlflow:5000"]
    assert sent["submission_id"] == "raysubmit_abc"
    assert {"search_spaces", "scheduler_presets", "envs", "cli"} <= set(sent["seen"]["package"])
    assert sent["seen"]["work"] == ["tiny.yaml"]
    lines = result.out.splitlines()
    assert lines[0] == "submitted  raysubmit_abc  to http://head:8265"
    assert "tune-rl jobs logs raysubmit_abc --follow --address http://head:8265" in result.out
    assert "under the job's TUNE_RL_HOME" in result.out


@pytest.mark.parametrize("final, status", [("SUCCEEDED", 0), ("FAILED", 1)])
def test_submit_wait_follows_the_log_and_exits_by_the_jobs_end(cli, fake, final, status):
    fake.final = final
    result = cli("submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--wait")
    assert result.status == status
    assert "trials     2\nbest       t1\n" in result.out and result.out.rstrip().endswith(f"raysubmit_abc {final}")


def test_a_wrong_job_id_is_one_line_with_the_closest_known(cli, fake):
    for action in ("logs", "stop"):
        result = cli("jobs", action, "raysubmit_abd")
        assert_one_line_error(result, "job 'raysubmit_abd': no such job at http://127.0.0.1:8265",
                              "did you mean raysubmit_abc?", "known: 01000000, raysubmit_abc")
    assert fake.stopped == []


def test_jobs_list_logs_stop(cli, fake):
    listed = cli("jobs", "list")
    assert listed.status == 0
    first, second = listed.out.splitlines()
    assert first.split()[:2] == ["01000000", "FAILED"] and first.endswith("echo hi")  # oldest first
    assert second.split()[:2] == ["raysubmit_abc", "RUNNING"] and second.endswith("search --space x")
    assert cli("jobs", "logs", "raysubmit_abc").out == "best       t1  return 1\n"
    assert cli("jobs", "stop", "raysubmit_abc").out.startswith("stopping   raysubmit_abc")
    assert fake.stopped == ["raysubmit_abc"]


def test_a_job_that_exists_already(cli, fake, monkeypatch):
    def taken(**kwargs):
        raise RuntimeError("Request failed with status code 400: Job with submission_id j1 already exists.")

    monkeypatch.setattr(fake, "submit_job", taken)
    result = cli("submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--job-id", "j1")
    assert_one_line_error(result, "--job-id j1: a job with this id exists already")


# --- a search inside a job ------------------------------------------------------------------------------------

def test_inside_a_job_the_search_joins_the_jobs_cluster_without_shipping_again(monkeypatch):
    import ray

    calls = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    for key in ("RAY_enable_worker_prestart", "RAY_DEDUP_LOGS", "RAY_AIR_NEW_OUTPUT",
                "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "TUNE_GLOBAL_CHECKPOINT_S"):
        monkeypatch.setenv(key, "0")  # ensure_ray sets them; monkeypatch restores them
    monkeypatch.setenv(jobs.IN_JOB, "{}")
    runner.ensure_ray(num_cpus=None, verbose=False)
    assert calls[-1]["address"] == "auto" and "runtime_env" not in calls[-1]  # Ray refuses py_modules twice
    monkeypatch.delenv(jobs.IN_JOB)
    with socket.socket() as head:  # something must answer at the address before ray.init is called
        head.bind(("127.0.0.1", 0))
        head.listen()
        runner.ensure_ray(num_cpus=None, verbose=False, address=f"127.0.0.1:{head.getsockname()[1]}")
    [package] = calls[-1]["runtime_env"]["py_modules"]
    assert Path(package).name == "tune_runner"


# --- storage URIs ------------------------------------------------------------------------------------------------

def test_storage_parse_keeps_uris_and_resolves_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.parse("s3://bucket/results/") == "s3://bucket/results"
    assert storage.parse("gs://b") == "gs://b"
    assert storage.parse("results") == tmp_path / "results"
    assert storage.join("s3://b/r", "x") == "s3://b/r/x" and storage.join(tmp_path, "x") == tmp_path / "x"
    with pytest.raises(UserError, match="--storage ftp://h/r: unknown scheme 'ftp'"):
        storage.parse("ftp://h/r")


def test_a_search_on_a_uri_works_in_a_local_copy_and_sends_its_files_back(tmp_path, _isolated_home):
    remote = tmp_path / "bucket" / "results"
    (remote / "exp" / "trial_1").mkdir(parents=True)
    (remote / "exp" / "trial_1" / "result.json").write_text("{}\n")
    uri = remote.as_uri()
    local = runner.local_folder(uri, "exp")
    assert local == _isolated_home / "results" / "exp"
    with pytest.raises(UserError, match=r"--name exp: file://.*/exp exists already"):
        runner._check_new(uri, "exp", local)
    assert storage.download(storage.join(uri, "exp"), local) == 1
    (local / "best.yaml").write_text("best\n")
    assert storage.upload(local, storage.join(uri, "exp")) == 1  # only what the URI lacks
    assert (remote / "exp" / "best.yaml").read_text() == "best\n"
