"""Tab completion for bash, zsh and fish, by argcomplete: `tune-rl completion bash` prints the script.

The shell's completion function runs `tune-rl` itself with argcomplete's environment
(`_ARGCOMPLETE`, `COMP_LINE`, `COMP_POINT`); `cli.entry_point` then builds the parser for the
words typed so far and hands it to `complete`, which answers and exits. The completers read
names from files and from registries that import nothing heavy, so an answer costs about what
`tune-rl --help` does: Ray, torch, MLflow and gymnasium are never imported here.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shlex
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")
PROG = "tune-rl"


def script(shell: str) -> str:
    """The shell code that registers `tune-rl`'s completion."""
    import argcomplete

    return argcomplete.shellcode([PROG], shell=shell)


def typed_words() -> list[str]:
    """The words of the command line being completed, after `tune-rl`, up to the cursor."""
    line = os.environ.get("COMP_LINE", "")
    line = line[: int(os.environ.get("COMP_POINT", len(line)))]
    try:
        words = shlex.split(line)
    except ValueError:  # an unclosed quote: the word being typed
        words = line.split()
    return words[1:]


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request for `parser` and exit (argcomplete's protocol)."""
    import argcomplete

    attach(parser)
    # Flags once a "-" is typed: a bare Tab offers the command's names and values, not 40 flags.
    argcomplete.autocomplete(parser, always_complete_options=False, exit_method=sys.exit)


def attach(parser: argparse.ArgumentParser, command: tuple[str, ...] = ()) -> None:
    """Give every action whose values we can list a completer, down every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                attach(sub, (*command, name))
            continue
        completer = COMPLETERS.get((command[:1], action.dest)) or COMPLETERS.get(((), action.dest))
        if completer is not None:
            action.completer = completer  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- the names


def space_names(**_: Any) -> list[str]:
    from tune_runner.spec.experiment import shipped_spaces

    return list(shipped_spaces())


def spaces_and_files(prefix: str, **_: Any) -> list[str]:
    """Shipped space names, and YAML files and folders for a path being typed."""
    return space_names() + _paths(prefix, suffixes=(".yaml", ".yml"))


def scheduler_names(**_: Any) -> list[str]:
    """Scheduler presets and the scheduler types a space or --scheduler may name."""
    from tune_runner import paths
    from tune_runner.tuning.schedulers import SCHEDULERS

    presets = [p.stem for p in sorted(paths.shipped("schedulers").glob("*.yaml"))]
    return list(dict.fromkeys([*presets, *SCHEDULERS.names()]))


def searcher_names(**_: Any) -> list[str]:
    from tune_runner.searchers import SEARCHERS

    return SEARCHERS.names()


def trainable_names(**_: Any) -> list[str]:
    """The catalog's names: ours, the registered agents, the oracles and rllib/<Algo> for RLlib's algorithms
    (read from Ray's source, not imported)."""
    from tune_runner.trainables import catalog  # light: names, no Ray

    return catalog.trainable_names(rllib=rllib_algorithms)


def rllib_algorithms() -> list[str]:
    """The keys of RLlib's ALGORITHMS registry, parsed from its file: importing RLlib takes seconds."""
    spec = importlib.util.find_spec("ray")  # a top-level package: found, not imported
    if spec is None or spec.origin is None:
        return []
    registry = Path(spec.origin).parent / "rllib" / "algorithms" / "registry.py"
    try:
        tree = ast.parse(registry.read_text())
    except (OSError, SyntaxError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ALGORITHMS" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return []


def experiment_names(parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Experiments under --storage (a local folder) or the default results folder, newest first."""
    return [path.name for path in _experiments(parsed_args)]


def bundles(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Files being typed, and the best.yaml of each experiment under the storage folder."""
    from tune_runner.paths import BUNDLE_FILE

    found = [str(path / BUNDLE_FILE) for path in _experiments(parsed_args) if (path / BUNDLE_FILE).is_file()]
    return _paths(prefix, suffixes=(".yaml", ".yml")) + found


def _experiments(parsed_args: argparse.Namespace) -> list[Path]:
    from tune_runner import paths

    root = getattr(parsed_args, "storage", None) or paths.default_storage()
    if not isinstance(root, Path) or not root.is_dir():  # a URI: nothing to list from here
        return []
    found = [p for p in root.iterdir() if (p / paths.SPEC_FILE).is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def set_keys(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """`--set`: KEY= of the chosen space (its fixed and searched values, env_config.*, the top-level
    settings), or after KEY= the values we know for it (trainable, searcher, scheduler, mode)."""
    from tune_runner.spec import reserved

    key, eq, _ = prefix.partition("=")
    if eq:
        values = VALUES.get(key)
        return [f"{key}={value}" for value in values()] if values else []
    raw = _space_file(getattr(parsed_args, "space", None), overrides=getattr(parsed_args, "overrides", None) or [])
    keys: list[str] = []
    for section in ("fixed", "space"):
        keys += list(raw.get(section) or {}) if isinstance(raw.get(section), dict) else []
    env_config = raw.get("env_config")
    keys += [reserved.PREFIX + k for k in env_config] if isinstance(env_config, dict) else []
    keys += ["budget", "trainable", "env", "metric", "mode", "stop_at", "searcher", "scheduler", "num_samples",
             "max_concurrent", *reserved.SEED_KEYS, "reevaluate"]
    return [f"{k}=" for k in dict.fromkeys(keys)]


def _space_file(ref: str | None, *, overrides: list[str]) -> dict:
    """The chosen space as read, its `backends:` section for the chosen trainable merged in (as
    load_spec does; `--set trainable=` already typed counts). Nothing without a readable --space."""
    if not ref:
        return {}
    from tune_runner.files import read_yaml
    from tune_runner.spec.experiment import apply_backend, resolve_space

    try:
        raw = read_yaml(resolve_space(ref))
        chosen = raw.get("trainable")
        for item in overrides:
            key, _, value = item.partition("=")
            chosen = value if key.strip() == "trainable" else chosen
        return apply_backend(raw, chosen, where=ref)
    except Exception:  # noqa: BLE001 - a half-typed name or a broken file: offer the generic keys
        return {}


def _paths(prefix: str, *, suffixes: tuple[str, ...]) -> list[str]:
    """Folders and files with one of `suffixes` that start with `prefix` (a path being typed)."""
    folder, _, start = prefix.rpartition("/")
    base = Path(folder or ".").expanduser()
    if not base.is_dir():
        return []
    shown = f"{folder}/" if folder else ""
    found = []
    for entry in base.iterdir():
        if entry.name.startswith(start) and not entry.name.startswith("."):
            if entry.is_dir():
                found.append(f"{shown}{entry.name}/")
            elif entry.suffix in suffixes:
                found.append(f"{shown}{entry.name}")
    return sorted(found)


VALUES: dict[str, Callable[[], Iterable[str]]] = {
    "trainable": trainable_names, "searcher": searcher_names, "scheduler": scheduler_names,
    "mode": lambda: ("max", "min"),
}

# (command, dest) -> completer; () as the command: the same dest in every command.
COMPLETERS: dict[tuple[tuple[str, ...], str], Callable[..., Iterable[str]]] = {
    ((), "space"): spaces_and_files,
    ((), "scheduler"): scheduler_names,
    ((), "searcher"): searcher_names,
    ((), "overrides"): set_keys,
    ((), "agent_name"): trainable_names,
    ((), "model_name"): lambda **_: ["mlp"],
    ((), "experiment"): experiment_names,  # best, report
    (("resume",), "name"): experiment_names,
    (("sync",), "name"): experiment_names,
    (("search",), "resume"): experiment_names,
    (("verify",), "bundle"): bundles,
}
