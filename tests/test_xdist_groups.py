"""`make test` runs the e2e tests with `-n 2 --dist loadgroup`: every e2e file but the shipped spaces' is one xdist
group, so its module fixtures (a tracking server, a dashboard, a cluster) start once, on one worker. For two
releases no group took effect and nothing said so: conftest's hook ran after pytest-xdist had read the marks into
the test ids, and pytest 9.2 ignores the id suffix xdist writes (pytest-xdist issue #1386). And xdist sends the
groups with the most tests first unless told not to, which put the longest single tests last. This runs conftest's
hook under real xdist workers, with the Makefile's e2e flags, on two small e2e files and a split one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILE = '''import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("i", range(4))
def test_it(i):
    pass
'''


def makefile_e2e_flags() -> list[str]:
    """The xdist flags of `make test`'s e2e run."""
    (line,) = [line for line in (ROOT / "Makefile").read_text().splitlines() if "-m e2e" in line]
    return [flag for flag in line.split("-m e2e", 1)[1].split() if not flag.startswith("--durations")]


@pytest.mark.e2e  # a pytest run under two xdist workers (3-5 s): the e2e run's own set-up, checked beside it
def test_each_e2e_file_but_the_split_ones_runs_as_one_group_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import SPLIT_E2E, pytest_collection_modifyitems  # noqa: F401\n\n\n"
        "def pytest_configure(config):\n    config.addinivalue_line('markers', 'e2e: end-to-end')\n")
    for name in ("test_a_e2e", "test_b_e2e", "test_shipped_e2e"):
        (tmp_path / f"{name}.py").write_text(FILE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    flags = makefile_e2e_flags()
    assert flags[:4] == ["-n", "2", "--dist", "loadgroup"], flags
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags,
                           "-v", "-m", "e2e", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = re.findall(r"\[(gw\d)\] .*?PASSED (test_\w+)\.py::test_it\[\d\](@\w+)?", done.stdout)
    assert len(ran) == 12, done.stdout[-3000:]
    for name in ("test_a_e2e", "test_b_e2e"):
        mine = [(worker, group) for worker, file, group in ran if file == name]
        assert {group for _, group in mine} == {f"@{name}"}, mine  # grouped, by file
        assert len({worker for worker, _ in mine}) == 1, mine  # so on one worker
    assert {group for _, file, group in ran if file == "test_shipped_e2e"} == {""}  # split: test by test
    # The split tests (the longest, sorted first by conftest) start first: one on each worker.
    assert [file for _, file, _ in ran[:2]] == ["test_shipped_e2e"] * 2, ran
