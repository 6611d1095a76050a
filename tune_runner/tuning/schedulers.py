"""Trial schedulers by name, from presets in `schedulers/*.yaml`, counting in env steps.

A preset file names a scheduler type and its settings:

    description: ASHA, stopping the worse half at each rung
    type: asha
    settings: {grace_period: 20%, reduction_factor: 2}

Every scheduler counts time in env steps (`time_attr: env_steps`, so trials with different
batch sizes compare fairly); time settings (`grace_period`, `max_t`, `perturbation_interval`,
...) are env steps, and "20%" means a share of the budget. Every setting is checked against
the scheduler's constructor before launch. PBT's mutations and PB2's bounds come from the
space file (see `population_settings`).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_runner import paths
from tune_runner.errors import UserError, closest, unknown_name
from tune_runner.files import read_yaml_mapping
from tune_runner.registry import Registry
from tune_runner.spec.experiment import Component
from tune_runner.spec.search_space import NUMERIC_DISTS, Param, parse_param

TIME_SETTINGS = ("grace_period", "max_t", "min_t", "perturbation_interval", "burn_in_period", "min_time_slice")
UNITS = "tune_rl_time_units"  # the result key HyperBand-style schedulers count in (see in_units)
# Set by us, never by a user: metric and mode come from the space file.
MANAGED = ("metric", "mode")
# Built by us from the space file; a preset may override them per parameter.
DERIVED = ("hyperparam_mutations", "hyperparam_bounds", "custom_explore_fn")


@dataclass(frozen=True)
class SchedulerType:
    """How to build one kind of scheduler: its class path and our defaults for a budget.

    `population`: PBT-style (exploits checkpoints, mutates the space, takes no searcher);
    `pauses`: HyperBand-style, pausing trials and resuming them later (from a checkpoint),
    counting time in units of `min_t` env steps; `searcher`: the one searcher it must run
    with (BOHB's pair).
    """

    cls: str
    defaults: Callable[[int], dict]
    population: bool = False
    pauses: bool = False
    searcher: str | None = None

    @property
    def needs_checkpoints(self) -> bool:
        return self.population or self.pauses

    def load(self) -> type:
        module, _, attr = self.cls.partition(":")
        return getattr(__import__(module, fromlist=[attr]), attr)


def _budget_tenth(budget: int) -> dict:
    return {"perturbation_interval": max(1, budget // 10)}


SCHEDULERS: Registry[SchedulerType] = Registry("scheduler type")
SCHEDULERS.register("fifo", SchedulerType("ray.tune.schedulers:FIFOScheduler", lambda budget: {}))
SCHEDULERS.register("asha", SchedulerType("ray.tune.schedulers:ASHAScheduler", lambda budget: {"max_t": budget}))
SCHEDULERS.register("hyperband", SchedulerType("ray.tune.schedulers:HyperBandScheduler",
                                               lambda budget: {"max_t": budget, "min_t": max(1, budget // 9)},
                                               pauses=True))
SCHEDULERS.register("median", SchedulerType("ray.tune.schedulers:MedianStoppingRule",
                                            lambda budget: {"grace_period": max(1, budget // 5)}))
SCHEDULERS.register("pbt", SchedulerType("ray.tune.schedulers:PopulationBasedTraining", _budget_tenth,
                                         population=True))
SCHEDULERS.register("pb2", SchedulerType("ray.tune.schedulers.pb2:PB2", _budget_tenth, population=True))
SCHEDULERS.register("bohb", SchedulerType("ray.tune.schedulers:HyperBandForBOHB",
                                          lambda budget: {"max_t": budget, "min_t": max(1, budget // 9)},
                                          pauses=True, searcher="bohb"))


@dataclass(frozen=True)
class Preset:
    """A scheduler preset file."""

    name: str
    path: Path | None
    description: str
    type: str
    settings: dict


def presets() -> dict[str, Preset]:
    """Shipped presets by name."""
    return {p.stem: load_preset(p) for p in sorted(paths.shipped("schedulers").glob("*.yaml"))}


def load_preset(path: Path) -> Preset:
    """Read and check one preset file."""
    raw = read_yaml_mapping(path, expected="a scheduler preset (a mapping with description, type and settings)")
    for key in raw:
        if key not in ("description", "type", "settings"):
            raise UserError(f"{path}: {key}: unknown key; a preset has description, type and settings")
    kind = raw.get("type", path.stem)
    if kind not in SCHEDULERS:
        raise UserError(f"{path}: type: {unknown_name('scheduler type', kind, SCHEDULERS)}")
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict):
        raise UserError(f"{path}: settings: expected a mapping, got {settings!r}")
    return Preset(path.stem, path, str(raw.get("description", "")), kind, settings)


def resolve(component: Component, *, where: str) -> tuple[str, dict]:
    """(scheduler type, merged settings): a preset's settings overlaid with inline ones."""
    name = component.name
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():  # a folder or an unreadable file: load_preset says why
            raise UserError(f"{where}: scheduler: no preset file {name}; expected a scheduler preset YAML file "
                            f"or a scheduler name (tune-rl schedulers list)")
        preset = load_preset(path)
    else:
        shipped = presets()
        if name in shipped:
            preset = shipped[name]
        elif name in SCHEDULERS:
            preset = Preset(name, None, "", name, {})
        else:
            raise UserError(f"{where}: scheduler: {unknown_name('scheduler', name, set(shipped) | set(SCHEDULERS))}")
    return preset.type, {**preset.settings, **component.settings}


def scheduler_type(component: Component, *, where: str) -> tuple[str, SchedulerType, dict]:
    """(type name, its SchedulerType, merged settings) of a spec's scheduler component."""
    kind, settings = resolve(component, where=where)
    return kind, SCHEDULERS.get(kind), settings


def build_scheduler(component: Component, *, budget: int, where: str, space: tuple[Param, ...] = (),
                    time_attrs: tuple[str, ...] = ("env_steps",), seed: int | None = None) -> Any:
    """The Tune scheduler for a spec's scheduler component, checked before launch.

    `time_attrs` are the result keys the trainable reports that time may count in; `space`
    is what PBT mutates and PB2 bounds.
    """
    kind, scheduler, settings = scheduler_type(component, where=where)
    cls = scheduler.load()
    time_attr = settings.get("time_attr", "env_steps")
    if kind != "fifo" and time_attr not in time_attrs:
        raise UserError(f"{where}: scheduler.time_attr: the trainable does not report {time_attr!r}; "
                        f"use one of {', '.join(time_attrs)}")
    kwargs = _checked_settings(kind, settings, scheduler=scheduler, cls=cls, budget=budget, time_attr=time_attr,
                               where=where)
    if scheduler.population:
        if settings.get("synch"):
            raise UserError(f"{where}: scheduler.synch: {kind}'s synchronous mode makes every trial wait at each "
                            f"interval, and a trial that ends at its budget or stop_at never arrives (the search "
                            f"hangs); remove synch")
        kwargs.update(population_settings(kind, settings, space=space, where=where, seed=seed))
    if scheduler.pauses:
        unit = kwargs.pop("min_t", 1)
        kwargs["max_t"] = max(1, round(kwargs.get("max_t", 81) / unit))
        cls = in_units(cls, source=kwargs.pop("time_attr"), unit=unit)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, AssertionError, RuntimeError) as exc:
        shown = {k: v for k, v in settings.items() if k not in DERIVED}
        raise UserError(f"{where}: scheduler: {kind} rejects its settings {shown}: "
                        f"{str(exc).strip().splitlines()[0]}") from None


