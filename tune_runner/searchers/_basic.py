"""`random` and `grid`: Ray Tune's variant generator. `grid` turns every listed value into a grid axis (each
value tried, num_samples times over); `random` samples. Over a space with conditions (`when:`), Tune samples
every parameter and the inactive ones are dropped from each trial's config (conditional.PruningVariantGenerator).
"""

from __future__ import annotations

from typing import Any

from tune_runner.searchers.record import Conditional, Request, SearcherType


def _variants(request: Request) -> Any:
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(random_state=request.seed, points_to_evaluate=request.points or None)


def _pruning_variants(request: Request) -> Any:
    from tune_runner.searchers.conditional import PruningVariantGenerator

    return PruningVariantGenerator(request.params, random_state=request.seed,
                                   points_to_evaluate=request.points or None)


_CONDITIONAL = Conditional(build=_pruning_variants, holds_space=False)  # Tune's param_space holds the space
RANDOM = SearcherType(name="random", build=_variants, model_based=False, conditional=_CONDITIONAL, members="draws")
GRID = SearcherType(name="grid", build=_variants, model_based=False, conditional=_CONDITIONAL, grid_axes=True,
                    members="groups")
