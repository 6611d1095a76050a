"""Every file tune-rl reads goes through here: one line naming the file and what was expected.

Space files, scheduler presets, bundles, saved specs and run options, finished marks, Tune's
params.json and checkpoints. A file that is missing, a folder, unreadable, not UTF-8, not YAML or
JSON, of the wrong shape (a list where a mapping belongs, an empty or truncated file) becomes a
`UserError` `<path>: <what is wrong>; expected <what>` (exit status 2). Type checks of each kind's
keys stay in that kind's loader. Light on purpose: the CLI imports this before any `--help`.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tune_runner.errors import UserError

T = TypeVar("T")

# What a corrupt or truncated pickle / torch file raises on load: unpickling runs arbitrary reducers, so
# a damaged stream can fail with any of these (a truncated one usually with EOFError or UnpicklingError).
CHECKPOINT_ERRORS: tuple[type[BaseException], ...] = (
    pickle.UnpicklingError, OSError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, ImportError,
    RuntimeError, UnicodeDecodeError, MemoryError, OverflowError, RecursionError)


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(f"line {line}: duplicate key {key!r} (first at line {first}); keep one of them")


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping: PyYAML would keep the last one
    silently, so `lr:` twice under `space:` searched only the second range."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden key by key, as YAML intends
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in first_line:
                    raise DuplicateKeyError(key, line, first_line[key])
                first_line[key] = line
            except TypeError:  # an unhashable key: construct_mapping names it below
                pass
        return super().construct_mapping(node, deep)


def load_yaml_text(text: str) -> Any:
    """YAML from a string with duplicate keys refused (every YAML file and flag value we read)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def short(value: Any) -> str:
    """A value as shown in an error: `nothing (an empty file)` for None or '', else its repr cut to 60."""
    text = "nothing (an empty file)" if value is None or value == "" else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse(path: Path | str, problem: str, *, expected: str, fix: str) -> UserError:
    tail = f"; expected {expected}" if expected else ""
    return UserError(f"{path}: {problem}{tail}{f'; {fix}' if fix else ''}")


def read_bytes(path: Path, *, expected: str, fix: str = "", shown: str | None = None) -> bytes:
    """The file's bytes. A missing file, a folder, any OS error is a UserError with the OS's reason, naming the
    file (as `shown`, when the user typed it another way, e.g. `--plugins x.py`) and `expected`."""
    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind:  # reading a pipe would wait for a writer, a device might never end
            raise _refuse(path if shown is None else shown, f"not a regular file ({kind})", expected=expected,
                          fix=fix)
        return Path(path).read_bytes()
    except OSError as exc:
        raise _refuse(path if shown is None else shown, f"cannot read ({exc.strerror or type(exc).__name__})",
                      expected=expected, fix=fix) from None


def _not_regular(mode: int) -> str:
    """'' for a regular file or a folder (whose read fails with the OS's own reason), else what it is."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    kinds = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def _decode(data: bytes, encoding: str, *, name: Path | str, expected: str, fix: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        label = "UTF-8" if encoding.lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig") else encoding
        problem = f"not {label} text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as {label}"
        raise _refuse(name, problem, expected=expected, fix=fix) from None


def read_text(path: Path, *, expected: str, fix: str = "", shown: str | None = None) -> str:
    """The file's text (UTF-8); besides `read_bytes`'s refusals, bytes that are not UTF-8 (the first bad
    byte and its offset)."""
    data = read_bytes(path, expected=expected, fix=fix, shown=shown)
    return _decode(data, "utf-8", name=path if shown is None else shown, expected=expected, fix=fix)


def run_source(module: Any, path: Path, source: str) -> None:
    """Run a user's Python file (a plug-in, a task function) as `module`, compiled from `source`, the text
    read_source just read: never from a cached .pyc, which passes for current when the file was rewritten
    within the same second at the same size (an edit, then a search, at once), and writing none into the
    user's folder."""
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the user's own plug-in code


