"""The environment registry: `register_env`, the factory gymnasium and Ray call, and what goes to Ray Tune.

An env registered here is made by `gymnasium.make(name, ...)` and by RLlib's `env=name`. Plug-in files write
`from tune_runner.plugins import register_env` (tune_runner.plugins re-exports it and loads the files): this
module knows nothing of plug-in files, only that while one runs (`held_from_ray`) its envs wait for
`ship_envs`. Importing it imports neither Ray nor gymnasium.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tune_runner.errors import UserError
from tune_runner.registry import Registry

if TYPE_CHECKING:
    import gymnasium as gym

T = TypeVar("T")

_CONFIG_PARAMS = ("env_config", "config")

ENVS: Registry[EnvFactory] = Registry("environment")
TORCH_ENVS: dict[str, type] = {}  # env name -> its torch version (tune_runner.algos.torch_envs.TorchVectorEnv)

_UNSHIPPED: dict[str, EnvFactory] = {}  # envs registered while a plug-in file was read, not yet sent to Ray
_reading = False  # True while a plug-in file runs (held_from_ray): its register_env leaves Ray for ship_envs


# ---------------------------------------------------------------------------- where things are defined


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


def check_free(registry: Registry[Any], name: str, obj: Any) -> None:
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
        from tune_runner.plugins.env_api import unwrap_actor_class

        self.name = name
        self.origin = unwrap_actor_class(target)
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

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Pickled as its name (gymnasium's spec inside each pickled env holds the factory): the
        # registered class of a @ray.remote env cannot be found by its name. Load plug-ins first.
        return registered_env, (self.name,)

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
        from tune_runner.plugins.env_api import accepts

        kwargs: dict[str, Any] = {}
        if "render_mode" in config and accepts(self.origin, "render_mode"):
            config = copy.copy(config)  # keeps an EnvContext's worker_index and friends
            kwargs["render_mode"] = config.pop("render_mode")  # type: ignore[union-attr]
        return self.origin(**{self.style: config}, **kwargs)

    def _as_gym_env(self, env: Any) -> gym.Env:
        import gymnasium as gym

        from tune_runner.plugins.env_api import InProcessEnv, api_problems

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


def register_env(name: str, *, torch_env: type | None = None) -> Callable[[T], T]:
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
    `env=name` all build it (inside a plug-in file read by `load_plugins`, RLlib's once
    `ship_to_ray` has run). A name registered by a different definition is a ValueError.

    `torch_env`: the same env as tensors, a subclass of tune_runner.algos.torch_envs.TorchVectorEnv built as
    `torch_env(num_envs, device=..., **env_config)`; our learners step it with `env_backend: torch` (and `auto`
    on a GPU).
    """
    gym_id_ok = isinstance(name, str) and re.fullmatch(r"[\w:.-]+", name)
    if not gym_id_ok:
        raise ValueError(f"register_env: an env name is letters, digits and _ : . - (a gymnasium id), got {name!r}")
    if torch_env is not None and not isinstance(torch_env, type):
        raise ValueError(f"register_env({name!r}, torch_env={torch_env!r}): torch_env is a class (a subclass of "
                         f"tune_runner.algos.torch_envs.TorchVectorEnv), got a {type(torch_env).__name__}")

    def decorate(target: T) -> T:
        import gymnasium as gym

        factory = EnvFactory(name, target)
        check_free(ENVS, name, factory)
        existing = gym.envs.registry.get(name)
        if existing is not None and not isinstance(existing.entry_point, EnvFactory):
            raise ValueError(f"env {name!r} ({describe(factory)}) is already a gymnasium env "
                             f"(entry point {existing.entry_point}); register yours under another name")
        if _reading:
            _UNSHIPPED[name] = factory
        else:
            register_with_ray(factory)
        ENVS.register(name, factory)
        if torch_env is None:
            TORCH_ENVS.pop(name, None)
        else:
            TORCH_ENVS[name] = torch_env
        gym.envs.registry.pop(name, None)  # ours, registered again: replace it without gymnasium's warning
        gym.register(id=name, entry_point=factory)
        return target

    return decorate


def register_with_ray(factory: EnvFactory) -> None:
    """Ray Tune's env registry, which RLlib reads by name; it pickles the creator now and ships it at ray.init.

    Our own envs are sent as a reference (every worker has tune_runner). A plug-in file's env
    goes by value; `ship_to_ray` sends it once the file has run to its end (while a decorator
    runs, the module's names defined further down do not exist yet).
    """
    from ray.tune.registry import register_env as ray_register_env

    qualname = getattr(factory.origin, "__qualname__", "")
    shipped = factory.module.startswith("tune_runner.") and "<locals>" not in qualname
    creator = _RayCreator(factory.name, (factory.module, qualname) if shipped else factory.origin)
    try:
        ray_register_env(factory.name, creator)
    except Exception as exc:  # what fails to pickle raises one of many types
        cause = exc.__cause__ or exc.__context__ or exc  # Ray wraps the pickling error in a paragraph of advice
        raise ValueError(f"env {factory.name!r} ({describe(factory)}): Ray cannot pickle it for its workers: "
                         f"{one_line(cause)}") from exc


class _RayCreator:
    """Ray's creator for one env: `origin` is the class or function, or (module, qualname) to import it by.

    Pickled by cloudpickle (a class from a plug-in file goes by value); never pickles an
    EnvFactory, which pickles as a name that a worker's registries would not know.
    """

    def __init__(self, name: str, origin: Any) -> None:
        self.name, self.origin = name, origin

    def __call__(self, env_config: Mapping[str, Any] | None = None) -> gym.Env:
        from tune_runner.plugins.env_api import find

        origin = find(*self.origin) if isinstance(self.origin, tuple) else self.origin
        return EnvFactory(self.name, origin).make(env_config)


def ray_env_creator(name: str) -> Callable[[Mapping[str, Any]], Any] | None:
    """The creator Ray Tune holds for env `name` (`register_env`, which ships it to every Ray worker); None
    if Ray Tune knows no such env. The one place that asks Ray's registry about an env."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    return _global_registry.get(ENV_CREATOR, name) if _global_registry.contains(ENV_CREATOR, name) else None


def registered_env(name: str) -> EnvFactory:
    """The factory of env `name`; an unknown name is a UserError with the closest one."""
    return ENVS.get(name)


def env_names() -> list[str]:
    """Every env id that can be made: gymnasium's and ours."""
    import gymnasium as gym

    return sorted(set(gym.envs.registry) | set(ENVS.names()))


# ---------------------------------------------------------------------------- plug-in files' envs, for Ray


@contextmanager
def held_from_ray() -> Iterator[None]:
    """While a plug-in file runs: the envs it registers wait for `ship_envs` (while a decorator runs, the
    file's names defined further down do not exist yet, so it cannot be pickled). A file that raises: its
    envs are dropped, not for Ray."""
    global _reading
    envs_before, reading, _reading = set(_UNSHIPPED), _reading, True
    try:
        yield
    except Exception:
        for name in set(_UNSHIPPED) - envs_before:
            del _UNSHIPPED[name]
        raise
    finally:
        _reading = reading


def ship_envs() -> None:
    """Register with Ray Tune every env held back while a plug-in file ran (imports Ray if there is one)."""
    for name, factory in list(_UNSHIPPED.items()):
        try:
            register_with_ray(factory)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        del _UNSHIPPED[name]


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for a one-line error."""
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    first = (message or "").strip().splitlines()
    return f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__
