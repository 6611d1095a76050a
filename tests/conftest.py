"""Shared fixtures. One local Ray session serves every end-to-end test (ray.init costs ~10 s here)."""

from __future__ import annotations

import io
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

import tune_runner.algos.records  # noqa: F401 - our learners registered as agents before any test saves AGENTS
from tune_runner.cli.main import main

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    """One cache folder for the whole run (TUNE_RL_CACHE, inherited by the CLI processes tests start): the suite
    never writes to the real ~/.cache/tune-rl, and its many new MLflow stores are copies of one empty store."""
    import tempfile

    os.environ.setdefault("TUNE_RL_CACHE", tempfile.mkdtemp(prefix="tune-rl-test-cache-"))


# e2e files whose tests may run on different pytest-xdist workers at once: long trainings that share nothing.
# Every other e2e file is one unit of work (an xdist_group), run on one worker in file order, as it was written.
SPLIT_E2E = ("test_shipped_e2e",)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The unit tests first, then the e2e ones, each in file order: the suite's one Ray starts with the first e2e
    test that needs it and stays up, and a unit test must see what a user's process sees before any Ray (an
    e2e file that sorts early, tests/test_api_e2e.py, put Ray under test_audit.py's unit tests). It also gives
    the fast verdict first.

    `make test` runs the e2e tests on 2 xdist workers (`--dist loadgroup`, each worker with its own Ray): one
    worker alone left a quarter of the 2 cores idle (Ray's start, servers, browsers, the last trial of a search).
    The longest units go first (SPLIT_E2E's tests), so that the two workers end together."""
    def order(item: pytest.Item) -> tuple[bool, bool]:
        e2e = item.get_closest_marker("e2e") is not None
        return e2e, e2e and item.module.__name__.rsplit(".", 1)[-1] not in SPLIT_E2E

    items.sort(key=order)
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        if item.get_closest_marker("e2e") is not None and module not in SPLIT_E2E:
            item.add_marker(pytest.mark.xdist_group(module))


@pytest.fixture(autouse=True)
def _plugin_discovery_on() -> Iterator[None]:
    """--no-plugins and `plugins: false` turn discovery off for the rest of a process (tune_runner.plugins):
    each test starts with it on, as a command does."""
    from tune_runner.plugins import set_discovery

    yield
    set_discovery(True)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never write to the real ~/.tune-rl from a test."""
    home = tmp_path_factory.mktemp("tune-rl-home")
    monkeypatch.setenv("TUNE_RL_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _units_start_no_ray(request: pytest.FixtureRequest) -> Iterator[None]:
    """`pytest -m "not e2e"` needs no Ray (issue 15): a unit test that leaves a Ray running fails. Ray is not
    imported for this; a test that never imported it cannot have started it. Ray's own worker module is asked:
    tests fake `ray.is_initialized`, and their monkeypatch is undone after this runs (_isolated_home's, set up
    first)."""
    def up() -> bool:
        worker = sys.modules.get("ray._private.worker")
        return worker is not None and worker.is_initialized()

    if request.node.get_closest_marker("e2e") is not None:
        yield
        return
    was_up = up()
    yield
    assert was_up or not up(), "a unit test started Ray: mark it e2e"


class Cli:
    """The CLI run in-process with captured output."""

    def __init__(self, status: int, out: str, err: str) -> None:
        self.status, self.out, self.err = status, out, err


def run_cli(*argv: str) -> Cli:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err)
    return Cli(status, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """The learners are single-threaded by design; a test of them must not take every core."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=["generators", "counter"])
def noise_source(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which source our learners draw each seed's rollout noise from (tune_runner.algos.seed_streams): a CPU's own
    (the seeds' torch generators), or the one a GPU takes (the counter streams), forced here on the CPU.
    Independence and exact checkpoints must hold for both; a test using this asserts its learner drew from it."""
    from tune_runner.algos import seed_streams

    if request.param == seed_streams.COUNTER:
        monkeypatch.setattr(seed_streams, "noise_source", lambda device: seed_streams.COUNTER)
    return request.param


@pytest.fixture
def uninstalled(monkeypatch: pytest.MonkeyPatch):
    """`uninstalled("pkg")`: from then on, importing pkg or any of its modules fails as if it were not installed.
    A module first imported meanwhile keeps what it saw (Ray's `try: import nevergrad ... except: ng = None`) for
    the rest of the process: import such modules before hiding, or drop them as test_env_check does."""
    import builtins

    real_import = builtins.__import__

    def hide(package: str) -> None:
        def fake_import(name, *args, **kwargs):
            if name == package or name.startswith(package + "."):
                raise ImportError(f"No module named {package!r}")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", fake_import)

    return hide


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for all end-to-end tests, 2 CPUs and no GPU like CI, on any machine: a GPU
    here is hidden from it, so the tests that expect a cluster without GPUs hold on a GPU machine
    too (the real-GPU test starts its own Ray)."""
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from tune_runner.tuning.runner import ensure_ray

    ensure_ray(num_cpus=2, num_gpus=0, verbose=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def forbid_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail the test if its code starts Ray or calls a Ray API that starts one when none runs.

    Whether Ray is up after the test cannot tell once the suite's shared Ray is up; so every
    way in is replaced: ray.init itself and the auto-init hook that ray.get, ray.put,
    ray.get_runtime_context, `.remote()` and placement groups call. Calls are recorded, since
    the code under test may swallow the error they raise.
    """
    import importlib

    import ray
    import ray._private.auto_init_hook as auto_init_hook
    import ray._private.client_mode_hook as client_mode_hook
    import ray._private.worker as worker

    placement_group = importlib.import_module("ray.util.placement_group")  # ray.util's attribute is the function
    calls: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append("".join(traceback.format_stack(limit=6)[:-1]))
        raise RuntimeError("this test must not start Ray")

    for module in (ray, worker):
        monkeypatch.setattr(module, "init", refuse)
    for module in (auto_init_hook, client_mode_hook, placement_group):
        monkeypatch.setattr(module, "auto_init_ray", refuse)
    was_up = ray.is_initialized()
    yield calls
    assert not calls, "Ray was started (or an API that starts it was called) from:\n" + "\n".join(calls)
    assert ray.is_initialized() == was_up


@pytest.fixture
def untouched(forbid_ray: list[str], _isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """For a refused command: `untouched.check(argv)` afterwards asserts it left nothing (tests/untouched.py).
    The test runs from a fresh working folder, where a stray ./mlruns or results folder would show."""
    from tests.untouched import Untouched
    from tune_runner.paths import default_mlflow_uri

    monkeypatch.chdir(tmp_path)
    return Untouched(ray_calls=forbid_ray, roots=(_isolated_home, tmp_path), default_store=default_mlflow_uri())
