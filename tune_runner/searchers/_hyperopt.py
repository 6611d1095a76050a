"""`hyperopt`: Ray Tune's HyperOptSearch (TPE), seeded, with `n_initial_points` and `gamma` as settings. A space
with conditions becomes hyperopt's nested choices (conditional.hyperopt_space): each parent's values are the
branches, its children live in theirs; such a space cannot start from given points.
"""

from __future__ import annotations

from typing import Any

from tune_runner.errors import UserError
from tune_runner.searchers.record import Conditional, Request, SearcherType


def _build(request: Request) -> Any:
    from ray.tune.search.hyperopt import HyperOptSearch

    return HyperOptSearch(random_state_seed=request.seed, points_to_evaluate=request.points or None,
                          **request.options)


def _nested(request: Request) -> Any:
    from tune_runner.searchers.conditional import NestedHyperOptSearch, hyperopt_space

    if request.points:
        raise UserError(f"{request.where}: searcher: hyperopt cannot start a conditional space from given points "
                        f"(points_to_evaluate, warm_start); drop them, or use searcher optuna")
    return NestedHyperOptSearch(request.params, space=hyperopt_space(request.params, where=request.where),
                                metric=request.metric, mode=request.mode, random_state_seed=request.seed,
                                **request.options)


HYPEROPT = SearcherType(name="hyperopt", build=_build, model_based=True, settings=("n_initial_points", "gamma"),
                        conditional=Conditional(build=_nested), members="member keys")
