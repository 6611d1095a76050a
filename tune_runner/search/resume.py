"""`tune-rl resume`: what a search saves beside its results so that it continues exactly, read back.

Before Tune starts, a search writes its validated spec (tune_rl_spec.yaml) and its run options
(tune_rl_run.yaml: where results and MLflow go, retries, re-evaluation, export, the Ray it runs on).
A resume continues with those, whatever the current defaults (TUNE_RL_HOME, the default MLflow
store). No secret is written: a password or token in a URI is saved as *** and must be given again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tune_runner import files, paths, storage
from tune_runner.errors import NotFound, UserError
from tune_runner.mlflow_uri import redacted
from tune_runner.spec.experiment import ExperimentSpec, build_spec

SPEC_FILE = "tune_rl_spec.yaml"
RUN_FILE = "tune_rl_run.yaml"
FINISHED_MARK = "tune_rl_finished.json"  # written when a search has run to its end
FORMAT = 1
HIDDEN = "***"  # what redacted() writes in place of a secret


def _count(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _maybe(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


# Every key of tune_rl_run.yaml: what it must hold, and the check.
FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "format": (f"{FORMAT}", lambda v: v == FORMAT and not isinstance(v, bool)),
    "search_id": ("a 32-digit hex id", lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{32}", v) is not None),
    "storage": ("a results folder or URI", _text),
    "mlflow_uri": ("a tracking URI", _text),
    "max_failures": ("a whole number >= 0", _count(0)),
    "export": ("true or false", lambda v: isinstance(v, bool)),
    "reevaluate": ("true or false", lambda v: isinstance(v, bool)),
    "top": ("null or a whole number >= 1", _maybe(_count(1))),
    "seeds": ("null or a whole number >= 1", _maybe(_count(1))),
    "register_model": ("null or a model name", _maybe(_text)),
    "address": ("null or a Ray address", _maybe(_text)),
    "num_cpus": ("null or a whole number >= 1", _maybe(_count(1))),
    "num_gpus": ("null or a number >= 0", _maybe(_number)),
    "cpus_per_trial": ("null or a number >= 0", _maybe(_number)),
    "gpus_per_trial": ("null or a number >= 0", _maybe(_number)),
}
KEPT = tuple(k for k in FIELDS if k not in ("format", "search_id", "storage", "mlflow_uri"))
RUN_FIX = "correct it, or delete the file to resume with this command's flags and the current defaults"
SPEC_FIX = "tune-rl search wrote it; restore it, or delete the folder and start the search again"


def new_search_id() -> str:
    """The id a search's MLflow parent run is tagged with, so that a resume finds it wherever the folder is."""
    return uuid.uuid4().hex


def absolute_uri(uri: str) -> str:
    """A SQLite tracking URI with its database path made absolute (a relative one depends on the folder
    the command runs from); other URIs as they are."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/") and ":memory:" not in uri:
        return prefix + str(Path(uri.removeprefix(prefix)).resolve())
    return uri


def run_fields(options: Any) -> dict[str, Any]:
    """What tune_rl_run.yaml holds for a search's RunOptions (tune_runner.search.runner), secrets left out."""
    kept = {k: getattr(options, k) for k in KEPT}
    return {"format": FORMAT, "search_id": options.search_id, "storage": redacted(str(options.storage)),
            "mlflow_uri": redacted(absolute_uri(options.mlflow_uri)), **kept}


def save(folder: Path, *, spec: ExperimentSpec, options: Any) -> None:
    """Create the experiment folder holding the spec and the run options, at once: both files are written
    in a temporary folder renamed into place (which also fails if another search took the name). With a
    URI --storage they are sent there too, so that a resume from another machine finds them."""
    staging = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        staging.mkdir(parents=True)
        (staging / SPEC_FILE).write_text(yaml.safe_dump(spec.as_dict(), sort_keys=False))
        (staging / RUN_FILE).write_text(
            "# the run options tune-rl resume continues this search with (written once, by tune-rl search)\n"
            + yaml.safe_dump(run_fields(options), sort_keys=False))
        os.rename(staging, folder)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(f"--name {folder.name}: cannot create {folder} ({exc.strerror}); choose another --name "
                        f"or --storage") from None
    if storage.is_uri(options.storage):
        storage.upload(folder, storage.join(options.storage, folder.name))


def mark_finished(folder: Path, *, status: str, counts: dict[str, int]) -> None:
    """The finished mark, written to a temporary file and renamed (never half there)."""
    partial = folder / f".{FINISHED_MARK}.partial"
    partial.write_text(json.dumps({"status": status, "counts": counts}))
    partial.replace(folder / FINISHED_MARK)


def finished(folder: Path) -> dict[str, int] | None:
    """The trial counts of a finished search (its finished mark), or None while it is unfinished."""
    path = folder / FINISHED_MARK
    if not path.exists():
        return None
    fix = f"delete it to resume {folder.name} (a search that did finish then only runs its end again)"
    text = files.read_text(path, expected="the finished mark (JSON)", fix=fix)
    try:
        raw = json.loads(text)
    except ValueError:
        raw = text
    counts = raw.get("counts") if isinstance(raw, dict) else None
    if not (isinstance(raw, dict) and raw.get("status") in ("finished", "failed") and isinstance(counts, dict)
            and all(isinstance(k, str) and _count(0)(v) for k, v in counts.items())):
        raise UserError(f'{path}: expected {{"status": "finished" or "failed", "counts": {{"done": 3, ...}}}}, '
                        f"got {files.short(raw)}; {fix}")
    return counts


