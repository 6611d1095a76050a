"""The files a search keeps beside its results, each with its one writer and its one reader.

tune_rl_spec.yaml   the validated spec (also logged on the MLflow parent run): `save`, `spec_text`; `read_spec`,
                    `saved_spec` (a mapping read elsewhere), `read_logged_spec` (that artifact), `saved_trainable`
tune_rl_run.yaml    the run options tune-rl resume continues with: `save`, `run_fields`; `read_run`
tune_rl_finished.json  the finished mark: `mark_finished`; `finished`

The names are tune_runner.paths'. Light (no Ray, no MLflow): tune-rl best, report, evaluate and resume read them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tune_runner import files, storage
from tune_runner.errors import UserError
from tune_runner.paths import FINISHED_MARK, RUN_FILE, SPEC_FILE
from tune_runner.spec.experiment import ExperimentSpec, build_spec
from tune_runner.tracking.uri import redacted

FORMAT = 1


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


def absolute_uri(uri: str) -> str:
    """A SQLite tracking URI with its database path made absolute (a relative one depends on the folder
    the command runs from); other URIs as they are."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/") and ":memory:" not in uri:
        return prefix + str(Path(uri.removeprefix(prefix)).resolve())
    return uri


def run_fields(options: Any) -> dict[str, Any]:
    """What tune_rl_run.yaml holds for a search's RunOptions (tune_runner.tuning.runner), secrets left out."""
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
        (staging / SPEC_FILE).write_text(spec_text(spec))
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


def spec_text(spec: ExperimentSpec) -> str:
    """The text of tune_rl_spec.yaml: in the search's folder, and on its MLflow parent run (tune-rl best runs:/)."""
    return yaml.safe_dump(spec.as_dict(), sort_keys=False)


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


def read_logged_spec(path: Path, *, where: str, fix: str) -> ExperimentSpec:
    """The spec from a copy of the parent run's tune_rl_spec.yaml, downloaded to `path`; named as `where`."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raw = f"unreadable YAML ({type(exc).__name__})"
    return saved_spec(raw, where=where, fix=fix)


def saved_trainable(folder: Path) -> str | None:
    """The trainable of the search saved in `folder`, or None when it holds no saved spec. Only that key is
    read: a policy loads from a checkpoint whatever else an older tune-rl saved beside it."""
    path = folder / SPEC_FILE
    if not path.exists():
        return None
    raw = files.read_yaml_mapping(path, expected="the search's saved spec (a YAML mapping with trainable, ...)")
    trainable = raw.get("trainable")
    if not isinstance(trainable, str):
        raise UserError(f"{path}: trainable: expected a trainable name, got {files.short(trainable)}")
    return trainable


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
