"""Curriculum learning: a task function raises the task of task-settable envs after every iteration.

A space file names the function, `fixed: {env_task_fn: "module:function"}` (or
`path/to/file.py:function`, relative to the directory tune-rl runs in). It has RLlib's
signature, `fn(train_results, task_settable_env, env_ctx) -> new_task`; the env has
`get_task()` and `set_task(task)` (RLlib's TaskSettableEnv, or any env with both methods).

After each training iteration the function is called once per vector env, with the iteration's
result (our names plus RLlib's: `env_steps`, `num_env_steps_sampled_lifetime`,
`timesteps_total`, `training_iteration`, `episode_return_mean`), the first sub-env and the
env_config; its answer is set on every sub-env of that vector env. The trial reports `task`,
the mean task over the sub-envs that sample (when tasks are numbers).

RLlib 2.60 no longer calls `env_task_fn` itself (the setting is deprecated and
`AlgorithmConfig.environment(env_task_fn=...)` raises), so for `rllib/*` an `on_train_result`
callback does it on every EnvRunner. Nothing here imports RLlib or starts Ray.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Mapping
from numbers import Real
from pathlib import Path
from typing import Any

import gymnasium as gym

from tune_runner.errors import UserError, closest
from tune_runner.spec.reserved import TASK_FN_KEY

TASK_METHODS = ("get_task", "set_task")
_RESOLVED: dict[str, Callable] = {}  # ref -> function, once per process
_CHECKED_ENVS: set[str] = set()  # env ids found task-settable in this process


def _split(ref: Any) -> tuple[str, str]:
    """('module or file', 'function') of a reference, or a UserError showing the two forms."""
    where, _, name = ref.rpartition(":") if isinstance(ref, str) else ("", "", "")
    if not where or not name.isidentifier():
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: expected 'module:function' or 'path/to/file.py:function'")
    return where, name


def is_file_ref(where: str) -> bool:
    """Whether the part before the colon names a Python file rather than a module."""
    return where.endswith(".py") or "/" in where


def absolute_ref(ref: str) -> str:
    """A file reference made absolute against the current directory (trials run elsewhere)."""
    where, name = _split(ref)
    if not is_file_ref(where) or Path(where).expanduser().is_absolute():
        return ref
    return f"{Path(where).expanduser().resolve()}:{name}"


def resolve_task_fn(ref: str) -> Callable[[dict, Any, Any], Any]:
    """The task function a reference names; one-line UserErrors for every way it can be wrong."""
    if isinstance(ref, str) and ref in _RESOLVED:
        return _RESOLVED[ref]
    where, name = _split(ref)
    module = _load_file(ref, where) if is_file_ref(where) else _import(ref, where)
    if not hasattr(module, name):
        functions = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
        near = closest(name, functions)
        hint = f"; did you mean {near!r}?" if near else ""
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: module {where} has no {name}{hint}")
    fn = getattr(module, name)
    if not callable(fn):
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: {name} is a {type(fn).__name__}, not a function")
    try:
        inspect.signature(fn).bind(None, None, None)
    except TypeError:
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: {name} must take (train_results, task_settable_env, "
                        f"env_ctx)") from None
    except ValueError:
        pass  # no signature to read (a builtin): let the call decide
    _RESOLVED[ref] = fn
    return fn


def _import(ref: str, module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise UserError(f"{TASK_FN_KEY}: {ref!r}: no module named {exc.name!r} (is it on PYTHONPATH?)") from None
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: importing {module} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed at import: name the error, one line
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: importing {module} failed: {type(exc).__name__}: {exc}") from None


def _load_file(ref: str, where: str) -> Any:
    path = Path(where).expanduser().resolve()
    if not path.exists():  # a folder or an unreadable file: read_source says why
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: no file {path}")
    name = f"tune_rl_task_fn_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    from tune_runner import files

    source = files.read_source(path, shown=f"{TASK_FN_KEY}: {ref!r}: {path}",
                               expected="a Python file with the task function")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it, as a normal import does (dataclasses, pickle)
    try:
        files.run_source(module, path, source)
    except Exception as exc:  # noqa: BLE001 - the user's file failed at import: name the error, one line
        del sys.modules[name]
        raise UserError(f"{TASK_FN_KEY}: {ref!r}: running {path} failed: {type(exc).__name__}: {exc}") from None
    return module


def task_results(result: Mapping[str, Any], *, env_steps: int, **more: Any) -> dict[str, Any]:
    """`result` plus the keys a task function may read, under our names and RLlib's (old and new stack)."""
    return {**result, **more, "env_steps": env_steps, "num_env_steps_sampled_lifetime": env_steps,
            "timesteps_total": env_steps}


