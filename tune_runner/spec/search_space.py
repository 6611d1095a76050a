"""The space grammar: one YAML mapping per parameter, with exactly one distribution key.

    lr:         {loguniform: [1.0e-5, 1.0e-2]}
    num_epochs: {randint: [3, 10]}        # inclusive at both ends
    gamma:      {choice: [0.98, 0.99]}
    seed:       {grid: [0, 1, 2]}

Parsing checks everything a user can get wrong and answers with a `UserError` that
names the file, the key, the value and the fix. `Param.to_tune()` gives Ray Tune's domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tune_runner.errors import UserError, unknown_name

NUMERIC_DISTS = ("uniform", "loguniform", "quniform", "randint")
LIST_DISTS = ("choice", "grid")
DISTRIBUTIONS = NUMERIC_DISTS + LIST_DISTS


@dataclass(frozen=True)
class Param:
    """One searched hyperparameter: `dist` is a key of DISTRIBUTIONS, `args` its arguments."""

    name: str
    dist: str
    args: tuple

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
        """A compact one-line rendering, e.g. `loguniform(1e-05, 0.01)`."""
        return f"{self.dist}({', '.join(_short(a) for a in self.args)})"


def randint_bounds(low: int, high: int) -> tuple[int, int]:
    """Our `randint` is inclusive at both ends; Tune's upper bound is exclusive."""
    return low, high + 1


def parse_space(raw: Any, *, where: str) -> tuple[Param, ...]:
    """Parse the `space:` mapping of a space file; `where` prefixes every error."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise UserError(f"{where}: space: expected a mapping of parameter: {{distribution: args}}, "
                        f"got {_short(raw)}")
    return tuple(parse_param(name, spec, where=f"{where}: space.{name}") for name, spec in raw.items())


def parse_param(name: str, spec: Any, *, where: str) -> Param:
    """Parse one `name: {dist: args}` entry."""
    example = "{loguniform: [1.0e-5, 1.0e-2]}"
    if not isinstance(spec, dict) or len(spec) != 1:
        raise UserError(f"{where}: expected exactly one distribution key like {example}, "
                        f"got {_short(spec)}")
    (dist, args), = spec.items()
    if dist not in DISTRIBUTIONS:
        raise UserError(f"{where}: {unknown_name('distribution', dist, DISTRIBUTIONS)}")
    if not isinstance(args, list) or not args:
        raise UserError(f"{where}: {dist} takes a non-empty list, got {_short(args)}; "
                        f"write e.g. {dist}: {_example(dist)}")
    if dist in LIST_DISTS:
        return Param(name, dist, tuple(_freeze(a) for a in args))
    return Param(name, dist, _numeric_args(dist, args, where=where))


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
