"""`tune-rl resume`: what a search saves beside its results so that it continues exactly, read back.

Before Tune starts, a search writes its validated spec (tune_rl_spec.yaml) and its run options
(tune_rl_run.yaml: where results and MLflow go, retries, re-evaluation, export, the Ray it runs on);
tune_runner.spec.saved writes and reads them.
A resume continues with those, whatever the current defaults (TUNE_RL_HOME, the default MLflow
store). No secret is written: a password or token in a URI is saved as *** and must be given again.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from tune_runner import paths, storage
from tune_runner.errors import NotFound, UserError
from tune_runner.hints import HIDDEN, search_command, storage_flag
from tune_runner.paths import FINISHED_MARK, RUN_FILE, SPEC_FILE
from tune_runner.spec import saved
from tune_runner.spec.saved import KEPT, absolute_uri
from tune_runner.tracking.uri import redacted

# The saved files' one reader and writer is spec/saved.py; resume's callers reach them from here too.
save, mark_finished, finished = saved.save, saved.mark_finished, saved.finished
read_spec, saved_spec, read_run = saved.read_spec, saved.saved_spec, saved.read_run



def new_search_id() -> str:
    """The id a search's MLflow parent run is tagged with, so that a resume finds it wherever the folder is."""
    return uuid.uuid4().hex


_HELD: list[Any] = []  # the run locks this process holds, until its search ends (or it dies: the kernel lets go)


def hold(folder: Path) -> None:
    """Take the search's run lock (an flock on its folder's RUN_LOCK file, held until this process ends): a second
    process that resumes (or syncs into) a search while one runs it is refused in one line, naming it."""
    import fcntl

    path = folder / paths.RUN_LOCK
    f = open(path, "a+")  # noqa: SIM115 - kept open for the life of the process
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise UserError(f"{folder.name}: another tune-rl process (pid {pid}) is running this search now; wait for "
                        f"it to end, or stop it, then run this again") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    _HELD.append(f)


def release() -> None:
    """Let go of the run locks this process took (its search has ended)."""
    while _HELD:
        _HELD.pop().close()


def locate(ref: str, *, where: storage.Storage | None) -> Path:
    """The folder on this machine that holds a search's saved state: `ref` as a folder, or a name under
    --storage. Under a URI that is the search's local copy, fetched from the URI when this machine lacks it."""
    if not storage.is_uri(where):
        from tune_runner.results.analysis import experiment_path

        return experiment_path(ref, storage=where, command="resume")
    paths.check_name(ref, flag="experiment")  # under a URI it is a name, never a path
    folder = storage.local_folder(where, ref)
    remote = storage.join(where, ref)
    if not (folder / SPEC_FILE).is_file():
        storage.download_files(str(remote), folder, (SPEC_FILE, RUN_FILE, FINISHED_MARK))
    if not (folder / SPEC_FILE).is_file():
        raise NotFound(f"--storage {redacted(str(where))}: no {ref}/{SPEC_FILE} there nor in {folder}; check the "
                        f"name and --storage")
    return folder


def continued(saved: dict[str, Any] | None, *, folder: Path, where: storage.Storage | None, mlflow_uri: str | None,
              num_cpus: int | None) -> dict[str, Any]:
    """The RunOptions fields a resume runs with: the saved ones, which the command line may restate but not
    change (another store or results folder would split the search), except the local Ray's size. A search
    saved without run options resumes with the command's flags and the current defaults, as before."""
    if saved is None:
        return {"storage": where if storage.is_uri(where) else folder.parent, "num_cpus": num_cpus,
                "mlflow_uri": mlflow_uri or paths.default_mlflow_uri()}
    fields = {k: saved[k] for k in KEPT}
    fields["search_id"] = saved["search_id"]
    found_at = where if storage.is_uri(where) else folder.parent  # where this resume found the folder
    if storage.is_uri(saved["storage"]):
        fields["storage"] = _restated(saved["storage"], where if storage.is_uri(where) else None,
                                      flag="--storage", folder=folder, what="keeps its results at",
                                      found_at=found_at)
    elif storage.is_uri(where):
        raise UserError(f"--storage {redacted(str(where))}: {folder.name} keeps its results in the folder "
                        f"{saved['storage']} ({folder / RUN_FILE}); leave --storage out")
    else:
        fields["storage"] = folder.parent  # where the folder is now: a moved folder resumes where it lies
    fields["mlflow_uri"] = _restated(saved["mlflow_uri"], mlflow_uri, flag="--mlflow-uri", folder=folder,
                                     what="logs to", found_at=fields["storage"])
    if num_cpus is not None:
        if saved["address"]:
            raise UserError(f"--num-cpus: sizes a local Ray; {folder.name} joins the Ray cluster at "
                            f"{saved['address']} ({folder / RUN_FILE}), which has its own size; drop --num-cpus")
        fields["num_cpus"] = num_cpus
    return fields