def _checked_settings(kind: str, settings: dict, *, scheduler: SchedulerType, cls: type, budget: int,
                      time_attr: str, where: str) -> dict:
    """The scheduler's keyword arguments: its defaults, then each setting the user gave, checked by name
    against the constructor and time settings turned into env steps (a share of the budget)."""
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]
    if scheduler.pauses:
        accepted.append("min_t")
    kwargs = {**scheduler.defaults(budget)}
    if "time_attr" in accepted:
        kwargs["time_attr"] = time_attr
    for key, value in settings.items():
        if key in MANAGED:
            raise UserError(f"{where}: scheduler.{key}: set by tune-rl (from the space file's metric and "
                            f"mode); remove it")
        if key not in accepted or key == "custom_explore_fn":
            near = closest(key, [a for a in accepted if a not in MANAGED])
            hint = f"did you mean {near!r}?" if near else f"{kind} takes no such setting"
            raise UserError(f"{where}: scheduler.{key}: unknown setting of {kind}; {hint}")
        if key == "time_attr":
            continue
        if key in TIME_SETTINGS:
            value = budget_share(value, budget=budget, where=f"{where}: scheduler.{key}",
                                 percent=time_attr == "env_steps")
        kwargs[key] = value
    if time_attr != "env_steps":  # our env-step defaults mean nothing in other units
        for key in TIME_SETTINGS:
            if key in kwargs and key not in settings:
                del kwargs[key]
    return kwargs


def in_units(cls: type, *, source: str, unit: float) -> type:
    """A HyperBand-style scheduler counting `source` (env steps) in units of `unit`.

    HyperBand's smallest resource is one time unit and it opens log_eta(max_t) brackets;
    counted in raw env steps (max_t 100,000) its first bracket would wait for thousands of
    trials and never halve a small search. In units of `min_t` env steps (a ninth of the
    budget by default: 3 brackets at reduction factor 3) its rungs fall at useful points.
    """

    class InUnits(cls):  # type: ignore[misc, valid-type]
        counts_in, unit_steps = source, unit

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(time_attr=UNITS, **kwargs)

        def _scaled(self, result: dict | None) -> dict | None:
            if result is None or source not in result:
                return result
            return {**result, UNITS: result[source] / unit}

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            return super().on_trial_result(tune_controller, trial, self._scaled(result))

        def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
            super().on_trial_complete(tune_controller, trial, self._scaled(result))

    InUnits.__name__ = InUnits.__qualname__ = f"{cls.__name__}InEnvStepUnits"
    return InUnits