def read_spec(folder: Path) -> ExperimentSpec:
    """The spec a search saved beside its results (tune_rl_spec.yaml), or one line saying what is wrong."""
    path = folder / SPEC_FILE
    if not path.exists():  # a folder or an unreadable file in its place: read says why
        raise UserError(f"{folder}: not a tune-rl search folder (no {SPEC_FILE}); give a folder tune-rl search "
                        f"wrote, or its name under --storage")
    raw = files.read_yaml(path, expected="the search's saved spec (YAML)", fix=SPEC_FIX)
    return saved_spec(raw, where=str(path), fix=SPEC_FIX)


def saved_spec(raw: Any, *, where: str, fix: str) -> ExperimentSpec:
    """A saved spec's mapping (the folder's tune_rl_spec.yaml, or the same artifact of the MLflow parent
    run) as the spec; `where` names it and `fix` says what to do in the one line when it does not load."""
    if not isinstance(raw, dict) or not all(_text(raw.get(k)) for k in ("name", "source")):
        raise UserError(f"{where}: expected the search's saved spec (a mapping with name, source, trainable, env, "
                        f"...), got {files.short(raw)}; {fix}")
    fields = {k: v for k, v in raw.items() if k not in ("name", "source", "source_sha256")}
    try:
        return build_spec(fields, name=raw["name"], source=raw["source"], sha256=str(raw.get("source_sha256", "")))
    except UserError as exc:
        raise UserError(f"{where}: the saved spec does not load ({exc}); {fix}") from None


def read_run(folder: Path) -> dict[str, Any] | None:
    """The run options a search saved (tune_rl_run.yaml), checked; None for a search saved without them."""
    path = folder / RUN_FILE
    if not path.exists():
        return None
    raw = files.read_yaml(path, expected="the search's run options (YAML)", fix=RUN_FIX)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected the search's run options (a mapping of {', '.join(FIELDS)}), "
                        f"got {files.short(raw)}; {RUN_FIX}")
    for key in raw:
        if key not in FIELDS:
            raise UserError(f"{path}: {key}: unknown key (expected {', '.join(FIELDS)}); {RUN_FIX}")
    for key, (what, check) in FIELDS.items():
        if key not in raw:
            raise UserError(f"{path}: {key}: missing; expected {what}; {RUN_FIX}")
        if not check(raw[key]):
            raise UserError(f"{path}: {key}: expected {what}, got {raw[key]!r}; {RUN_FIX}")
    return raw


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
    if storage.is_uri(saved["storage"]):
        fields["storage"] = _restated(saved["storage"], where if storage.is_uri(where) else None,
                                      flag="--storage", folder=folder, what="keeps its results at")
    elif storage.is_uri(where):
        raise UserError(f"--storage {redacted(str(where))}: {folder.name} keeps its results in the folder "
                        f"{saved['storage']} ({folder / RUN_FILE}); leave --storage out")
    else:
        fields["storage"] = folder.parent  # where the folder is now: a moved folder resumes where it lies
    fields["mlflow_uri"] = _restated(saved["mlflow_uri"], mlflow_uri, flag="--mlflow-uri", folder=folder,
                                     what="logs to")
    if num_cpus is not None:
        if saved["address"]:
            raise UserError(f"--num-cpus: sizes a local Ray; {folder.name} joins the Ray cluster at "
                            f"{saved['address']} ({folder / RUN_FILE}), which has its own size; drop --num-cpus")
        fields["num_cpus"] = num_cpus
    return fields


def _restated(saved: str, given: str | None, *, flag: str, folder: Path, what: str) -> str:
    """The saved URI, or the one given when it names the same place (a secret saved as *** is given again)."""
    where = f"{folder.name} {what} {saved} ({folder / RUN_FILE})"
    if given is None:
        if HIDDEN in saved:
            raise UserError(f"{flag}: missing; {where} and its secret is not saved; give it again: "
                            f"tune-rl resume {folder.name} {flag} 'URI-WITH-SECRET'")
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


def command(name: str, options: Any) -> str:
    """The command that continues a search, printed when it is interrupted. Its saved options need only
    --storage to find it (when not the default); a URI whose secret is not saved needs that again."""
    words = ["tune-rl", "resume", name]
    if options.storage != paths.default_storage():
        words += ["--storage", redacted(str(options.storage))]
    uri = options.mlflow_uri
    unsaved = options.search_id is None and absolute_uri(uri) != paths.default_mlflow_uri()
    if unsaved or redacted(uri) != uri:
        words += ["--mlflow-uri", redacted(uri)]
    line = " ".join(shlex.quote(word) for word in words)
    return line + f"  # put the secret back in place of {HIDDEN}" if HIDDEN in line else line