def _restated(saved: str, given: str | None, *, flag: str, folder: Path, what: str,
              found_at: storage.Storage) -> str:
    """The saved URI, or the one given when it names the same place (a secret saved as *** is given again).
    `found_at`: where the search's folder is found, for the resume command a missing secret is asked with."""
    where = f"{folder.name} {what} {saved} ({folder / RUN_FILE})"
    if given is None:
        if HIDDEN in saved:
            again = command(folder.name, storage=saved if flag == "--storage" else found_at,
                            mlflow_uri=saved if flag == "--mlflow-uri" else None)
            raise UserError(f"{flag}: missing; {where} and its secret is not saved; give it again: {again}")
        return saved
    if redacted(absolute_uri(given)) != saved:
        fix = "give that one, with its secret" if HIDDEN in saved else f"leave {flag} out"
        raise UserError(f"{flag} {redacted(given)}: {where}; another would split the search in two; {fix}")
    return given


def check_tune_state(where: storage.Storage, folder: Path) -> None:
    """Ray Tune's own state must be there to resume from (a search stopped while starting has none)."""
    target = storage.join(where, folder.name)
    if storage.is_uri(target):
        present = storage.exists(f"{target}/tuner.pkl")
    else:
        present = (Path(target) / "tuner.pkl").is_file() and any(Path(target).glob("experiment_state-*.json"))
    if not present:
        raise UserError(f"{redacted(str(target))}: no Ray Tune state (tuner.pkl, experiment_state-*.json): the "
                        f"search stopped before Tune saved any, so nothing can be resumed; delete {folder} and "
                        f"start the search again")


def command(name: str, *, storage: storage.Storage | None = None, mlflow_uri: str | None = None,
            saved: bool = True, python: bool = False, verb: str = "resume") -> str:
    """The command that continues search `name`: every hint that prints one builds it here (an interrupted
    search, a --name taken, a refused `search --resume`, a secret to give again, tr.Interrupted).

    `tune-rl resume NAME`, with --storage where `storage` is not the default (without it the search is not
    found: "no such folder"), and --mlflow-uri where the resume needs it: a search that did not save it
    (`saved` false: one saved before run options, or a command line restating the store it gave), or one
    saved without its secret (shown as ***, with a note to put it back). `python`: as a tune_runner.resume
    call instead, with the same settings. `verb`: `sync` for the command that writes a search's spooled MLflow
    calls (tracking.spool), which finds the search and its store the same way."""
    given = storage_flag(storage)
    if mlflow_uri is not None:
        unsaved = not saved and absolute_uri(mlflow_uri) != paths.default_mlflow_uri()
        if unsaved or HIDDEN in redacted(mlflow_uri):  # a secret: given again, or saved as ***
            given["mlflow_uri"] = redacted(mlflow_uri)
    if python:
        return f"tune_runner.resume({', '.join([repr(name), *(f'{k}={v!r}' for k, v in given.items())])})"
    return search_command(verb, name, flags=given)


def run_command(name: str, options: Any, *, python: bool = False, verb: str = "resume") -> str:
    """`command` for the search `name` run with `options` (RunOptions): its saved options carry the rest."""
    return command(name, storage=options.storage, mlflow_uri=options.mlflow_uri,
                   saved=options.search_id is not None, python=python, verb=verb)