def read_source(path: Path, *, shown: str | None = None, expected: str = "a Python plug-in file") -> str:
    """A Python file's text in the encoding its first two lines declare (PEP 263), else UTF-8."""
    import codecs
    import tokenize

    name = path if shown is None else shown
    data = read_bytes(path, expected=expected, shown=shown)
    encoding = "utf-8"
    for line in data.split(b"\n", 2)[:2]:
        match = tokenize.cookie_re.match(line.decode("latin-1"))
        if match:
            encoding = match.group(1)
            break
        if line.strip() and not line.lstrip().startswith(b"#"):
            break  # a cookie only counts on a comment line before any code
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise _refuse(name, f"unknown encoding {encoding!r} in its coding declaration", expected=expected,
                      fix="declare a codec Python knows, e.g. utf-8") from None
    return _decode(data, encoding, name=name, expected=expected, fix="")


def read_yaml(path: Path, *, expected: str = "a readable YAML file", fix: str = "") -> Any:
    """A YAML file's data; unreadable, not UTF-8, a syntax error (line and column) or a duplicate key
    (both lines) is one line naming the file."""
    text = read_text(path, expected=expected, fix=fix)
    try:
        return load_yaml_text(text)
    except DuplicateKeyError as exc:
        raise UserError(f"{path}: {exc}{f'; {fix}' if fix else ''}") from None
    except yaml.reader.ReaderError as exc:  # a control character: YAML allows printable text only
        problem = f"invalid YAML: character #x{exc.character:04x} at character {exc.position} is not allowed"
        raise _refuse(path, problem, expected=expected, fix=fix) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise _refuse(path, f"invalid YAML{at}: {problem}", expected=expected, fix=fix) from None


def read_json(path: Path, *, expected: str, fix: str = "") -> Any:
    """A JSON file's data; an empty file is None (the shape check names it), a syntax error or a file cut
    short says where (line and column)."""
    text = read_text(path, expected=expected, fix=fix)
    text = text.removeprefix("\ufeff")  # a byte-order mark, as some editors save: not an error in the data
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        ends = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        cut = " (the file ends before it closes: cut short?)" if ends else ""
        raise _refuse(path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}{cut}",
                      expected=expected, fix=fix) from None


def mapping(raw: Any, path: Path, *, expected: str, fix: str = "") -> dict:
    """`raw` when it is a mapping with string keys, else `<path>: expected <expected>, got <raw>`."""
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise UserError(f"{path}: expected {expected}, got {short(raw)}{f'; {fix}' if fix else ''}")
    return raw


def read_yaml_mapping(path: Path, *, expected: str, fix: str = "") -> dict:
    """A YAML file whose top level must be a mapping (every YAML file tune-rl reads)."""
    return mapping(read_yaml(path, expected=expected, fix=fix), path, expected=expected, fix=fix)


def read_json_mapping(path: Path, *, expected: str, fix: str = "") -> dict:
    """A JSON file whose top level must be an object (params.json, the finished mark)."""
    return mapping(read_json(path, expected=expected, fix=fix), path, expected=expected, fix=fix)


def load_checkpoint(path: Path, load: Callable[[Path], T], *, fix: str) -> T:
    """`load(path)`, a pickle or torch load: a truncated or corrupt file is one line,
    `<path>: not a readable checkpoint (<reason>); <fix>`."""
    try:
        return load(path)
    except UserError:
        raise
    except CHECKPOINT_ERRORS as exc:
        lines = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {lines[0][:120]}" if lines else type(exc).__name__
        if isinstance(exc, OSError) and exc.strerror:
            reason = f"cannot read: {exc.strerror}"
        raise UserError(f"{path}: not a readable checkpoint ({reason}); {fix}") from None


def write_atomically(path: Path, data: bytes, *, what: str = "checkpoint",
                     fix: str = "free disk space or point --storage elsewhere") -> None:
    """Write to a temporary file, fsync, rename: a full disk leaves the old state, never half a checkpoint
    (or half of `what` else this writes: every file tune-rl must never leave half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"{what} not written to {path.parent} ({exc.strerror}); {fix}") from None
