"""Where things live: the shipped YAML folders and the user's results and MLflow store.

Everything a run writes goes under TUNE_RL_HOME (default ~/.tune-rl):
    results/        Ray Tune experiment folders (one per search)
    mlflow.db       the default MLflow tracking store (SQLite)
    mlartifacts/    MLflow artifacts of that store

and what can be rebuilt (an empty MLflow store to copy new ones from) under cache().
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tune_runner.errors import UserError

_PACKAGE = Path(__file__).resolve().parent
# The files tune-rl writes into a search's folder, and into a checkpoint of our learners: named once, here.
# Each has one reader and one writer: spec/saved.py (the first three), results/bundle.py, trainables/checkpoints.py.
SPEC_FILE = "tune_rl_spec.yaml"  # the validated spec the search ran (also an artifact of its MLflow parent run)
RUN_FILE = "tune_rl_run.yaml"  # its run options, what tune-rl resume continues with
FINISHED_MARK = "tune_rl_finished.json"  # written when a search has run to its end
BUNDLE_FILE = "best.yaml"  # the exported best config
CHECKPOINT_FILE = "learner.pkl"  # our ppo/dqn (or a user's agent) in a checkpoint_NNNNNN folder
REPORT_FOLDER = "report"  # tune-rl report's HTML (and the artifact folder of the parent run)
RUN_LOCK = ".tune_rl_running"  # held (flock) by the one process running the search; it names that process
SPOOL_FILE = "tune_rl_mlflow_spool.pkl"  # MLflow calls that wait while the store is away (tracking/spool.py)
REEVALUATION_FILE = "reevaluation.json"  # the re-evaluation's ranking, in the search's folder and its report
SHIPPED = ("search_spaces", "schedulers", "envs")
# Their names inside the package: schedulers/ would shadow the module schedulers.py there.
IN_PACKAGE = {"search_spaces": "search_spaces", "schedulers": "scheduler_presets", "envs": "envs"}


def shipped(folder: str) -> Path:
    """A shipped data folder (`search_spaces`, `schedulers`, `envs`).

    In a wheel they sit inside the package (schedulers/ as scheduler_presets/); in a source checkout beside it.
    """
    for candidate in (_PACKAGE / IN_PACKAGE[folder], _PACKAGE.parent / folder):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tune-rl is installed without its {folder}/ folder")


@contextmanager
def package_for_cluster() -> Iterator[Path]:
    """The `tune_runner` folder to put in a Ray runtime env's `py_modules`, with the shipped folders inside.

    Ray zips a py_modules folder with the folder itself at the top and puts the unpacked copy on the
    workers' PYTHONPATH, so only what is inside it travels. A wheel has the shipped folders inside
    already; a source checkout has them beside the package, so this stages a temporary copy (named
    `tune_runner`) with them inside, where `shipped()` looks first. Ray uploads on ray.init or
    submit_job; the copy is removed when the block ends.
    """
    beside = [name for name in SHIPPED if not (_PACKAGE / IN_PACKAGE[name]).is_dir()]
    if not beside:
        yield _PACKAGE
        return
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    with tempfile.TemporaryDirectory(prefix="tune-rl-package-") as tmp:
        staged = Path(tmp) / _PACKAGE.name
        shutil.copytree(_PACKAGE, staged, ignore=skip)
        for name in beside:
            shutil.copytree(shipped(name), staged / IN_PACKAGE[name], ignore=skip)
        yield staged


def home() -> Path:
    """TUNE_RL_HOME, absolute."""
    return Path(os.environ.get("TUNE_RL_HOME", "~/.tune-rl")).expanduser().resolve()


def cache() -> Path:
    """What tune-rl keeps between runs that can be rebuilt at any time: TUNE_RL_CACHE, else
    $XDG_CACHE_HOME/tune-rl (~/.cache/tune-rl)."""
    if os.environ.get("TUNE_RL_CACHE"):
        return Path(os.environ["TUNE_RL_CACHE"]).expanduser().resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser().resolve() / "tune-rl"


def default_storage() -> Path:
    """Where experiment folders go unless --storage says otherwise."""
    return home() / "results"


def default_mlflow_uri() -> str:
    """The default tracking store: a SQLite database under TUNE_RL_HOME."""
    return f"sqlite:///{home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    """Artifacts of experiments created in the default store."""
    return home() / "mlartifacts"


def check_name(name: str, *, flag: str = "--name") -> str:
    """An experiment name: one plain folder name, so that it stays inside the results folder."""
    bad = (not name.strip() or name in (".", "..") or any(sep in name for sep in "/\\")
           or any(ord(c) < 32 or ord(c) == 127 for c in name) or len(name.encode()) > 255)
    if bad:
        shown = name if name.isprintable() and name.strip() else repr(name)
        raise UserError(f"{flag} {shown}: expected one folder name (not . or .., without '/', '\\' or control "
                        f"characters, at most 255 bytes), e.g. cartpole-ppo")
    return name


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be created or written to, in the OS's words, or None if it can.

    The answer comes from trying: a folder is made and removed in `folder` or in its nearest existing
    parent (permission bits lie to root, and /proc or a read-only mount answer only to a real write).
    Nothing is left behind.
    """
    existing = folder
    while existing != existing.parent and not os.path.lexists(existing):
        existing = existing.parent
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tune-rl-probe-", dir=existing))
    except OSError as exc:
        return f"{existing}: {exc.strerror or type(exc).__name__}"
    return None


def writable_folder(folder: Path, *, setting: str, what: str = "create or write a folder there",
                    fix: str = "choose a folder you can write to") -> None:
    """The rule for every folder a user names for tune-rl to write in (--storage, the folder of a --mlflow-uri
    store, an --export file's, TUNE_RL_HOME): tune-rl makes at most its last folder. A missing parent is a typo
    more often than a wish (sqlite:////nonexistent/dir/mlflow.db made /nonexistent at the root); it is refused
    in one line naming `setting` (the flag or variable, with its value), as is a folder that cannot be made or
    written (`unwritable`: `what` failed, then `fix`). Nothing is created here."""
    if not os.path.lexists(folder) and not os.path.lexists(folder.parent):
        raise UserError(f"{setting}: {folder.parent} does not exist, and tune-rl makes only the last folder of a "
                        f"path; fix the path, or make {folder.parent} first")
    problem = unwritable(folder)
    if problem:
        raise UserError(f"{setting}: cannot {what} ({problem}); {fix}")


def check_home() -> None:
    """TUNE_RL_HOME, where the default results folder and MLflow store go, checked by the rule of every folder
    a user names (writable_folder) before a default under it is written. Its message names the variable and
    its value: a default blamed on --mlflow-uri or --storage named a flag the user never gave."""
    raw = os.environ.get("TUNE_RL_HOME")
    setting = f"TUNE_RL_HOME={raw}" if raw else f"TUNE_RL_HOME (unset: {home()})"
    writable_folder(home(), setting=setting, fix="point TUNE_RL_HOME at a folder you can write to"
                    + (", or unset it (~/.tune-rl)" if raw else ""))
