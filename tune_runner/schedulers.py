"""Trial schedulers by name, from presets in `schedulers/*.yaml`, counting in env steps.

A preset file names a scheduler type and its settings:

    description: ASHA, stopping the worse half at each rung
    type: asha
    settings: {grace_period: 20%, reduction_factor: 2}

Time settings (`grace_period`, `max_t`, ...) are env steps; "20%" means a share of the
budget. Every setting is checked against the scheduler's constructor before launch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_runner import paths
from tune_runner.errors import UserError, closest, unknown_name
from tune_runner.registry import Registry
from tune_runner.spec import Component, read_yaml

TIME_SETTINGS = ("grace_period", "max_t", "perturbation_interval", "min_time_slice")
# Set by us, never by a user: schedulers count env steps; metric and mode come from the spec.
MANAGED = ("time_attr", "metric", "mode")


@dataclass(frozen=True)
class SchedulerType:
    """How to build one kind of scheduler: its class path and our defaults for it."""

    cls: str
    defaults: Callable[[int], dict]

    def load(self) -> type:
        module, _, attr = self.cls.partition(":")
        return getattr(__import__(module, fromlist=[attr]), attr)


SCHEDULERS: Registry[SchedulerType] = Registry("scheduler type")
SCHEDULERS.register("fifo", SchedulerType("ray.tune.schedulers:FIFOScheduler", lambda budget: {}))
SCHEDULERS.register("asha", SchedulerType(
    "ray.tune.schedulers:ASHAScheduler",
    lambda budget: {"time_attr": "env_steps", "max_t": budget}))


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
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping with description, type and settings")
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
        if not path.is_file():
            raise UserError(f"{where}: scheduler: no preset file {name}")
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


def build_scheduler(component: Component, *, budget: int, where: str) -> Any:
    """The Tune scheduler for a spec's scheduler component, checked before launch."""
    kind, settings = resolve(component, where=where)
    scheduler = SCHEDULERS.get(kind)
    cls = scheduler.load()
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]
    kwargs = scheduler.defaults(budget)
    for key, value in settings.items():
        if key in MANAGED:
            raise UserError(f"{where}: scheduler.{key}: set by tune-rl (time in env steps; metric and "
                            f"mode from the space file); remove it")
        if key not in accepted:
            near = closest(key, [a for a in accepted if a not in MANAGED])
            hint = f"did you mean {near!r}?" if near else f"{kind} takes no such setting"
            raise UserError(f"{where}: scheduler.{key}: unknown setting of {kind}; {hint}")
        kwargs[key] = budget_share(value, budget=budget, where=f"{where}: scheduler.{key}") \
            if key in TIME_SETTINGS else value
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, AssertionError) as exc:
        raise UserError(f"{where}: scheduler: {kind} rejects its settings {settings}: {exc}") from None


def budget_share(value: Any, *, budget: int, where: str) -> int:
    """An env-step count, or "N%" of the budget."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            share = float(value[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise UserError(f"{where}: expected a share of the budget between 0% and 100%, got {value!r}")
        return max(1, int(budget * share))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserError(f"{where}: expected env steps (a positive number) or a share like '20%', got {value!r}")
    return int(value)
