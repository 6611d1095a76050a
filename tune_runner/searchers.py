"""Search algorithms by name: `random` (Tune's variant generator) and `optuna` (TPE).

Settings are checked before launch; an unknown one names the closest valid setting.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tune_runner.errors import UserError, closest
from tune_runner.registry import Registry
from tune_runner.search_space import Param
from tune_runner.spec import Component


@dataclass(frozen=True)
class SearcherType:
    """Builds one kind of searcher from (settings, params); `accepts` lists its settings."""

    build: Callable[[dict, tuple[Param, ...]], Any]
    accepts: Callable[[], list[str]]
    supports_grid: bool


def _random(settings: dict, params: tuple[Param, ...]) -> Any:
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(random_state=settings.get("seed"))


def _optuna(settings: dict, params: tuple[Param, ...]) -> Any:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    sampler_args = {k: v for k, v in settings.items() if k != "seed"}
    sampler = optuna.samplers.TPESampler(seed=settings.get("seed"), **sampler_args)
    return OptunaSearch(sampler=sampler)


def _tpe_settings() -> list[str]:
    import optuna

    return [p for p in inspect.signature(optuna.samplers.TPESampler.__init__).parameters if p != "self"]


SEARCHERS: Registry[SearcherType] = Registry("searcher")
SEARCHERS.register("random", SearcherType(_random, lambda: ["seed"], supports_grid=True))
SEARCHERS.register("optuna", SearcherType(_optuna, _tpe_settings, supports_grid=False))


def build_searcher(component: Component, *, params: tuple[Param, ...], where: str) -> Any:
    """The Tune search algorithm for a spec's searcher component, checked before launch."""
    try:
        kind = SEARCHERS.get(component.name)
    except UserError as exc:
        raise UserError(f"{where}: searcher: {exc}") from None
    accepted = kind.accepts()
    for key in component.settings:
        if key not in accepted:
            near = closest(key, accepted)
            hint = f"did you mean {near!r}?" if near else f"it takes {', '.join(accepted)}"
            raise UserError(f"{where}: searcher.{key}: unknown setting of {component.name}; {hint}")
    grid = [p.name for p in params if p.dist == "grid"]
    if grid and not kind.supports_grid:
        raise UserError(f"{where}: space.{grid[0]}: grid cannot be combined with the {component.name} "
                        f"searcher; use choice, or searcher: random")
    try:
        return kind.build(component.settings, params)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: searcher: {component.name} rejects its settings: {exc}") from None
