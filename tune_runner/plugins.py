"""User plug-ins: environments, models and agents registered by decorator, and the files that hold them.

A plug-in file is plain Python that decorates its classes:

    from tune_runner.plugins import register_env

    @register_env("my_corridor")
    class MyCorridor(gymnasium.Env):
        def __init__(self, env_config: dict): ...

`load_plugins` imports the shipped envs/ folder, the `envs/` folder of the working directory
and the files given with --plugins. Each user file is loaded by path and pickled by value, so
Ray workers on machines without the file still get its classes.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, TypeVar

import gymnasium as gym

from tune_runner import paths as tune_paths
from tune_runner.errors import UserError
from tune_runner.registry import Registry

T = TypeVar("T")

SHIPPED_PACKAGE = "tune_runner.envs"
_PLUGIN_PREFIX = "tune_rl_plugin_"
_CONFIG_PARAMS = ("env_config", "config")

ENVS: Registry[EnvFactory] = Registry("environment")
MODELS: Registry[Any] = Registry("model")
AGENTS: Registry[Any] = Registry("agent")


# ---------------------------------------------------------------------------- where things are defined


def unwrap_actor_class(obj: Any) -> Any:
    """The plain Python class behind a `@ray.remote` class; any other object unchanged.

    Starts no Ray: `ActorClass.__ray_metadata__.modified_class` is Ray's subclass of the user's
    class (it adds `__ray_ready__`, `__ray_terminate__`, ...) and keeps the original as
    `__ray_actor_class__`.
    """
    meta = getattr(obj, "__ray_metadata__", None)
    if meta is None:
        return obj
    modified = getattr(meta, "modified_class", None)
    if modified is None:
        raise TypeError(f"{obj!r} is a Ray actor class without its Python class (a cross-language actor?)")
    return getattr(modified, "__ray_actor_class__", modified)


def _definition(obj: Any) -> tuple[str, str]:
    """(source file, qualified name): the same for one class imported twice, e.g. by a re-import."""
    obj = obj.origin if isinstance(obj, EnvFactory) else obj
    try:
        file = str(Path(inspect.getfile(obj)).resolve())
    except (TypeError, OSError):
        file = getattr(obj, "__module__", "?")
    return file, getattr(obj, "__qualname__", repr(obj))


def describe(obj: Any) -> str:
    """`path/file.py:12 (Name)`, where `obj` is defined, for error messages."""
    file, name = _definition(obj)
    obj = obj.origin if isinstance(obj, EnvFactory) else obj
    code = getattr(obj, "__code__", None)
    try:
        line = code.co_firstlineno if code else inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return f"{file} ({name})"
    return f"{file}:{line} ({name})"


def _check_free(registry: Registry[Any], name: str, obj: Any) -> None:
    """A name already taken by a different definition is a ValueError naming both; the same one is fine."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a {registry.what} name must be a non-empty string, got {name!r}")
    old = registry.peek(name)
    if old is not None and _definition(old) != _definition(obj):
        raise ValueError(f"{registry.what} {name!r} is registered twice: by {describe(old)} and by "
                         f"{describe(obj)}; rename one of them")


# ---------------------------------------------------------------------------- environments


class EnvFactory:
    """Builds the env registered as `name`: gymnasium calls it with keywords, Ray with a dict.

    `origin` is the registered class or function (a Ray actor class already unwrapped).
    """

    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.origin = unwrap_actor_class(target)
        self.from_actor = self.origin is not target
        if inspect.isclass(self.origin):
            self.style = _init_style(self.origin)
        elif callable(self.origin):
            self.style = "function"
        else:
            raise TypeError(f"register_env({name!r}) takes a gymnasium.Env class, a function env_config -> env, "
                            f"or a @ray.remote class, got {target!r}")

    @property
    def module(self) -> str:
        return getattr(self.origin, "__module__", "")

    @property
    def metadata(self) -> dict[str, Any]:
        """The class's metadata, which gymnasium.make reads for the render modes."""
        metadata = getattr(self.origin, "metadata", None) if self.style != "function" else None
        if not isinstance(metadata, dict):
            raise AttributeError("metadata")  # none known: gymnasium then checks no render mode
        return metadata

    def __call__(self, **env_config: Any) -> gym.Env:
        """gymnasium's entry point: `gymnasium.make(name, **env_config)` hands the keys over as keywords."""
        return self.make(env_config)

    def make(self, env_config: Mapping[str, Any] | None = None) -> gym.Env:
        """Ray's creator: one env from an env_config dict (RLlib's EnvContext is passed through as it is)."""
        config = {} if env_config is None else env_config
        if self.style == "function":
            env = self.origin(config)
        elif self.style == "kwargs":
            env = self.origin(**config)
        else:
            env = self._construct(config)
        return self._as_gym_env(env)

    def _construct(self, config: Mapping[str, Any]) -> Any:
        """`cls(env_config=config)`, with render_mode passed by itself where __init__ takes it."""
        kwargs: dict[str, Any] = {}
        if "render_mode" in config and _accepts(self.origin, "render_mode"):
            config = copy.copy(config)  # keeps an EnvContext's worker_index and friends
            kwargs["render_mode"] = config.pop("render_mode")  # type: ignore[union-attr]
        return self.origin(**{self.style: config}, **kwargs)

    def _as_gym_env(self, env: Any) -> gym.Env:
        if isinstance(env, gym.Env):
            return env
        where = f"env {self.name!r} ({describe(self.origin)})"
        if self.style == "function":
            raise UserError(f"{where}: the function returned {type(env).__name__}, not a gymnasium.Env")
        problems = api_problems(env)
        if problems:
            raise UserError(f"{where} does not follow the gymnasium API: {'; '.join(problems)}")
        return InProcessEnv(env, where=where)


