"""The space grammar: one YAML mapping per parameter, with exactly one distribution key.

    lr:         {loguniform: [1.0e-5, 1.0e-2]}
    num_epochs: {randint: [3, 10]}        # inclusive at both ends
    gamma:      {choice: [0.98, 0.99]}
    seed:       {grid: [0, 1, 2]}

A parameter may be searched only under a condition on a choice (or grid) parameter; while the
condition does not hold it is not sampled, not passed to the trainable and not logged:

    use_target_network:         {choice: [true, false]}
    target_network_update_freq: {randint: [1, 100], when: {use_target_network: true}}
    tau:                        {uniform: [0.001, 0.1], when: {target_kind: [soft, polyak]}}   # any of these

Several keys under `when` must all hold. A condition on a value `fixed:` sets (or `--set` pins)
is decided at once: the parameter is searched unconditionally, or dropped.

Parsing checks everything a user can get wrong and answers with a `UserError` that
names the file, the key, the value and the fix. `Param.to_tune()` gives Ray Tune's domain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tune_runner.errors import UserError, closest, unknown_name

NUMERIC_DISTS = ("uniform", "loguniform", "quniform", "randint")
LIST_DISTS = ("choice", "grid")
DISTRIBUTIONS = NUMERIC_DISTS + LIST_DISTS


@dataclass(frozen=True)
class Param:
    """One searched hyperparameter: `dist` is a key of DISTRIBUTIONS, `args` its arguments."""

    name: str
    dist: str
    args: tuple
    when: tuple[tuple[str, tuple], ...] = ()
    """Conditions, all of which must hold: (parent parameter, the parent's values that activate this one)."""

    def active(self, config: Mapping[str, Any]) -> bool:
        """Whether this parameter is searched in a config that holds its parents' values (a parent that is
        absent, itself inactive, does not hold)."""
        return all(parent in config and _freeze(config[parent]) in values for parent, values in self.when)

    def to_tune(self) -> Any:
        """Ray Tune's search domain for this parameter."""
        from ray import tune

        low, high, *rest = self.args if self.dist in NUMERIC_DISTS else (None, None)
        if self.dist == "uniform":
            return tune.uniform(low, high)
        if self.dist == "loguniform":
            return tune.loguniform(low, high)
        if self.dist == "quniform":
            return tune.quniform(low, high, rest[0])
        if self.dist == "randint":
            return tune.randint(*randint_bounds(low, high))
        values = [_thaw(a) for a in self.args]
        if self.dist == "choice":
            return tune.choice(values)
        return tune.grid_search(values)

    def snapped(self, value: float) -> float:
        """A quniform value on its step (Ray's conversions for ConfigSpace and Nevergrad drop the step)."""
        step = self.args[2]
        return float(round(round(value / step) * step, 12))

    def example(self) -> Any:
        """One concrete value from the domain (for checks before launch)."""
        if self.dist == "grid":
            return _thaw(self.args[0])
        return self.to_tune().sample(random_state=0)

    def extremes(self) -> list[Any]:
        """The values worth checking before launch: every choice, or both ends of a range."""
        if self.dist in LIST_DISTS:
            return [_thaw(a) for a in self.args]
        return [self.args[0], self.args[1]]

    def describe(self) -> str:
        """A compact one-line rendering, e.g. `loguniform(1e-05, 0.01)` or `randint(1, 100) when a=True`."""
        text = f"{self.dist}({', '.join(_short(a) for a in self.args)})"
        if self.when:
            text += " when " + " and ".join(
                f"{parent}={_short(_thaw(values[0]))}" if len(values) == 1
                else f"{parent} in {_short([_thaw(v) for v in values])}" for parent, values in self.when)
        return text

    def as_raw(self) -> dict[str, Any]:
        """The parameter as a space file writes it (parse_param reads it back to an equal Param)."""
        raw: dict[str, Any] = {self.dist: [_thaw(a) for a in self.args]}
        if self.when:
            raw["when"] = {parent: _thaw(values[0]) if len(values) == 1 else [_thaw(v) for v in values]
                           for parent, values in self.when}
        return raw


def randint_bounds(low: int, high: int) -> tuple[int, int]:
    """Our `randint` is inclusive at both ends; Tune's upper bound is exclusive."""
    return low, high + 1


def parse_space(raw: Any, *, where: str, fixed: Mapping[str, Any] | None = None) -> tuple[Param, ...]:
    """Parse the `space:` mapping of a space file; `where` prefixes every error. Conditions are checked
    against the other parameters, and those on a `fixed` value decided (see the module's docstring)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise UserError(f"{where}: space: expected a mapping of parameter: {{distribution: args}}, "
                        f"got {_short(raw)}")
    params = tuple(parse_param(name, spec, where=f"{where}: space.{name}") for name, spec in raw.items())
    return resolve_conditions(params, fixed or {}, where=where)


def parse_param(name: str, spec: Any, *, where: str) -> Param:
    """Parse one `name: {dist: args}` entry, with its `when:` conditions (not yet checked against the space)."""
    example = "{loguniform: [1.0e-5, 1.0e-2]}"
    conditional = isinstance(spec, dict) and "when" in spec
    conditions = _parse_when(spec["when"], where=where) if conditional else ()
    spec = {k: v for k, v in spec.items() if k != "when"} if conditional else spec
    if not isinstance(spec, dict) or len(spec) != 1:
        others = [k for k in spec if k not in DISTRIBUTIONS] if isinstance(spec, dict) else []
        near = closest(str(others[0]), ["when"]) if len(others) == 1 else None
        hint = f"; {others[0]!r}: did you mean 'when'?" if near else ""
        raise UserError(f"{where}: expected exactly one distribution key like {example}, got {_short(spec)}{hint}")
    (dist, args), = spec.items()
    if dist not in DISTRIBUTIONS:
        raise UserError(f"{where}: {unknown_name('distribution', dist, DISTRIBUTIONS)}")
    if not isinstance(args, list) or not args:
        raise UserError(f"{where}: {dist} takes a non-empty list, got {_short(args)}; "
                        f"write e.g. {dist}: {_example(dist)}")
    if dist in LIST_DISTS:
        return Param(name, dist, tuple(_freeze(a) for a in args), conditions)
    return Param(name, dist, _numeric_args(dist, args, where=where), conditions)


def _parse_when(when: Any, *, where: str) -> tuple[tuple[str, tuple], ...]:
    """`when: {parent: value}` or `{parent: [value, ...]}` (any of them) as Param.when, values still unchecked."""
    if not isinstance(when, dict) or not when or not all(isinstance(k, str) for k in when):
        raise UserError(f"{where}.when: expected a mapping of parameter: value like {{use_target_network: true}}, "
                        f"got {_short(when)}")
    return tuple((parent, (_freeze(value),) if not isinstance(value, list) else tuple(_freeze(v) for v in value))
                 for parent, value in when.items())


def resolve_conditions(params: tuple[Param, ...], fixed: Mapping[str, Any], *, where: str) -> tuple[Param, ...]:
    """The space with every condition checked, parents before their children, and those on a fixed value
    decided: one whose value holds is left out of `when`; a parameter one fails on is left out of the space.

    Each condition names another searched parameter with listed values (choice or grid), or a fixed key,
    and only values that parent can take; conditions form no cycle."""
    by_name = {p.name: p for p in params}
    kept: dict[str, Param] = {}
    for param in params:
        at = f"{where}: space.{param.name}.when"
        conditions = []
        for parent, values in param.when:
            if parent in by_name:
                conditions.append((parent, _parent_values(by_name[parent], values, at=f"{at}.{parent}")))
            elif parent in fixed:
                value = _freeze(fixed[parent])
                if value not in values and value != tuple(values):  # a list value may be written as the list
                    conditions = None
                    break
            else:
                near = closest(parent, [*by_name, *fixed])
                hint = f"did you mean {near!r}?" if near else "a condition names another key of space: or fixed:"
                raise UserError(f"{at}: {parent!r} is neither searched nor fixed; {hint}")
        if conditions is not None:
            kept[param.name] = Param(param.name, param.dist, param.args, tuple(conditions))
    # a parameter whose parent was left out (its condition on a fixed value failed) goes too
    while True:
        orphans = [n for n, p in kept.items() if any(parent not in kept for parent, _ in p.when)]
        if not orphans:
            break
        for name in orphans:
            del kept[name]
    return tuple(kept[name] for name in _parents_first(kept, where=where))


def _parent_values(parent: Param, values: tuple, *, at: str) -> tuple:
    """The condition's values, checked against a searched parent's listed values. A list that is itself
    one of the parent's values (e.g. layer sizes) is that value, not a list of them."""
    if parent.dist not in LIST_DISTS:
        raise UserError(f"{at}: {parent.name} is {parent.describe()}; a condition's parent must list its values, "
                        f"e.g. {parent.name}: {{choice: [...]}}")
    choices = list(parent.args)
    if len(values) > 1 and tuple(values) in choices:
        values = (tuple(values),)
    for value in values:
        if value not in choices:
            raise UserError(f"{at}: {_short(_thaw(value))} is not one of {parent.name}'s values "
                            f"{_short([_thaw(c) for c in choices])}")
    return tuple(values)


def _parents_first(params: Mapping[str, Param], *, where: str) -> list[str]:
    """The names in file order, moved after their parents; a cycle is refused, named."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycle = path[path.index(name):] + [name]
            raise UserError(f"{where}: space.{cycle[0]}.when: the conditions form a cycle "
                            f"({' -> '.join(cycle)}); a parameter cannot depend on itself")
        state[name] = "open"
        for parent, _ in params[name].when:
            visit(parent, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in params:
        visit(name, [])
    return order


def inactive(config: Mapping[str, Any], params: tuple[Param, ...]) -> list[str]:
    """The searched parameters whose conditions fail in `config` (params parents first, as parse_space gives
    them): a child of an inactive parent is inactive too."""
    seen = dict(config)
    dropped = []
    for param in params:
        if param.when and not param.active(seen):
            dropped.append(param.name)
            seen.pop(param.name, None)
    return dropped


def prune(config: Mapping[str, Any], params: tuple[Param, ...]) -> dict[str, Any]:
    """`config` without the searched parameters that are inactive in it."""
    dropped = set(inactive(config, params))
    return {k: v for k, v in config.items() if k not in dropped}


def _numeric_args(dist: str, args: list, *, where: str) -> tuple:
    want = 3 if dist == "quniform" else 2
    if len(args) != want:
        raise UserError(f"{where}: {dist} takes {want} numbers, got {len(args)} ({_short(args)}); "
                        f"write {dist}: {_example(dist)}")
    for value in args:
        if isinstance(value, str):
            fix = _numeric_fix(value)
            raise UserError(f"{where}: {dist} bounds must be numbers, got {value!r} (a string); {fix}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UserError(f"{where}: {dist} bounds must be finite numbers, got {_short(value)}")
    if dist == "randint" and not all(isinstance(v, int) for v in args):
        raise UserError(f"{where}: randint bounds must be integers, got {_short(args)}; "
                        f"use uniform for real numbers")
    low, high = args[0], args[1]
    if low >= high:
        raise UserError(f"{where}: {dist} needs low < high, got low={_short(low)} high={_short(high)}; "
                        f"swap them or widen the range")
    if dist == "loguniform" and low <= 0:
        raise UserError(f"{where}: loguniform bounds must be > 0, got low={_short(low)}; "
                        f"use a small positive bound like 1.0e-8, or uniform")
    if dist == "quniform" and args[2] <= 0:
        raise UserError(f"{where}: quniform step must be > 0, got q={_short(args[2])}")
    return tuple(args)


def _numeric_fix(text: str) -> str:
    """PyYAML reads `1e-5` as a string (YAML 1.1 wants a dot): suggest `1.0e-5`."""
    try:
        number = float(text)
    except ValueError:
        return "write a number"
    mantissa, _, exponent = text.lower().partition("e")
    if exponent and "." not in mantissa:
        return f"write {mantissa}.0e{exponent} (YAML reads {text} as text)"
    return f"write {number!r} without quotes"


def _example(dist: str) -> str:
    return {"uniform": "[0.9, 0.99]", "loguniform": "[1.0e-5, 1.0e-2]", "quniform": "[0, 1, 0.1]",
            "randint": "[3, 10]", "choice": "[64, 128]", "grid": "[0, 1, 2]"}[dist]


def _freeze(value: Any) -> Any:
    """Choices may be lists (e.g. layer sizes); keep them hashable inside a frozen Param."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _short(value: Any, limit: int = 60) -> str:
    """repr() cut to `limit` characters, for one-line messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
