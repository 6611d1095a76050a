"""A space file's top level: its keys (`TOP_KEYS`), and a reader for each kind of value there, each error naming the
file, the key and the value (`budget_steps`, `number_setting`, `seeds_settings`, ...)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError, closest, unknown_name
from tune_runner.spec import reserved, seed_keys
from tune_runner.spec.search_space import _short

TOP_KEYS = ("description", "trainable", "env", "env_config", "metric", "mode", "budget",
            "stop_at", "searcher", "scheduler", "num_samples", "max_concurrent", reserved.SEEDS_KEY,
            reserved.AGGREGATE_KEY, reserved.MEMBERS_KEY, reserved.REFILL_KEY,
            "reevaluate", "fixed", "space", "backends", "plugins", "tier", "smoke", "reference")
REQUIRED = ("trainable", "env", "budget")
BUDGET_KEYS = ("env_steps",)


def check_top_keys(raw: dict, *, where: str) -> None:
    """Every top-level key known (an unknown one gets the closest), every required one there."""
    for key in raw:
        if key not in TOP_KEYS:
            near = closest(key, TOP_KEYS)
            hint = f"did you mean {near!r}?" if near else f"valid keys: {', '.join(TOP_KEYS)}"
            raise UserError(f"{where}: {key}: unknown key; {hint}")
    for key in REQUIRED:
        if key not in raw:
            raise UserError(f"{where}: {key}: missing; every space file names its "
                            f"{', '.join(REQUIRED)} (see tune-rl spaces show ppo_small)")


def plugin_paths(value: Any, where: str) -> tuple[str, ...] | None:
    """`plugins:` as absolute paths; relative ones are relative to the space file's folder. None for `plugins:
    false`: no plug-in imported, not even the working folder's envs/."""
    if value is False:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v.strip() for v in items):
        raise UserError(f"{where}: plugins: expected a list of .py files or folders, or false (import none, not "
                        f"even ./envs/), got {_short(value)}")
    base = Path(where).parent if Path(where).is_file() else Path.cwd()
    return tuple(str((base / Path(v).expanduser()).resolve()) for v in items)


def reevaluate_setting(value: Any, where: str) -> bool | dict:
    """`reevaluate: false`, `true` (the default: 2 configs x 3 seeds, capped), or `{top: K, seeds: N}`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, dict) and set(value) <= {"top", "seeds"} and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value.values()):
        return dict(value)
    raise UserError(f"{where}: reevaluate: expected false, true or {{top: 2, seeds: 3}} (positive integers), "
                    f"got {_short(value)}")


def typed(raw: dict, key: str, kind: type, where: str, *, default: Any = ...) -> Any:
    value = raw.get(key, default)
    if value is ...:
        raise UserError(f"{where}: {key}: missing")
    if value is None and default is not ...:
        return copy.deepcopy(default)
    if not isinstance(value, kind):
        raise UserError(f"{where}: {key}: expected {_kind(kind)}, got {_short(value)}")
    return value


def choice(raw: dict, key: str, choices: tuple[str, ...], where: str) -> str:
    """One of `choices` (the first by default); an unknown one gets the closest."""
    value = typed(raw, key, str, where, default=choices[0])
    if value not in choices:
        raise UserError(f"{where}: {key}: {unknown_name(key, value, choices)}")
    return value


def _kind(kind: type) -> str:
    return {str: "a string", dict: "a mapping", int: "an integer", list: "a list"}.get(kind, kind.__name__)


def positive_int(raw: dict, key: str, where: str, *, default: int | None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: {key}: expected a positive integer, got {_short(value)}")
    return value


def flag_setting(raw: dict, key: str, where: str, *, default: bool) -> bool:
    """An optional true/false setting."""
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise UserError(f"{where}: {key}: expected true or false, got {_short(value)}")
    return value


def seeds_settings(raw: dict, where: str) -> dict[str, Any]:
    """seeds_per_trial and seed_aggregate, those of them `raw` has, checked as a space's top level checks them."""
    checked: dict[str, Any] = {}
    count, aggregate = reserved.SEEDS_KEY, reserved.AGGREGATE_KEY
    if count in raw:
        checked[count] = positive_int(raw, count, where, default=1)
    if aggregate in raw:
        checked[aggregate] = choice(raw, aggregate, seed_keys.AGGREGATES, where)
    return checked


def number_setting(raw: dict, key: str, where: str) -> float | None:
    """An optional number setting (None when absent), with a fix for YAML's `1e5`-as-text."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fix = f"; write {value.replace('e', '.0e', 1)}" if isinstance(value, str) and "e" in value else ""
        raise UserError(f"{where}: {key}: expected a number, got {_short(value)}{fix}")
    return float(value)


def budget_steps(value: Any, where: str) -> int:
    """The `budget:` mapping's env steps, checked."""
    if not isinstance(value, dict):
        raise UserError(f"{where}: budget: expected a mapping like {{env_steps: 100000}}, got {_short(value)}")
    for key in value:
        if key not in BUDGET_KEYS:
            raise UserError(f"{where}: budget.{key}: {unknown_name('budget key', key, BUDGET_KEYS)}")
    steps = value.get("env_steps")
    if isinstance(steps, float) and steps.is_integer():
        steps = int(steps)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        fix = "; write 100000 or 1.0e+5" if isinstance(steps, str) else ""
        raise UserError(f"{where}: budget.env_steps: expected a positive whole number of env steps, "
                        f"got {_short(steps)}{fix}")
    return steps
