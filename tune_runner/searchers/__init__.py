"""Search algorithms by name: `random`, `grid`, `optuna` (TPE or CMA-ES), `hyperopt` (TPE), `bohb`, `smac`,
`nevergrad`.

Settings every searcher takes:

    searcher:
      name: optuna
      seed: 7                      # reproducible suggestions
      points_to_evaluate:          # tried first, in order (a partial point gets the rest sampled)
        - {lr: 3.0e-4, gamma: 0.99}
      warm_start: ppo_small-20261122-101500   # a previous experiment (name or folder): its best configs first
      warm_start_top: 3

plus the searcher's own (Optuna's sampler options, HyperOpt's `n_initial_points`, ...).
Everything is checked before launch; an unknown setting names the closest valid one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError, closest, unknown_name
from tune_runner.registry import Registry
from tune_runner.spec.experiment import Component
from tune_runner.spec.search_space import LIST_DISTS, Param, _short

COMMON = ("seed", "points_to_evaluate", "warm_start", "warm_start_top")
OPTUNA_SAMPLERS = {"tpe": "TPESampler", "cmaes": "CmaEsSampler"}


@dataclass(frozen=True)
class SearcherType:
    """Builds one kind of searcher from (settings, params, points); `accepts` lists its own settings.

    `model_based`: it learns from results, so a grid makes no sense with it; `scheduler`:
    the one scheduler type it must run with (BOHB's pair); `owns_space`: it holds the searched space itself
    (Tune's param_space then carries the fixed values only) and is built with the search's budget, number of
    trials and metric (smac gives each trial its own budget; nevergrad plans with the number of trials).
    """

    build: Callable[[dict, tuple[Param, ...], list[dict]], Any]
    accepts: Callable[[dict], list[str]]
    model_based: bool
    scheduler: str | None = None
    owns_space: bool = False


def _random(settings: dict, params: tuple[Param, ...], points: list[dict]) -> Any:
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(random_state=settings.get("seed"), points_to_evaluate=points or None)


def _optuna(settings: dict, params: tuple[Param, ...], points: list[dict]) -> Any:
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(sampler=optuna_sampler(settings), points_to_evaluate=points or None)


def optuna_sampler(settings: dict) -> Any:
    """The Optuna sampler a searcher's settings ask for (TPE by default), seeded."""
    import optuna

    kind = settings.get("sampler", "tpe")
    options = {k: v for k, v in settings.items() if k not in (*COMMON, "sampler")}
    return getattr(optuna.samplers, OPTUNA_SAMPLERS[kind])(seed=settings.get("seed"), **options)


def _optuna_settings(settings: dict) -> list[str]:
    import optuna

    kind = settings.get("sampler", "tpe")
    if kind not in OPTUNA_SAMPLERS:
        raise UserError(f"sampler: {unknown_name('optuna sampler', kind, OPTUNA_SAMPLERS)}")
    cls = getattr(optuna.samplers, OPTUNA_SAMPLERS[kind])
    return ["sampler", *(p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "seed"))]


def _hyperopt(settings: dict, params: tuple[Param, ...], points: list[dict]) -> Any:
    from ray.tune.search.hyperopt import HyperOptSearch

    options = {k: v for k, v in settings.items() if k not in COMMON}
    return HyperOptSearch(random_state_seed=settings.get("seed"), points_to_evaluate=points or None, **options)


def _bohb(settings: dict, params: tuple[Param, ...], points: list[dict]) -> Any:
    from ray.tune.search.bohb import TuneBOHB

    options = {k: v for k, v in settings.items() if k not in COMMON}
    return TuneBOHB(seed=settings.get("seed"), points_to_evaluate=points or None, **options)


def _smac(settings: dict, params: tuple[Param, ...], points: list[dict], **context: Any) -> Any:
    from tune_runner.searchers._smac import smac_searcher

    return smac_searcher(settings, params, points, **context)


def _nevergrad(settings: dict, params: tuple[Param, ...], points: list[dict], **context: Any) -> Any:
    from tune_runner.searchers._nevergrad import nevergrad_searcher

    return nevergrad_searcher(settings, params, points, **context)


SEARCHERS: Registry[SearcherType] = Registry("searcher")
SEARCHERS.register("random", SearcherType(_random, lambda s: [], model_based=False))
SEARCHERS.register("grid", SearcherType(_random, lambda s: [], model_based=False))
SEARCHERS.register("optuna", SearcherType(_optuna, _optuna_settings, model_based=True))
SEARCHERS.register("hyperopt", SearcherType(_hyperopt, lambda s: ["n_initial_points", "gamma"], model_based=True))
SEARCHERS.register("bohb", SearcherType(_bohb, lambda s: ["bohb_config", "max_concurrent"], model_based=True,
                                        scheduler="bohb"))
SEARCHERS.register("smac", SearcherType(_smac, lambda s: ["eta", "min_budget"], model_based=True,
                                        scheduler="fifo", owns_space=True))
SEARCHERS.register("nevergrad", SearcherType(_nevergrad, lambda s: ["optimizer"], model_based=True, owns_space=True))


# Searchers the field uses that tune-rl leaves out, and why (checked with pip on this project's pins, 2026-11):
# asked for by name, they get this line, not "unknown searcher".
NOT_AVAILABLE = {
    "hebo": "HEBO pins numpy below 1.25, and pip would replace the numpy 2 that Ray and torch here use with 1.24.4",
    "dehb": "DEHB 0.1.2 pins numpy 1.x, and pip would replace the numpy 2 that Ray and torch here use with 1.26.4",
    "ax": ("Ray Tune 2.60's AxSearch fails on Ax 1.3 ('Objective' object has no attribute 'metric'), and Ax 0.5, "
           "the last it works with, fails on numpy 2 once its BoTorch model is fitted"),
}


def searcher_type(component: Component, *, where: str) -> SearcherType:
    if component.name in NOT_AVAILABLE and component.name not in SEARCHERS:
        raise UserError(f"{where}: searcher: {component.name!r} is not available in tune-rl: "
                        f"{NOT_AVAILABLE[component.name]}; use optuna (TPE or CMA-ES), hyperopt, bohb, smac or "
                        f"nevergrad")
    try:
        return SEARCHERS.get(component.name)
    except UserError as exc:
        raise UserError(f"{where}: searcher: {exc}") from None


def grid_space(params: tuple[Param, ...], *, where: str) -> tuple[Param, ...]:
    """The `grid` searcher's space: every choice becomes a grid axis; a range is refused."""
    out = []
    for param in params:
        if param.dist not in LIST_DISTS:
            raise UserError(f"{where}: space.{param.name}: the grid searcher needs listed values, got "
                            f"{param.describe()}; write {param.name}: {{grid: [...]}}, or use searcher random")
        out.append(Param(param.name, "grid", param.args))
    return tuple(out)


def build_searcher(component: Component, *, params: tuple[Param, ...], where: str,
                   storage: Path | None = None, metric: str = "episode_return_mean", mode: str = "max",
                   budget: int | None = None, num_samples: int = 1) -> Any:
    """The Tune search algorithm for a spec's searcher component, checked before launch. `budget` (env steps)
    and `num_samples` are the space's, for a searcher that holds the space (smac picks each trial's budget,
    nevergrad plans with the number of trials)."""
    kind = searcher_type(component, where=where)
    try:
        accepted = [*COMMON, *kind.accepts(component.settings)]
    except UserError as exc:
        raise UserError(f"{where}: searcher.{exc}") from None
    for key in component.settings:
        if key not in accepted:
            near = closest(key, accepted)
            hint = f"did you mean {near!r}?" if near else f"it takes {', '.join(accepted)}"
            raise UserError(f"{where}: searcher.{key}: unknown setting of {component.name}; {hint}")
    grid = [p.name for p in params if p.dist == "grid"]
    if grid and kind.model_based:
        raise UserError(f"{where}: space.{grid[0]}: grid cannot be combined with the {component.name} "
                        f"searcher (it chooses points itself); use choice, or searcher: grid")
    if kind.model_based and not params:
        raise UserError(f"{where}: searcher: {component.name} needs a space to search; add space: or use "
                        f"searcher: random")
    points = check_points(component.settings.get("points_to_evaluate"), params, where=where)
    points = warm_start_points(component.settings, params, where=where, storage=storage,
                               metric=metric, mode=mode) + points
    try:
        if kind.owns_space:  # holds the space itself, conditions included
            return kind.build(component.settings, params, points, budget=budget, num_samples=num_samples,
                              metric=metric, mode=mode, where=where)
        if any(p.when for p in params):  # the searcher holds the space: see tune_runner.searchers.conditional
            from tune_runner.searchers import conditional

            settings = component.settings
            return conditional.searcher(
                component.name, settings.get("seed"), {k: v for k, v in settings.items() if k not in COMMON},
                params, points, metric=metric, mode=mode, where=where,
                sampler=optuna_sampler(settings) if component.name == "optuna" else None)
        return kind.build(component.settings, params, points)
    except (TypeError, ValueError, AssertionError) as exc:
        raise UserError(f"{where}: searcher: {component.name} rejects its settings: "
                        f"{str(exc).strip().splitlines()[0]}") from None


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