def check_task_settable(vector_env: gym.vector.VectorEnv, *, env_id: str) -> None:
    """A one-line UserError unless every sub-env of `vector_env` has get_task and set_task."""
    base = vector_env.unwrapped
    if not isinstance(base, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)):
        raise UserError(f"env {env_id} is not task-settable here: it runs as one {type(base).__name__} with no "
                        f"sub-envs to set a task on; set gym_env_vectorize_mode: sync")
    for method in TASK_METHODS:
        if not all(base.call("has_wrapper_attr", method)):
            raise UserError(_not_settable(env_id, method))


def _not_settable(env_id: str, method: str) -> str:
    return (f"env {env_id} is not task-settable: it has no {method}() (a curriculum ({TASK_FN_KEY}) needs "
            f"get_task() and set_task(task), as RLlib's TaskSettableEnv)")


class _RemoteSubEnv:
    """Stands in for a sub-env that lives in another process (AsyncVectorEnv): its task methods only."""

    def __init__(self, vector_env: gym.vector.AsyncVectorEnv) -> None:
        self._vector_env = vector_env

    def get_task(self) -> Any:
        return self._vector_env.call("get_task")[0]

    def set_task(self, task: Any) -> None:
        self._vector_env.call("set_task", task)


def first_sub_env(vector_env: gym.vector.VectorEnv) -> Any:
    """The first sub-env, unwrapped (what a task function gets as `task_settable_env`)."""
    base = vector_env.unwrapped
    if isinstance(base, gym.vector.SyncVectorEnv):
        return base.envs[0].unwrapped
    return _RemoteSubEnv(base)


def current_tasks(vector_env: gym.vector.VectorEnv) -> list[Any]:
    """Every sub-env's task, in order."""
    return list(vector_env.unwrapped.call("get_task"))


def advance(fn: Callable[[dict, Any, Any], Any], *, vector_env: gym.vector.VectorEnv, results: dict[str, Any],
            env_ctx: Mapping[str, Any]) -> list[Any]:
    """Ask `fn` for the next task (given the first sub-env), set it on every sub-env; the tasks now set."""
    task = fn(results, first_sub_env(vector_env), env_ctx)
    vector_env.unwrapped.call("set_task", task)
    return current_tasks(vector_env)


def seed_vector_envs(learner: Any) -> list[gym.vector.VectorEnv]:
    """The gymnasium vector env of each seed of one of our learners (one for a one-seed learner)."""
    return [env.env for env in learner.env.envs]


def check_seeds_settable(learner: Any, *, env_id: str) -> None:
    """check_task_settable on every seed's envs."""
    for vector_env in seed_vector_envs(learner):
        check_task_settable(vector_env, env_id=env_id)


def advance_seeds(fn: Callable[[dict, Any, Any], Any], *, learner: Any, result: Mapping[str, Any],
                  env_ctx: Mapping[str, Any], **more: Any) -> list[Any]:
    """`advance` on each seed's envs of one of our learners, given that seed's own result (its `seed_<i>/`
    numbers and env steps; the trial's result for one seed): a seed's task follows its own training, never
    another seed's. The tasks now set, seed after seed."""
    from tune_runner.algos.seeds import split_seeds

    envs = seed_vector_envs(learner)
    own = split_seeds(result) if len(envs) > 1 else {0: dict(result)}
    tasks: list[Any] = []
    for i, vector_env in enumerate(envs):
        results = task_results(own[i], env_steps=int(own[i]["env_steps"]), **more)
        tasks += advance(fn, vector_env=vector_env, results=results, env_ctx=env_ctx)
    return tasks


