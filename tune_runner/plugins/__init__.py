"""User plug-ins: environments, models and agents registered by decorator, and the files that hold them.

A plug-in file is plain Python that decorates its classes:

    from tune_runner.plugins import register_env

    @register_env("my_corridor")
    class MyCorridor(gymnasium.Env):
        def __init__(self, env_config: dict): ...

`load_plugins` imports the shipped envs/ folder, the `envs/` folder of the working directory
and the files given with --plugins. Each user file is loaded by path and pickled by value, so
Ray workers on machines without the file still get its classes.

Importing this module, or loading a plug-in file, imports neither Ray nor gymnasium (a file
imports what it needs): the envs a file registers go to Ray Tune's registry by `ship_to_ray`,
when a search or a trial starts. The env side (the factory, gymnasium's and Ray's registries) is
tune_runner.plugins.envs, which knows nothing of plug-in files; its names are re-exported here,
where plug-in files and old pickles (Ray's `_RayCreator`, Tune's `EnvFactory`) look for them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from tune_runner import files
from tune_runner import paths as tune_paths
from tune_runner.errors import UserError
from tune_runner.plugins.envs import (  # noqa: F401 - re-exported: plug-in files and old pickles find them here
    ENVS,
    EnvFactory,
    _RayCreator,
    check_free,
    describe,
    env_names,
    held_from_ray,
    one_line,
    ray_env_creator,
    register_env,
    register_with_ray,
    registered_env,
    ship_envs,
)
from tune_runner.registry import Registry

T = TypeVar("T")

SHIPPED_PACKAGE = "tune_runner.envs"
_PLUGIN_PREFIX = "tune_rl_plugin_"
MODELS: Registry[Any] = Registry("model")
AGENTS: Registry[Any] = Registry("agent")
BUILT_IN_MODEL = "mlp"  # our learners' own MLP (tune_runner.algos.networks.BUILT_IN), sized by fcnet_hiddens
MODELS.register(BUILT_IN_MODEL, "tune_runner.algos.networks:MLP")  # torch loads when a network is built
MODELS.register("cnn", "tune_runner.algos.networks:CNN")  # our learners' choice for image observations
# Our own learners are agents too: tune_runner.algos.records registers each (its record and its class here) when
# imported, which every reader of AGENTS in tune_runner does first (a test's snapshot of AGENTS: tests/conftest.py).

_DISCOVERY = {"on": True}  # set_discovery's; a module-level switch: ensure_gym_id, deep in an env's build, asks it too
_BY_VALUE: set[str] = set()  # plug-in modules to pickle by value (their files are not on the workers), not yet told


# Env families that register with gymnasium only when asked: their id prefix -> (module, its register function or
# None where importing the module registers them, the package to install).
NAMESPACES = {"MinAtar/": ("minatar.gym", "register_envs", "minatar"), "ALE/": ("ale_py", None, "ale-py")}


def register_namespace(env_id: str) -> str | None:
    """Register the family of `env_id` (MinAtar/..., ALE/...) with gymnasium if it has one; a one-line reason with
    the `pip install` line when its package is missing, else None."""
    import gymnasium as gym

    for prefix, (module, function, package) in NAMESPACES.items():
        if env_id.startswith(prefix) and env_id not in gym.registry:
            try:
                registered = importlib.import_module(module)
                if function:
                    getattr(registered, function)()
            except ImportError:
                return f"{env_id} needs the {package} package: pip install {package}"
    return None


def ensure_gym_id(env_id: str) -> bool:
    """Make `env_id` a gymnasium id in this process; False when neither gymnasium nor Ray Tune knows it.

    Our shipped envs register themselves (with gymnasium too) when the plug-ins load; an env registered only
    with Ray Tune is registered with gymnasium here, its creator called with the env_config as a dict.
    """
    import gymnasium as gym

    if env_id in gym.registry:
        return True
    register_namespace(env_id)
    if env_id in gym.registry:
        return True
    load_plugins()  # ./envs/ where discovery is on (set_discovery)
    if env_id in gym.registry:
        return True
    creator = ray_env_creator(env_id)
    if creator is None:
        return False
    gym.register(env_id, entry_point=lambda **env_config: creator(env_config))
    return True


# ---------------------------------------------------------------------------- models and agents


def register_model(name: str) -> Callable[[T], T]:
    """Record a model class under `name` (the seed's `@register_model`); returns it unchanged."""
    return _recorder(MODELS, name)


def register_agent(name: str) -> Callable[[T], T]:
    """Record an agent class under `name` (the seed's `@register_agent`); returns it unchanged."""
    return _recorder(AGENTS, name)


def _recorder(registry: Registry[Any], name: str) -> Callable[[T], T]:
    def decorate(target: T) -> T:
        if not callable(target):
            raise TypeError(f"register {registry.what} {name!r}: expected a class or function, got {target!r}")
        check_free(registry, name, target)
        registry.register(name, target)
        return target

    return decorate


# ---------------------------------------------------------------------------- plug-in files


def set_discovery(on: bool) -> None:
    """Whether `load_plugins` imports the working folder's `envs/` unasked (on by default), for the rest of this
    process: off for --no-plugins and a space's `plugins: false`, where no code but the files named may run."""
    _DISCOVERY["on"] = on


def load_plugins(paths: Iterable[str | os.PathLike[str]] = (), *, cwd: str | os.PathLike[str] | None = None,
                 shipped: bool = True, discover: bool | None = None) -> list[Path]:
    """Import the shipped envs, `<cwd>/envs/*.py` and each of `paths`; once each, so calling again is cheap.

    A path is a .py file or a folder (its .py files, and its subfolders'; names starting with
    _ or . are skipped), relative to `cwd` (default: the working directory). Returns the
    absolute paths of the user files (not the shipped ones), for a trial process to load
    again. A missing path, a non-.py file or a file that raises is a one-line UserError.
    `shipped=False` leaves out our envs (they register envs only, and one imports Ray): what
    a user's agent and model options need. `discover=False` (default: set_discovery's) leaves out
    `<cwd>/envs`. Nothing is sent to Ray here (see `ship_to_ray`).
    """
    base = Path(os.getcwd() if cwd is None else cwd)
    ours = tune_paths.shipped("envs").resolve()
    for file in _python_files(ours) if shipped else ():
        _load_file(file, label=f"{ours.name}/{file.relative_to(ours)}",
                   module_name=f"{SHIPPED_PACKAGE}.{file.stem}", by_value=False)
    loaded: list[Path] = []
    local = base / "envs"
    if (_DISCOVERY["on"] if discover is None else discover) and local.is_dir() and local.resolve() != ours:
        loaded += [_load_user_file(file, label=str(file.relative_to(base))) for file in _python_files(local)]
    for given in paths:
        loaded += [_load_user_file(file, label=f"--plugins {shown}") for file, shown in _expand(given, base=base)]
    return list(dict.fromkeys(loaded))


def _expand(given: str | os.PathLike[str], *, base: Path) -> list[tuple[Path, str]]:
    """The .py files that one --plugins argument names, each with the path to show in errors."""
    path = base / Path(given).expanduser()
    if not path.exists():
        raise UserError(f"--plugins {given}: no such file or folder")
    if path.is_dir():
        files = _python_files(path)
        if not files:
            raise UserError(f"--plugins {given}: no .py files in this folder")
        return [(file, os.path.join(str(given), str(file.relative_to(path)))) for file in files]
    if path.suffix != ".py":
        raise UserError(f"--plugins {given}: not a Python file; give a .py file or a folder of them")
    return [(path, str(given))]


def _python_files(folder: Path) -> list[Path]:
    """The .py files under `folder`, sorted, skipping names that start with _ or . (files and folders)."""
    found: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(("_", ".")):
            continue
        if entry.is_dir():
            found += _python_files(entry)
        elif entry.suffix == ".py":
            found.append(entry.resolve())
    return found


def _load_user_file(file: Path, *, label: str) -> Path:
    file = file.resolve()
    stem = re.sub(r"\W", "_", file.stem)
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:8]
    _load_file(file, label=label, module_name=f"{_PLUGIN_PREFIX}{stem}_{digest}", by_value=True)
    return file


