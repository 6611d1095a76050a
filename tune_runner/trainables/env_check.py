"""The env, built before launch with the real env_config and checked against what the trainable trains.

A constructor error (an unknown keyword, a bad value) or a space the trainable cannot train is
refused here in one line, without Ray; a trial would find it only after Ray, the results folder
and the MLflow run exist. A searched `env_config.NAME` (a space key whose value the trial finds
in its env_config) is built at every choice and at both ends of its range, as the
hyperparameters are checked. Each distinct (env, env_config) is built once per process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tune_runner.algos.records import learner_record, ours
from tune_runner.algos.spaces import MASKED, inner_space, is_masked
from tune_runner.errors import UserError
from tune_runner.trainables.trial import PREFIX, Spaces, env_config_of, env_spaces

if TYPE_CHECKING:
    import gymnasium as gym

    from tune_runner.spec.experiment import ExperimentSpec
    from tune_runner.spec.search_space import Param
    from tune_runner.trainables.backends import Backend, Trains

WORDS = {"Box": "continuous", "Discrete": "discrete"}  # how a hint names the kind of actions
# gymnasium's env families that need a package it does not install: the module of their entry points -> (what
# is missing, our extra that installs it). Box2D: the `box2d` wheel, where gymnasium's own message asks for
# swig and a source build of box2d-py.
ENV_EXTRAS = {"gymnasium.envs.box2d": ("Box2D", "box2d"), "gymnasium.envs.mujoco": ("MuJoCo", "mujoco")}




def check_env(spec: ExperimentSpec, trainable: Backend) -> None:
    """Build the spec's env at every env_config a trial can get and check its spaces; UserError otherwise."""
    needs = trainable.trains
    if needs is None:
        return  # the trainable builds no env (the oracle)
    for corner, env_config in env_configs(spec):
        try:
            spaces = env_spaces(spec.env, env_config)
        except Exception as exc:  # noqa: BLE001 - the user's env code: any failure is a bad env or env_config
            raise UserError(_build_problem(spec, corner or _culprit(spec), env_config, exc)) from None
        problem = None if spaces is None else (space_problem(spec.trainable, spec.env, needs, spaces)
                                               or idle_settings(spec, spaces))
        if problem:
            raise UserError(f"{spec.source}: {problem}" if corner is None else f"{spec.source}: {corner}: {problem}")
        problem = torch_backend_problem(spec, trainable, env_config)
        if problem:
            raise UserError(f"{spec.source}: {problem}" if corner is None else f"{spec.source}: {corner}: {problem}")


def torch_backend_problem(spec: ExperimentSpec, trainable: Backend, env_config: dict[str, Any]) -> str | None:
    """Our learners' env_backend torch, fixed or a choice of the space, for an env with no torch version (or one
    that does not take this env_config): the key, the value, why and the fix. The learner would refuse it only in
    each trial's first seconds, after Ray, the results folder and the MLflow run exist. A user's agent with a
    config of its own may mean something else by the name: not ours to judge."""
    from tune_runner.algos.config import LearnerConfig
    from tune_runner.algos.learner_envs import env_backend_refusal
    from tune_runner.plugins import AGENTS
    from tune_runner.trainables.backends import OwnBackend

    searched = next((p for p in spec.space if p.name == "env_backend"), None)
    if not ("torch" in searched.extremes() if searched else spec.fixed.get("env_backend") == "torch"):
        return None
    if not isinstance(trainable, OwnBackend):
        return None
    name, record = trainable.name, learner_record(trainable.name)
    # an agent's config class as it declares it: its other checks are not this one's
    settings = record.config_class() if record else getattr(AGENTS.get(name), "config_class", None)
    if not (isinstance(settings, type) and issubclass(settings, LearnerConfig)):
        return None
    refusal = env_backend_refusal(spec.env, env_config)
    if refusal is None:
        return None
    why, fix = refusal
    if searched:
        return f"{Corner('env_backend', 'torch', 'a choice')}: {why}; drop that choice"
    return f"fixed.env_backend: torch: {why}; {fix}"