def check_env(env_id: str, env_config: Mapping[str, Any] | None = None) -> None:
    """Preflight: one instance of the env must have get_task and set_task (a one-line UserError if not)."""
    if env_id in _CHECKED_ENVS:
        return
    from tune_runner.plugins import ensure_gym_id

    if not ensure_gym_id(env_id):
        return  # not ours to make (RLlib's class-path form); the EnvRunners check it
    env = gym.make(env_id, **dict(env_config or {}))
    try:
        missing = [m for m in TASK_METHODS if not env.has_wrapper_attr(m)]
    finally:
        env.close()
    if missing:
        raise UserError(_not_settable(env_id, missing[0]))
    _CHECKED_ENVS.add(env_id)


def mean_task(tasks: list[Any]) -> float | None:
    """The mean of numeric tasks (what `task` reports); None when there are none or they are not numbers."""
    if not tasks or not all(isinstance(t, Real) and not isinstance(t, bool) for t in tasks):
        return None
    mean = sum(float(t) for t in tasks) / len(tasks)
    return mean if math.isfinite(mean) else None


# ---- RLlib (new API stack) ------------------------------------------------------------------------


def rllib_callback(ref: str) -> Callable[..., None]:
    """The `on_train_result` callable for `AlgorithmConfig.callbacks` that runs the curriculum."""
    import functools

    return functools.partial(on_train_result, ref=ref)


def on_train_result(*, algorithm: Any, result: dict, ref: str, **_: Any) -> None:
    """After RLlib's iteration: advance every EnvRunner's envs (evaluation ones too), add `curriculum/task`."""
    import functools

    from tune_runner.trainables.metrics import RLLIB_METRICS, lookup

    steps = lookup(result, RLLIB_METRICS["env_steps"]) or 0
    results = task_results({k: v for k, v in result.items() if k != "config"}, env_steps=int(steps),
                           episode_return_mean=lookup(result, RLLIB_METRICS["episode_return_mean"]))
    step = functools.partial(advance_env_runner, ref=ref, results=results)
    tasks = _gather(algorithm.env_runner_group.foreach_env_runner(step))
    if getattr(algorithm, "eval_env_runner_group", None) is not None:
        _gather(algorithm.eval_env_runner_group.foreach_env_runner(step))
    mean = mean_task(tasks)
    if mean is not None:
        result["curriculum"] = {"task": mean}


def _gather(answers: list[tuple[list[Any], BaseException | None]]) -> list[Any]:
    """The EnvRunners' tasks, all in one list; the first error any of them hit is raised here."""
    for _, error in answers:
        if error is not None:
            raise error
    return [task for tasks, _ in answers for task in tasks]


def advance_env_runner(env_runner: Any, *, ref: str, results: dict[str, Any]) -> tuple[list[Any],
                                                                                         BaseException | None]:
    """On one EnvRunner (any process): advance its vector env; (its tasks, None) or ([], the error).

    The error comes back as a value because RLlib logs and drops what a remote EnvRunner raises
    (with its default restart_failed_env_runners), which would hide a broken task function.
    """
    if getattr(env_runner, "env", None) is None:
        return [], None  # the local EnvRunner when remote ones sample
    from ray.rllib.env.env_context import EnvContext

    try:
        check_task_settable(env_runner.env, env_id=str(env_runner.config.env))
        ctx = EnvContext(env_runner.config.env_config, worker_index=env_runner.worker_index,
                         num_workers=env_runner.num_workers)
        return advance(resolve_task_fn(ref), vector_env=env_runner.env, results=results, env_ctx=ctx), None
    except Exception as exc:  # noqa: BLE001 - carried to the Algorithm's process and raised there
        return [], exc
