"""The gymnasium API as tune-rl needs it from an env object, and the adapter for objects that only imitate it.

The seed's env classes are `@ray.remote` classes with reset/step methods: `unwrap_actor_class`
gets the plain class back, `api_problems` says what it lacks, and `InProcessEnv` makes an
instance a gymnasium.Env.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from tune_runner.errors import UserError


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


def find(module: str, qualname: str) -> Any:
    """The object named `qualname` in `module`, importing the module."""
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def accepts(func: Callable[..., Any], keyword: str) -> bool:
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
    elif not (accepts(reset, "seed") and accepts(reset, "options")):
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

    # The wrapped object's class is not its module's attribute of that name (the ActorClass is),
    # so pickle cannot find it by name: pickle its name and state, and unwrap again on load.
    # Our learners' exact restore pickles envs.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        inner = state.pop("inner")
        state["inner_class"] = (type(inner).__module__, type(inner).__qualname__)
        state["inner_state"] = inner.__getstate__()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        cls = unwrap_actor_class(find(*state.pop("inner_class")))
        inner, inner_state = cls.__new__(cls), state.pop("inner_state")
        if hasattr(inner, "__setstate__"):
            inner.__setstate__(inner_state)
        elif inner_state:
            inner.__dict__.update(inner_state)
        self.__dict__.update(state, inner=inner)


def _shape(result: Any) -> str:
    return f"{len(result)} values" if isinstance(result, tuple) else f"a {type(result).__name__}"