def population_settings(kind: str, settings: dict, *, space: tuple[Param, ...], where: str,
                        seed: int | None) -> dict:
    """PBT's `hyperparam_mutations` or PB2's `hyperparam_bounds`, from the space and per-parameter overrides.

    PBT: a range is perturbed (x0.8 / x1.2, or resampled) and kept inside its bounds; a
    choice is resampled. PB2: every mutated parameter needs numeric bounds. An override
    maps a parameter to its own distribution (PBT) or [low, high] (PB2), or `false` to
    leave it unmutated.
    """
    searched = {p.name: p for p in space}
    key = "hyperparam_mutations" if kind == "pbt" else "hyperparam_bounds"
    overrides = _overrides(kind, settings, key=key, searched=searched, where=where)
    params: dict[str, Param] = {}
    for name, param in searched.items():
        override = overrides.get(name, param)
        if override is False or override is None:
            continue
        if override is not param:
            override = _overridden(param, override, kind=kind, where=f"{where}: scheduler.{key}.{name}")
        params[name] = override
        if kind == "pb2" and override.dist not in NUMERIC_DISTS:
            raise UserError(f"{where}: space.{name}: pb2 needs bounds, and a {override.dist} has none; give "
                            f"scheduler.hyperparam_bounds.{name}: [low, high], or use the pbt scheduler")
    if not params:
        raise UserError(f"{where}: scheduler: {kind} has nothing to mutate; search at least one "
                        f"hyperparameter in space:")
    explore = Explore(params, seed=seed)
    if kind == "pbt":
        mutations = {n: p.to_tune() for n, p in params.items() if p.dist in NUMERIC_DISTS}
        return {"hyperparam_mutations": mutations, "custom_explore_fn": explore}
    return {"hyperparam_bounds": {n: list(p.args[:2]) for n, p in params.items()}, "custom_explore_fn": explore}


def _overrides(kind: str, settings: dict, *, key: str, searched: dict[str, Param], where: str) -> dict:
    """The scheduler's per-parameter overrides (`key`), each naming a searched parameter."""
    overrides = settings.get(key) or {}
    if not isinstance(overrides, dict):
        raise UserError(f"{where}: scheduler.{key}: expected a mapping of parameter: "
                        f"{'distribution' if kind == 'pbt' else '[low, high]'}, got {overrides!r}")
    for name in overrides:
        if name not in searched:
            near = closest(name, list(searched))
            hint = f"did you mean {near!r}?" if near else "mutate only searched parameters (add it to space:)"
            raise UserError(f"{where}: scheduler.{key}.{name}: not in the space; {hint}")
    return overrides


def _overridden(param: Param, override: Any, *, kind: str, where: str) -> Param:
    """The distribution an override gives `param`: PBT's its own, PB2's [low, high] in the space's kind of range."""
    if kind == "pb2":
        if not (isinstance(override, list) and len(override) == 2):
            raise UserError(f"{where}: expected [low, high], got {override!r}")
        # the space's kind of range (whole numbers stay whole), with these bounds
        dist = param.dist if param.dist in NUMERIC_DISTS else "uniform"
        override = {dist: [*override, *param.args[2:]] if dist == "quniform" else override}
    return parse_param(param.name, override, where=where)


class Explore:
    """PBT/PB2's last explore step: ranges back inside their bounds (whole or on the grid), choices resampled."""

    def __init__(self, params: dict[str, Param], *, seed: int | None = None) -> None:
        self.params = params
        self.rng = random.Random(seed)

    def __call__(self, config: dict) -> dict:
        for name, param in self.params.items():
            if param.dist in NUMERIC_DISTS:
                config[name] = self.clip(param, config.get(name, param.args[0]))
            else:
                config[name] = self.rng.choice(param.extremes())
        return config

    @staticmethod
    def clip(param: Param, value: Any) -> Any:
        low, high = param.args[0], param.args[1]
        value = min(max(float(value), low), high)
        if param.dist == "randint":
            return int(round(value))
        if param.dist == "quniform":
            q = param.args[2]
            return min(max(round(value / q) * q, low), high)
        return value


def budget_share(value: Any, *, budget: int, where: str, percent: bool = True) -> int | float:
    """An env-step count, or "N%" of the budget (only when time counts in env steps)."""
    if isinstance(value, str) and value.endswith("%"):
        if not percent:
            raise UserError(f"{where}: a share of the env-step budget ({value}) needs time_attr env_steps; "
                            f"give a number in the time_attr's units")
        try:
            share = float(value[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise UserError(f"{where}: expected a share of the budget between 0% and 100%, got {value!r}")
        return max(1, int(budget * share))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserError(f"{where}: expected env steps (a positive number) or a share like '20%', got {value!r}")
    return int(value) if percent else value
