"""Where things live: the shipped YAML folders and the user's results and MLflow store.

Everything a run writes goes under TUNE_RL_HOME (default ~/.tune-rl):
    results/        Ray Tune experiment folders (one per search)
    mlflow.db       the default MLflow tracking store (SQLite)
    mlartifacts/    MLflow artifacts of that store
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped(folder: str) -> Path:
    """A shipped data folder (`search_spaces`, `schedulers`, `envs`).

    In a wheel they sit inside the package; in a source checkout beside it.
    """
    for candidate in (_PACKAGE / folder, _PACKAGE.parent / folder):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tune-rl is installed without its {folder}/ folder")


def home() -> Path:
    """TUNE_RL_HOME, absolute."""
    return Path(os.environ.get("TUNE_RL_HOME", "~/.tune-rl")).expanduser().resolve()


def default_storage() -> Path:
    """Where experiment folders go unless --storage says otherwise."""
    return home() / "results"


def default_mlflow_uri() -> str:
    """The default tracking store: a SQLite database under TUNE_RL_HOME."""
    return f"sqlite:///{home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    """Artifacts of experiments created in the default store."""
    return home() / "mlartifacts"