def idle_settings(spec: ExperimentSpec, spaces: Spaces) -> str | None:
    """Our learner's Box-action settings (its record's `box_only`: ppo's log_std_init, ...) searched, or fixed away
    from their defaults, for an env whose actions are not a Box: they would change nothing (ppo_pendulum moved to
    CartPole searched log_std_init, a dimension with no effect on any trial). One line naming them and the action
    space."""
    from gymnasium import spaces as gym_spaces

    record = learner_record(spec.trainable)
    if record is None or not record.box_only or isinstance(spaces.action, gym_spaces.Box):
        return None
    defaults = record.config_class()
    searched = [key for key in record.box_only if key in spec.searched]
    fixed = [key for key in record.box_only if key in spec.fixed and spec.fixed[key] != getattr(defaults, key)]
    if not searched and not fixed:
        return None
    from pathlib import Path

    from tune_runner.spec.experiment import shipped_spaces

    named = ", ".join([f"space.{key}" for key in searched] + [f"fixed.{key}: {spec.fixed[key]!r}" for key in fixed])
    copy = f" (tune-rl spaces show {spec.name} > my_space.yaml gives a copy to edit)" \
        if Path(spec.source) in set(shipped_spaces().values()) else ""
    return (f"{named}: act on Box actions only, and {spec.env}'s actions are {spaces.action}, so they would change "
            f"nothing; drop them from the space{copy}, or choose an env with Box actions")


@dataclass(frozen=True)
class Corner:
    """A searched env_config key at one of the values the check builds."""

    key: str
    value: Any
    which: str  # a choice, the low end, the high end

    def __str__(self) -> str:
        return f"space.{self.key} = {self.value!r} ({self.which})"


def corners(param: Param) -> list[Corner]:
    """Every choice, or both ends of the range."""
    if param.dist in ("choice", "grid"):
        return [Corner(param.name, value, "a choice") for value in param.extremes()]
    low, high = param.extremes()
    return [Corner(param.name, low, "the low end"), Corner(param.name, high, "the high end")]


def env_configs(spec: ExperimentSpec) -> Iterator[tuple[Corner | None, dict[str, Any]]]:
    """(None, the config with each searched env_config key at its first corner), then (corner, that
    config with one key at that corner): each choice and range end, as the hyperparameters are checked."""
    searched = [p for p in spec.space if p.name.startswith(PREFIX)]
    base = {**spec.fixed, "env_config": spec.env_config, **{p.name: p.extremes()[0] for p in searched}}
    yield None, env_config_of(base)
    for param in searched:
        for corner in corners(param):
            yield corner, env_config_of({**base, param.name: corner.value})


def _culprit(spec: ExperimentSpec) -> Corner | None:
    """When the first config fails: the searched key at its first corner, if the env builds with another of
    its values; None when none does (the fixed env_config is at fault)."""
    firsts = {p.name: corners(p)[0] for p in spec.space if p.name.startswith(PREFIX)}
    for corner, env_config in env_configs(spec):
        if corner is None or corner == firsts[corner.key]:
            continue
        try:
            env_spaces(spec.env, env_config)
        except Exception:  # noqa: BLE001, S112 - another failing value: look further
            continue
        return firsts[corner.key]
    return None


def _build_problem(spec: ExperimentSpec, corner: Corner | None, env_config: dict, exc: Exception) -> str:
    """One line: the file, what was built, the env's own message and, for a searched value, the fix."""
    text = (str(exc).strip().splitlines() or [""])[0]
    message = text if isinstance(exc, (TypeError, ValueError)) and text else f"{type(exc).__name__}: {text}"
    if corner is not None:
        fix = "drop that choice" if corner.which == "a choice" else "narrow the range"
        return f"{spec.source}: {corner}: {message}; {fix}"
    extra = missing_extra(spec.env, exc)
    if extra:
        return f"{spec.source}: env: {spec.env} {extra}"
    if not env_config:
        return f"{spec.source}: env: {spec.env} cannot be built: {message}"
    return f"{spec.source}: env_config: {message}"