def _init_style(cls: type) -> str:
    """`env_config` or `config` when __init__ has a parameter of that name, else `kwargs`."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return "kwargs"
    for name in _CONFIG_PARAMS:
        if name in params and params[name].kind is not inspect.Parameter.POSITIONAL_ONLY:
            return name
    return "kwargs"


def _accepts(func: Callable[..., Any], keyword: str) -> bool:
    """Whether `func` takes `keyword` by name (or any keyword, through **kwargs)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return keyword in params and params[keyword].kind is not inspect.Parameter.POSITIONAL_ONLY


def api_problems(env: Any) -> list[str]:
    """What keeps an object that is not a gymnasium.Env from being used as one (empty when nothing)."""
    problems = [f"no {attr} (a gymnasium.spaces.Space)" for attr in ("observation_space", "action_space")
                if not isinstance(getattr(env, attr, None), gym.spaces.Space)]
    reset = getattr(env, "reset", None)
    if not callable(reset):
        problems.append("no reset(*, seed=None, options=None) -> (obs, info)")
    elif not (_accepts(reset, "seed") and _accepts(reset, "options")):
        problems.append("reset() takes no seed/options keywords (the old gym API); write "
                        "reset(self, *, seed=None, options=None) returning (obs, info)")
    if not callable(getattr(env, "step", None)):
        problems.append("no step(action) -> (obs, reward, terminated, truncated, info)")
    return problems


