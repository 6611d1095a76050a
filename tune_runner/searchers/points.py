"""The points a search starts from: `points_to_evaluate` as given, and a previous experiment's best configs
(`warm_start`), each checked against the space before launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tune_runner.errors import UserError, closest
from tune_runner.spec.search_space import LIST_DISTS, Param, _short


def check_points(points: Any, params: tuple[Param, ...], *, where: str) -> list[dict]:
    """`points_to_evaluate`: a list of mappings of searched parameters to values inside their domains."""
    if points is None:
        return []
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        raise UserError(f"{where}: searcher.points_to_evaluate: expected a list of mappings like "
                        f"[{{lr: 3.0e-4}}], got {_short(points)}")
    searched = {p.name: p for p in params}
    for i, point in enumerate(points):
        for key, value in point.items():
            at = f"{where}: searcher.points_to_evaluate[{i}].{key}"
            if key not in searched:
                near = closest(key, list(searched))
                hint = f"did you mean {near!r}?" if near else "a point sets searched parameters only"
                raise UserError(f"{at}: not in the space; {hint}")
            problem = outside(searched[key], value)
            if problem:
                raise UserError(f"{at}: {problem}")
    return [dict(p) for p in points]


def outside(param: Param, value: Any) -> str | None:
    """Why `value` is not in the parameter's domain, or None."""
    if param.dist in LIST_DISTS:
        choices = param.extremes()
        return None if value in choices else f"{_short(value)} is not one of {_short(choices)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {_short(value)}"
    low, high = param.args[0], param.args[1]
    if not low <= value <= high:
        return f"{value!r} is outside {param.describe()}"
    return None


def warm_start_points(settings: dict, params: tuple[Param, ...], *, where: str, storage: Path | None,
                      metric: str, mode: str) -> list[dict]:
    """The best configs of a previous experiment (`warm_start`), those that fit this space."""
    ref = settings.get("warm_start")
    if ref is None:
        return []
    top = settings.get("warm_start_top", 3)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UserError(f"{where}: searcher.warm_start_top: expected a positive integer, got {_short(top)}")
    from tune_runner.results import analysis

    try:
        loaded = analysis.load(analysis.experiment_path(str(ref), storage=storage, command="search"))
    except UserError as exc:
        raise UserError(f"{where}: searcher.warm_start: {exc}") from None
    configs = analysis.top_configs(loaded, metric=metric, mode=mode, k=top, keys=tuple(p.name for p in params))
    searched = {p.name: p for p in params}
    return [c for c in configs if c and not any(outside(searched[k], v) for k, v in c.items())]
