"""The modules' paths of earlier layouts, and where each module went: 0.1.0's flat modules, and the subpackage
layout before the second redesign (issue 42: `search/` split into tuning/, searchers/ and cluster/, the top-level
helpers into the subpackages they serve, clashing names renamed).

Ray Tune pickles a search's stopper, spec and callbacks by module path (tuner.pkl, experiment_state-*.json): a
search started by 0.1.0 names `tune_runner.runner.BudgetStopper`, `tune_runner.progress.LiveView`, ...; users'
scripts and plug-ins import `tune_runner.runner` and the like. An old path imports the module at its new path
and registers that same module object under the old name too, so a pickle loads and a monkeypatch through
either name patches the one module. The finder goes first on `sys.meta_path`: it answers only the old names,
which no module of this layout has, before another installed copy of tune-rl could answer them.

Five old modules share their name with the subpackage they went into (`spec`, `trainables`, `tracking`,
`results`, `cli`): the package forwards attribute look-ups to the module (`forward`), so
`tune_runner.spec.ExperimentSpec` and the console script's `tune_runner.cli:entry_point` still resolve (the
package is another module object, though). Our own code imports the new paths (tests/test_architecture.py).

The old subpackage `search` is gone, and `tr.search` is the API's function. A pickle naming
`tune_runner.search.stopper.BudgetStopper` still loads, and so does `from tune_runner.search.runner import run`:
the finder answers `tune_runner.search` with an empty package whose modules are the aliases. The import system
sets that package as tune_runner's attribute `search` when it loads it; loading one of its modules takes the
attribute away again, so that `tr.search` stays the function in a process that read an old path (a shuffled
test run found `tr.search(...)` failing after another test had unpickled one). The one form that cannot work
is `import tune_runner.search.stopper as s`: it reaches the module through that attribute; use `from`.
0.1.0's modules `resume` and `report` share their names with `tr.resume` and `tr.report`, and the import system
sets such a module as tune_runner's attribute after it is loaded, where nothing of ours runs: a process that
imported one of those two old paths calls tune_runner.api.resume and .report.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

# old name under tune_runner. -> new name under tune_runner.
MOVED = {
    "spec": "spec.experiment",
    "search_space": "spec.search_space",
    "models": "algos.networks",
    "trainables": "trainables.catalog",
    "own_trainable": "trainables.own",
    "rllib_trainable": "trainables.rllib",
    "oracle": "trainables.oracle",
    "rollouts": "trainables.rollouts",
    "curriculum": "trainables.curriculum",
    "masking": "trainables.masking",
    "rllib_episodes": "trainables.rllib_episodes",
    "env_check": "trainables.env_check",
    "agents": "trainables.agents",
    "tracking": "tracking.callback",
    "dashboard": "tracking.dashboard",
    "dashboard_link": "tracking.dashboard_link",
    "results": "results.trials",
    "analysis": "results.analysis",
    "export": "results.export",
    "html_report": "results.report",
    "report": "results.summary",
    "evaluate": "results.evaluate",
    "policy": "results.policy",
    "model": "results.pyfunc_model",
    "robust": "results.robust",
    "runner": "tuning.runner",
    "preflight": "tuning.preflight",
    "schedulers": "tuning.schedulers",
    "progress": "tuning.progress",
    "progress_csv": "tuning.progress_csv",
    "reaper": "cluster.reaper",
    "jobs": "cluster.jobs",
    "resume": "tuning.resume",
    "verify": "tuning.verify",
    "cli": "cli.main",
    "completion": "cli.completion",
    "train": "cli.train",
    # the subpackage layout before issue 42
    **{f"search.{name}": f"tuning.{name}" for name in (
        "runner", "preflight", "resume", "reevaluate", "verify", "warm", "stopper", "console", "progress",
        "progress_csv", "schedulers")},
    "search.searchers": "searchers",
    "search.smac_search": "searchers._smac",
    "search.nevergrad_search": "searchers._nevergrad",
    "search.conditional": "searchers.conditional",
    "search.config_space": "searchers.config_space",
    "search.cluster": "cluster.session",
    "search.reaper": "cluster.reaper",
    "search.jobs": "cluster.jobs",
    "mlflow_uri": "tracking.uri",
    "metrics": "trainables.metrics",
    "audit": "trainables.audit",
    "env_api": "plugins.env_api",
    "env_registry": "plugins.envs",
    "add_args": "plugins.add_args",
    "results.model": "results.pyfunc_model",
    "tracking.model": "tracking.log_model",
    "spec.seeds": "spec.seed_keys",
}
GONE_PACKAGES = ("tune_runner.search",)  # old packages with no module of their own left: their modules moved
FORWARD = {old: new for old, new in MOVED.items() if new.startswith(old + ".")}
ALIASES = {f"tune_runner.{old}": f"tune_runner.{new}" for old, new in MOVED.items() if old not in FORWARD}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at its new path."""

    def __init__(self) -> None:
        self.own_specs: dict[str, Any] = {}  # old name -> the spec of the module loaded for it, until its exec

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in GONE_PACKAGES:
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return importlib.util.spec_from_loader(name, self) if name in ALIASES else None

    def create_module(self, spec: Any) -> ModuleType | None:
        if spec.name in GONE_PACKAGES:
            return None  # an empty package, made by the import system
        module = importlib.import_module(ALIASES[spec.name])
        self.own_specs[spec.name] = module.__spec__  # exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name; a gone package has nothing to run. The import system has just
        set the module's __spec__ to the old name's (it does so whatever the module held): the module's own is
        put back, so that it still names its file and its new path. And any gone package the import system set
        as tune_runner's attribute on the way (`tune_runner.search`) is taken off it."""
        if module.__spec__.name in GONE_PACKAGES:
            return
        module.__spec__ = self.own_specs.pop(module.__spec__.name)
        package = sys.modules["tune_runner"]
        for gone in GONE_PACKAGES:
            name = gone.removeprefix("tune_runner.")
            if isinstance(vars(package).get(name), ModuleType):
                delattr(package, name)


def forward(package: str) -> Callable[[str], Any]:
    """A subpackage's module `__getattr__`: what the old module of the same name held."""
    target = f"tune_runner.{MOVED[package.removeprefix('tune_runner.')]}"

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's __getattr__
        # `from package import submodule` asks first: answered without importing the old module's (heavier) home
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(target), name)

    return __getattr__


def install() -> None:
    """Put the finder of old paths on sys.meta_path, once."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
