"""`--storage`: a local results folder, or a URI Ray Tune writes to (s3://, gs://, file://, ...).

A search on a URI works in a local copy for what runs after Tune (selection, export, report):
it fetches the experiment from the URI into TUNE_RL_HOME/results/<name> once Tune is done, and
sends the files it wrote there back. Commands that read an experiment folder (best, report) need a
local one; resume fetches what the search saved (tune_runner.tuning.resume) into that local copy.
"""

from __future__ import annotations

import re
from pathlib import Path

from tune_runner.errors import UserError

# The filesystems pyarrow opens from a URI, which is what Ray Tune's RunConfig(storage_path=...) uses.
SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")

Storage = Path | str  # a resolved local folder, or a URI kept as written


def is_uri(value: Storage | None) -> bool:
    """Whether `value` is a URI rather than a local path."""
    return isinstance(value, str) and _URI.match(value) is not None


def parse(value: str) -> Storage:
    """The --storage flag: a URI as written (without a trailing slash), or a local path made absolute."""
    match = _URI.match(value)
    if match is None:
        return Path(value).expanduser().resolve()
    scheme = match.group(1).lower()
    if scheme not in SCHEMES:
        raise UserError(f"--storage {value}: unknown scheme {scheme!r}; use a folder path or a URI with one of "
                        f"{', '.join(s + '://' for s in SCHEMES)}")
    stripped = value.rstrip("/")
    return stripped if len(stripped) > len(match.group(0)) else value


def join(storage: Storage, name: str) -> Storage:
    """`storage/name` for a folder or a URI."""
    return f"{storage}/{name}" if is_uri(storage) else Path(storage) / name


def local_folder(where: Storage, name: str) -> Path:
    """The experiment's folder on this machine: under a local --storage, or for a URI the copy that
    selection, export and the report work in (TUNE_RL_HOME/results/<name>)."""
    from tune_runner.paths import default_storage

    return default_storage() / name if is_uri(where) else Path(where) / name


def local_only(storage: Storage | None, *, command: str) -> None:
    """Refuse a URI where a command reads an experiment folder on this machine."""
    if is_uri(storage):
        raise UserError(f"--storage {storage}: tune-rl {command} reads an experiment folder on this machine; "
                        f"copy the experiment locally first and give its folder")


def _filesystem(uri: str) -> tuple:
    import pyarrow.fs

    try:
        return pyarrow.fs.FileSystem.from_uri(uri)
    except (OSError, ValueError, ImportError) as exc:
        raise UserError(f"--storage {uri}: cannot open it ({_first_line(exc)}); check the URI and the "
                        f"credentials for it") from None


def exists(uri: str) -> bool:
    """Whether anything is at `uri` (a failure to reach it is a UserError)."""
    import pyarrow.fs

    fs, path = _filesystem(uri)
    try:
        return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound
    except OSError as exc:
        raise UserError(f"--storage {uri}: cannot reach it ({_first_line(exc)}); check the URI and the "
                        f"credentials for it") from None


def download(uri: str, folder: Path) -> int:
    """Copy everything under `uri` into `folder`; how many files were copied."""
    import pyarrow.fs

    fs, root = _filesystem(uri)
    local = pyarrow.fs.LocalFileSystem()
    count = 0
    for info in fs.get_file_info(pyarrow.fs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pyarrow.fs.FileType.File:
            continue
        relative = info.path[len(root.rstrip("/")) + 1:]
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        pyarrow.fs.copy_files(info.path, str(folder / relative), source_filesystem=fs, destination_filesystem=local)
        count += 1
    return count


def download_files(uri: str, folder: Path, names: tuple[str, ...]) -> list[str]:
    """Copy the files `names` found directly under `uri` into `folder`; the names copied."""
    import pyarrow.fs

    fs, root = _filesystem(uri)
    root = root.rstrip("/")
    try:
        there = fs.get_file_info([f"{root}/{name}" for name in names])
    except OSError as exc:
        raise UserError(f"--storage {uri}: cannot reach it ({_first_line(exc)}); check the URI and the "
                        f"credentials for it") from None
    found = [name for name, info in zip(names, there, strict=True) if info.type == pyarrow.fs.FileType.File]
    if found:
        folder.mkdir(parents=True, exist_ok=True)
    for name in found:
        pyarrow.fs.copy_files(f"{root}/{name}", str(folder / name), source_filesystem=fs,
                              destination_filesystem=pyarrow.fs.LocalFileSystem())
    return found


def upload(folder: Path, uri: str) -> int:
    """Copy the files under `folder` that `uri` does not hold yet; how many were copied."""
    import pyarrow.fs

    fs, root = _filesystem(uri)
    root = root.rstrip("/")
    there = {info.path[len(root) + 1:] for info in fs.get_file_info(
        pyarrow.fs.FileSelector(root, recursive=True, allow_not_found=True))}
    local = pyarrow.fs.LocalFileSystem()
    count = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative in there:
            continue
        target = f"{root}/{relative}"
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        pyarrow.fs.copy_files(str(path), target, source_filesystem=local, destination_filesystem=fs)
        count += 1
    return count


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