def missing_extra(env_id: str, exc: Exception) -> str | None:
    """'needs X, which is not installed: pip install ...' when `exc` says a package of one of ENV_EXTRAS'
    families is missing; else None."""
    import gymnasium as gym

    if not isinstance(exc, gym.error.DependencyNotInstalled | ImportError):
        return None
    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error:
        return None
    module = entry_point if isinstance(entry_point, str) else getattr(entry_point, "__module__", "")
    for family, (what, extra) in ENV_EXTRAS.items():
        if module.startswith(family + ".") or module.startswith(family + ":"):
            return f"needs {what}, which is not installed: pip install 'tune-rl[{extra}]'"
    return None


def kind_accepts(kinds: tuple[str, ...], space: gym.Space) -> bool:
    """Whether a space is of one of the declared kinds (gymnasium space class names, or MASKED)."""
    import gymnasium as gym

    masked = is_masked(space)
    return any(masked if kind == MASKED else isinstance(space, getattr(gym.spaces, kind, ())) for kind in kinds)


def space_problem(trainable: str, env: str, needs: Trains, spaces: Spaces) -> str | None:
    """Why `trainable` cannot train on these spaces, with trainables that can; None when it can."""
    if needs.actions is not None and not kind_accepts(needs.actions, spaces.action):
        return (f"{trainable} needs {_kinds(needs.actions, 'action')}; {env} has {spaces.action}; "
                f"{_hint(trainable, spaces)}")
    if needs.observations is not None and not kind_accepts(needs.observations, spaces.observation):
        return (f"{trainable} needs {_kinds(needs.observations, 'observation')}; {env} has {spaces.observation}; "
                f"register a wrapped env that gives Box observations (e.g. gymnasium.wrappers.FlattenObservation)")
    if needs.masks is not None and kind_accepts((MASKED,), spaces.observation) \
            and not kind_accepts(needs.masks, spaces.action):
        return (f"{trainable} masks {_kinds(needs.masks, 'action')} only; {env} masks {spaces.action}; "
                f"drop the env's action_mask or give it a Discrete action space")
    box = observation_box(spaces.observation)
    if needs.float_observations and box is not None and not np.issubdtype(box.dtype, np.floating):
        fits = [name for name in ours() if kind_accepts(learner_record(name).action_spaces, spaces.action)]
        return (f"{trainable} feeds observations to RLlib's models as they come, and those take floats; {env} has "
                f"{box.dtype} observations of shape {box.shape}; use {' or '.join(fits)} (ours read them as floats), "
                f"or register a wrapped env that gives float32 ones (gymnasium.wrappers.DtypeObservation)")
    if needs.from_zero and kind_accepts(("Discrete", "MultiDiscrete"), spaces.action) \
            and any(int(n) for n in np.ravel(spaces.action.start)):
        return (f"{trainable} needs discrete actions that start at 0; {env} has {spaces.action}; "
                f"register a wrapped env whose actions start at 0 (subtract the start in its step)")
    return None


def observation_box(space: gym.Space) -> gym.spaces.Box | None:
    """The Box a model reads: the observation space itself, or a masked Dict's `observations`; else None."""
    import gymnasium as gym

    space = inner_space(space)
    return space if isinstance(space, gym.spaces.Box) else None


def _kinds(kinds: tuple[str, ...], what: str) -> str:
    """`a Discrete action space`, `a Box observation space (or a Dict of observations and action_mask)`."""
    names = [k for k in kinds if k != MASKED]
    text = f"a {' or '.join(names)} {what} space" if names else f"a {what} space"
    return text + (" (or a Dict of observations and action_mask)" if MASKED in kinds else "")


def _hint(trainable: str, spaces: Spaces) -> str:
    """The trainables that declare this env's action kind (and accept its observations), best known first."""
    from tune_runner.trainables.catalog import hints

    fits = []
    for other in hints():
        needs = other.trains
        if other.name == trainable or needs is None or needs.actions is None:
            continue
        if kind_accepts(needs.actions, spaces.action) and (
                needs.observations is None or kind_accepts(needs.observations, spaces.observation)):
            fits.append(other.name)
    kind = type(spaces.action).__name__
    actions = f"{WORDS.get(kind, kind)} actions"
    if not fits:
        return f"no trainable here declares {actions}"
    return f"use a trainable for {actions} such as {' or '.join(fits[:2])}"
