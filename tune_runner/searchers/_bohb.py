"""`bohb`: Ray Tune's TuneBOHB, which runs with its own HyperBand (scheduler bohb), seeded, with `bohb_config` and
`max_concurrent` as settings. A space with conditions becomes a ConfigSpace with a condition per parent
(config_space.config_space), searched by conditional.IndexedBOHB.
"""

from __future__ import annotations

from typing import Any

from tune_runner.searchers.record import Conditional, Request, SearcherType


def _build(request: Request) -> Any:
    from ray.tune.search.bohb import TuneBOHB

    return TuneBOHB(seed=request.seed, points_to_evaluate=request.points or None, **request.options)


def _indexed(request: Request) -> Any:
    from tune_runner.searchers.conditional import IndexedBOHB
    from tune_runner.searchers.config_space import config_space

    return IndexedBOHB(request.params, space=config_space(request.params, seed=request.seed), metric=request.metric,
                       mode=request.mode, seed=request.seed, points_to_evaluate=request.points, **request.options)


BOHB = SearcherType(name="bohb", build=_build, model_based=True, settings=("bohb_config", "max_concurrent"),
                    scheduler="bohb", conditional=Conditional(build=_indexed),
                    members_why="BOHB's HyperBand pauses whole trials at its own budgets, one config each")
