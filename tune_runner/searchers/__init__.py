"""Search algorithms by name: `random`, `grid`, `optuna` (TPE or CMA-ES), `hyperopt` (TPE), `bohb`, `smac`,
`nevergrad`. Each is one record (record.SearcherType) in its private module (`_basic`, `_optuna`, `_hyperopt`,
`_bohb`, `_smac`, `_nevergrad`); this package names them in SEARCHERS and checks a spec's searcher against its
record before building it. The rest of the code asks the record, never the name.

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

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_runner.errors import UserError, closest
from tune_runner.registry import Registry

if TYPE_CHECKING:
    from tune_runner.searchers.record import SearcherType
    from tune_runner.spec.experiment import Component
    from tune_runner.spec.search_space import Param

__all__ = ["NOT_AVAILABLE", "SEARCHERS", "build_searcher", "check_settings", "grid_space", "searcher_type"]

# One record per algorithm, each in its private module, imported when its name is looked up (as Ray Tune's
# tune/search/__init__.py does): the names alone, for the command line's help and completion, import nothing.
# A new searcher is one module with its record, and one line here (or SEARCHERS.register from anywhere). The
# records' module (dataclasses, 4 ms) is imported with the first record too, not by `tune-rl --help`.
SEARCHERS: Registry[SearcherType] = Registry("searcher")
SEARCHERS.register("random", "tune_runner.searchers._basic:RANDOM")
SEARCHERS.register("grid", "tune_runner.searchers._basic:GRID")
SEARCHERS.register("optuna", "tune_runner.searchers._optuna:OPTUNA")
SEARCHERS.register("hyperopt", "tune_runner.searchers._hyperopt:HYPEROPT")
SEARCHERS.register("bohb", "tune_runner.searchers._bohb:BOHB")
SEARCHERS.register("smac", "tune_runner.searchers._smac:SMAC")
SEARCHERS.register("nevergrad", "tune_runner.searchers._nevergrad:NEVERGRAD")


# Searchers the field uses that tune-rl leaves out, and why (checked with pip on this project's pins, 2026-11):
# asked for by name, they get this line, not "unknown searcher".
NOT_AVAILABLE = {
    "hebo": "HEBO pins numpy below 1.25, and pip would replace the numpy 2 that Ray and torch here use with 1.24.4",
    "dehb": "DEHB 0.1.2 pins numpy 1.x, and pip would replace the numpy 2 that Ray and torch here use with 1.26.4",
    "ax": ("Ray Tune 2.60's AxSearch fails on Ax 1.3 ('Objective' object has no attribute 'metric'), and Ax 0.5, "
           "the last it works with, fails on numpy 2 once its BoTorch model is fitted"),
}


def searcher_type(component: Component, *, where: str) -> SearcherType:
    """The record of the spec's searcher; an unknown name is refused with the choices and the closest."""
    if component.name in NOT_AVAILABLE and component.name not in SEARCHERS:
        model_based = ", ".join(n for n in SEARCHERS.names() if SEARCHERS.get(n).model_based)
        raise UserError(f"{where}: searcher: {component.name!r} is not available in tune-rl: "
                        f"{NOT_AVAILABLE[component.name]}; use one of {model_based}")
    try:
        return SEARCHERS.get(component.name)
    except UserError as exc:
        raise UserError(f"{where}: searcher: {exc}") from None


def grid_space(params: tuple[Param, ...], *, where: str) -> tuple[Param, ...]:
    """A grid searcher's space (`grid_axes`): every choice becomes a grid axis; a range is refused."""
    from tune_runner.spec.search_space import LIST_DISTS, Param

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
    and `num_samples` are the space's, for a searcher that plans with them (smac picks each trial's budget,
    nevergrad plans with the number of trials)."""
    from tune_runner.searchers.points import check_points, warm_start_points
    from tune_runner.searchers.record import Request

    kind = searcher_type(component, where=where)
    check_settings(kind, component.settings, where=where)
    grid = [p.name for p in params if p.dist == "grid"]
    if grid and kind.model_based:
        raise UserError(f"{where}: space.{grid[0]}: grid cannot be combined with the {kind.name} "
                        f"searcher (it chooses points itself); use choice, or searcher: grid")
    if kind.model_based and not params:
        raise UserError(f"{where}: searcher: {kind.name} needs a space to search; add space: or use "
                        f"searcher: random")
    points = check_points(component.settings.get("points_to_evaluate"), params, where=where)
    points = warm_start_points(component.settings, params, where=where, storage=storage,
                               metric=metric, mode=mode) + points
    request = Request(settings=component.settings, params=params, points=points, where=where, metric=metric,
                      mode=mode, budget=budget, num_samples=num_samples)
    build = kind.build
    if any(p.when for p in params):  # see tune_runner.searchers.conditional
        if kind.conditional is None:
            takers = ", ".join(n for n in SEARCHERS.names() if SEARCHERS.get(n).conditional is not None)
            raise UserError(f"{where}: searcher: {kind.name} cannot search a conditional space (when:); use one "
                            f"of {takers}")
        build = kind.conditional.build
    try:
        return build(request)
    except (TypeError, ValueError, AssertionError) as exc:
        raise UserError(f"{where}: searcher: {kind.name} rejects its settings: "
                        f"{str(exc).strip().splitlines()[0]}") from None


def check_settings(kind: SearcherType, settings: dict, *, where: str) -> None:
    """Each setting must be one the searcher takes; a misspelled one is answered with the closest."""
    try:
        accepted = kind.accepted(settings)
    except UserError as exc:
        raise UserError(f"{where}: searcher.{exc}") from None
    for key in settings:
        if key not in accepted:
            near = closest(key, accepted)
            hint = f"did you mean {near!r}?" if near else f"it takes {', '.join(accepted)}"
            raise UserError(f"{where}: searcher.{key}: unknown setting of {kind.name}; {hint}")
