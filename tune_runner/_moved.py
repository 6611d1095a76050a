"""The modules' paths in tune-rl 0.1.0, before its subpackages, and where each module went.

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
    "model": "results.model",
    "robust": "results.robust",
    "runner": "search.runner",
    "preflight": "search.preflight",
    "schedulers": "search.schedulers",
    "searchers": "search.searchers",
    "progress": "search.progress",
    "progress_csv": "search.progress_csv",
    "reaper": "search.reaper",
    "jobs": "search.jobs",
    "resume": "search.resume",
    "verify": "search.verify",
    "cli": "cli.main",
    "completion": "cli.completion",
    "train": "cli.train",
}
FORWARD = {old: new for old, new in MOVED.items() if new.startswith(old + ".")}
ALIASES = {f"tune_runner.{old}": f"tune_runner.{new}" for old, new in MOVED.items() if old not in FORWARD}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at its new path."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(name, self) if name in ALIASES else None

    def create_module(self, spec: Any) -> ModuleType:
        return importlib.import_module(ALIASES[spec.name])  # its __name__ and __spec__ stay the new ones

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


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
