"""The module paths of earlier layouts (tune_runner/_moved.py) still import, as the one module at the new path:
0.1.0's flat modules and the subpackages before issue 42 (`tune_runner.search.*`, `tune_runner.mlflow_uri`,
...), which Ray Tune pickled into the searches they started."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

import tune_runner
from tune_runner import _moved


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_each_old_path_is_the_module_at_its_new_path(old):
    if old in tune_runner.API:  # 0.1.0's modules `resume` and `report`: see the next test
        return
    new = importlib.import_module(f"tune_runner.{_moved.MOVED[old]}")
    if old in _moved.FORWARD:  # a package now: its attributes are the old module's
        package = importlib.import_module(f"tune_runner.{old}")
        public = next(name for name in vars(new) if not name.startswith("_") and name not in vars(package))
        assert getattr(package, public) is getattr(new, public)
    else:
        assert importlib.import_module(f"tune_runner.{old}") is new
        assert new.__spec__.name == new.__name__  # the module's own spec, not the old name's


def test_an_old_path_named_as_an_api_function_imports_in_a_process_of_its_own():
    """0.1.0's `tune_runner.resume` and `tune_runner.report` share their names with `tr.resume` and `tr.report`:
    importing one makes the import system set the module as tune_runner's attribute, where the function was (a
    shuffled run found `tr.resume(...)` failing after this test had imported them in-process). Known and kept:
    such a process calls tune_runner.api.resume."""
    clashing = sorted(set(_moved.MOVED) & set(tune_runner.API))
    assert clashing == ["report", "resume"]
    probe = "; ".join(f"import tune_runner.{old} as m; assert m.__name__ == 'tune_runner.{_moved.MOVED[old]}'"
                      for old in clashing)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_every_new_path_exists_and_no_old_path_is_a_module_of_today():
    for old, new in _moved.MOVED.items():
        assert importlib.util.find_spec(f"tune_runner.{new}") is not None, new
        if old not in _moved.FORWARD:
            found = importlib.machinery.PathFinder.find_spec(f"tune_runner.{old}", importlib.import_module(
                "tune_runner").__path__) if "." not in old else None
            assert found is None, f"tune_runner.{old} is a module of this layout: drop it from MOVED"


def test_a_pickle_of_the_search_package_days_loads_and_tr_search_stays_the_function():
    run = subprocess.run([sys.executable, "-c", (
        "import pickle, types, tune_runner as tr\n"
        "assert isinstance(tr.search, types.FunctionType), tr.search\n"
        "stopper = pickle.loads(b'ctune_runner.search.stopper\\nBudgetStopper\\n.')\n"
        "uri = pickle.loads(b'ctune_runner.mlflow_uri\\nredacted\\n.')\n"
        "print(stopper.__module__, uri.__module__)")], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["tune_runner.tuning.stopper", "tune_runner.tracking.uri"]
    assert pickle.loads(b"ctune_runner.search.searchers\nSEARCHERS\n.") is importlib.import_module(
        "tune_runner.searchers").SEARCHERS
    from tune_runner.search.reevaluate import reevaluate_best  # noqa: F401 - the old package's module, loaded

    import tune_runner as tr
    from tune_runner.api import searching

    assert tr.search is searching.search  # in this process too, after the old package was imported