class InProcessEnv(gym.Env):
    """A gymnasium.Env around an object that has the gymnasium API without subclassing Env.

    This is how the seed's `@ray.remote` env classes run: in the sampling process, one object
    per env, instead of one Ray actor per env and a remote call per step. Each result is
    checked, so an old-API `step` (4 values) fails on the first step with the fix.
    Other attributes (e.g. `set_task`) are read from the wrapped object.
    """

    def __init__(self, inner: Any, *, where: str) -> None:
        self.inner, self.where = inner, where
        self.observation_space = inner.observation_space
        self.action_space = inner.action_space
        metadata = getattr(inner, "metadata", None)
        self.metadata = metadata if isinstance(metadata, dict) else {"render_modes": []}
        self.render_mode = getattr(inner, "render_mode", None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        result = self.inner.reset(seed=seed, options=options)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise UserError(f"{self.where}: reset() returned {_shape(result)}; gymnasium envs return (obs, info)")
        return result

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        result = self.inner.step(action)
        if not (isinstance(result, tuple) and len(result) == 5):
            old_api = isinstance(result, tuple) and len(result) == 4
            hint = " (the old gym API: obs, reward, done, info)" if old_api else ""
            raise UserError(f"{self.where}: step() returned {_shape(result)}{hint}; gymnasium envs return "
                            f"(obs, reward, terminated, truncated, info)")
        return result

    def render(self) -> Any:
        render = getattr(self.inner, "render", None)
        return render() if callable(render) else None

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name.startswith("__"):  # unpickling reads attributes before `inner` is set
            raise AttributeError(name)
        return getattr(self.inner, name)


def _shape(result: Any) -> str:
    return f"{len(result)} values" if isinstance(result, tuple) else f"a {type(result).__name__}"


def register_env(name: str) -> Callable[[T], T]:
    """Register an environment under `name` with gymnasium, Ray Tune and tune-rl; returns it unchanged.

    Accepts:
      - a gymnasium.Env subclass. Its __init__ decides how env_config arrives: a parameter
        named `env_config` or `config` gets the whole dict (RLlib's convention; a
        `render_mode` key goes to a `render_mode` parameter when __init__ has one); any
        other __init__ gets the keys as keyword arguments (gymnasium's convention);
      - a function `f(env_config: dict) -> gymnasium.Env`;
      - a `@ray.remote` class (the seed's style). It is unwrapped and runs in-process like an
        env class, saving the seed's one Ray actor per env; it must have the gymnasium API
        (spaces, reset(*, seed, options) -> (obs, info), step -> 5 values), and an env
        without it fails when made, naming what is missing.
    Then `gymnasium.make(name, **env_config)`, `gymnasium.make_vec(name, ...)` and RLlib's
    `env=name` all build it. A name registered by a different definition is a ValueError.
    """
    gym_id_ok = isinstance(name, str) and re.fullmatch(r"[\w:.-]+", name)
    if not gym_id_ok:
        raise ValueError(f"register_env: an env name is letters, digits and _ : . - (a gymnasium id), got {name!r}")

    def decorate(target: T) -> T:
        factory = EnvFactory(name, target)
        _check_free(ENVS, name, factory)
        existing = gym.envs.registry.get(name)
        if existing is not None and not isinstance(existing.entry_point, EnvFactory):
            raise ValueError(f"env {name!r} ({describe(factory)}) is already a gymnasium env "
                             f"(entry point {existing.entry_point}); register yours under another name")
        register_with_ray(factory)
        ENVS.register(name, factory)
        gym.envs.registry.pop(name, None)  # ours, registered again: replace it without gymnasium's warning
        gym.register(id=name, entry_point=factory)
        return target

    return decorate


def register_with_ray(factory: EnvFactory) -> None:
    """Ray Tune's env registry, which RLlib reads by name; it pickles the creator now and ships it at ray.init.

    While a decorator runs, its class is not yet a name in its module, so cloudpickle would copy
    it by value, without the module's names defined further down. Our own envs are therefore
    sent as a reference (every worker has tune_runner); a plug-in file is pickled again, whole,
    once `load_plugins` has run it.
    """
    from ray.tune.registry import register_env as ray_register_env

    qualname = getattr(factory.origin, "__qualname__", "")
    shipped = factory.module.startswith("tune_runner.") and "<locals>" not in qualname
    creator = _ByReference(factory.name, factory.module, qualname) if shipped else factory.make
    try:
        ray_register_env(factory.name, creator)
    except Exception as exc:  # what fails to pickle raises one of many types
        raise ValueError(f"env {factory.name!r} ({describe(factory)}): Ray cannot pickle it for its workers: "
                         f"{type(exc).__name__}: {exc}") from exc


class _ByReference:
    """Ray's creator for an env in a module every worker imports: two names are pickled, not the class."""

    def __init__(self, name: str, module: str, qualname: str) -> None:
        self.name, self.module, self.qualname = name, module, qualname

    def __call__(self, env_config: Mapping[str, Any] | None = None) -> gym.Env:
        target: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            target = getattr(target, part)
        return EnvFactory(self.name, target).make(env_config)


def env_names() -> list[str]:
    """Every env id that can be made: gymnasium's and ours."""
    return sorted(set(gym.envs.registry) | set(ENVS.names()))


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
        _check_free(registry, name, target)
        registry.register(name, target)
        return target

    return decorate


# ---------------------------------------------------------------------------- plug-in files


def load_plugins(paths: Iterable[str | os.PathLike[str]] = (), *, cwd: str | os.PathLike[str] | None = None
                 ) -> list[Path]:
    """Import the shipped envs, `<cwd>/envs/*.py` and each of `paths`; once each, so calling again is cheap.

    A path is a .py file or a folder (its .py files, and its subfolders'; names starting with
    _ or . are skipped), relative to `cwd` (default: the working directory). Returns the
    absolute paths of the user files (not the shipped ones), for a trial process to load
    again. A missing path, a non-.py file or a file that raises is a one-line UserError.
    """
    base = Path(os.getcwd() if cwd is None else cwd)
    shipped = tune_paths.shipped("envs").resolve()
    for file in _python_files(shipped):
        _load_file(file, label=f"{shipped.name}/{file.relative_to(shipped)}",
                   module_name=f"{SHIPPED_PACKAGE}.{file.stem}", by_value=False)
    loaded: list[Path] = []
    local = base / "envs"
    if local.is_dir() and local.resolve() != shipped:
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
    from ray import cloudpickle

    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module_name] = module
    if by_value:  # before running it: its register_env pickles the env class for Ray
        cloudpickle.register_pickle_by_value(module)
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        del sys.modules[module_name]
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
        raise UserError(f"{label}: {_one_line(exc)}{_line_in(exc, file)}") from exc
    for name in ENVS.names() if by_value else ():  # pickled again, whole: see register_with_ray
        factory = ENVS.peek(name)
        if isinstance(factory, EnvFactory) and factory.module == module_name:
            register_with_ray(factory)
    return module


def _one_line(exc: BaseException) -> str:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    first = (message or "").strip().splitlines()
    return f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__


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