def _load_file(file: Path, *, label: str, module_name: str, by_value: bool) -> ModuleType:
    """Execute `file` as module `module_name`, unless that module is loaded already."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    # Read here first: a folder named x.py, an unreadable file or one that is not UTF-8 is one line naming it.
    source = files.read_source(file, shown=label)
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module_name] = module
    with held_from_ray():  # a file that raises: the envs it registered are dropped too
        try:
            files.run_source(module, file, source)
        except Exception as exc:
            del sys.modules[module_name]
            raise UserError(f"{label}: {one_line(exc)}{_line_in(exc, file)}") from exc
    if by_value:
        _BY_VALUE.add(module_name)
    return module


def ship_to_ray() -> None:
    """Register with Ray Tune every env that `load_plugins` read and Ray does not know yet.

    RLlib finds an env there by name; Ray pickles the creator now and sends it to its workers
    (at ray.init, or at once when Ray runs). A plug-in file goes by value, whole, so a worker
    without the file builds the env too. Called when a search or a trial starts: it imports Ray.
    """
    if _BY_VALUE:  # told first: registering an env pickles its creator, which must then go by value
        from ray import cloudpickle

        for module_name in list(_BY_VALUE):
            if module_name in sys.modules:
                cloudpickle.register_pickle_by_value(sys.modules[module_name])
            _BY_VALUE.discard(module_name)
    ship_envs()


def _line_in(exc: BaseException, file: Path) -> str:
    """` (line N)`: the deepest line of `file` in the traceback, or where a syntax error is."""
    if isinstance(exc, SyntaxError) and exc.lineno and exc.filename == str(file):
        return f" (line {exc.lineno})"
    line = None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(file):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line else ""
