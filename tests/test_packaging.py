"""The wheel a `pip install` user gets: shipped folders inside, importable under names that clash with nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# pip builds the wheel in a fresh interpreter (setuptools' 120 modules compiled on a clean clone, 2-3 s) and a
# fresh one imports it: with the e2e tests, so that `pytest -m "not e2e"` stays in-process (issue 15)
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    return next(out.glob("tune_rl-*.whl"))


def test_the_wheel_holds_every_shipped_yaml_and_env_under_the_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, inside in (("search_spaces", "search_spaces"), ("schedulers", "scheduler_presets"), ("envs", "envs")):
        shipped = {p.name for p in (ROOT / folder).iterdir() if p.suffix in (".yaml", ".py")}
        assert shipped, folder
        assert {f"tune_runner/{inside}/{n}" for n in shipped} <= names, folder
    assert not any(n.startswith("tune_runner/schedulers/") for n in names)  # shadows 0.1.0 path tune_runner.schedulers


def test_the_installed_wheel_finds_its_presets_spaces_and_envs(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    probe = ("import json, tune_runner; from tune_runner import paths; from tune_runner.tuning import schedulers; "
             "from tune_runner.spec import experiment as spec; print(json.dumps({"
             "'file': tune_runner.__file__, 'presets': sorted(schedulers.presets()), "
             "'spaces': sorted(spec.shipped_spaces()), 'envs': str(paths.shipped('envs'))}))")
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["file"].startswith(str(target))  # the wheel's copy, not the checkout's
    assert {"asha", "pbt", "bohb"} <= set(seen["presets"])
    assert "ppo_small" in seen["spaces"]
    assert seen["envs"].startswith(str(target))
