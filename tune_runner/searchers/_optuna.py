"""`optuna`: Ray Tune's OptunaSearch with a seeded sampler, TPE (default) or CMA-ES, and the sampler's own options
as settings (`sampler: cmaes`, `n_startup_trials: 5`, ...). A space with conditions is searched define-by-run
(conditional.DefineByRun): Optuna never suggests an inactive parameter.
"""

from __future__ import annotations

import inspect
from typing import Any

from tune_runner.errors import UserError, unknown_name
from tune_runner.searchers.record import COMMON, Conditional, Request, SearcherType

OPTUNA_SAMPLERS = {"tpe": "TPESampler", "cmaes": "CmaEsSampler"}


def _optuna() -> Any:
    """optuna, with its INFO lines off: its first import sets its logger to INFO, with a handler of its own,
    over the WARNING cluster.session.quiet_logs gave it before, and each study says "A new study created in
    memory" there, in the middle of the live view. Every import of it for a search comes through here."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def optuna_sampler(settings: dict) -> Any:
    """The Optuna sampler a searcher's settings ask for (TPE by default), seeded."""
    optuna = _optuna()
    kind = settings.get("sampler", "tpe")
    options = {k: v for k, v in settings.items() if k not in (*COMMON, "sampler")}
    return getattr(optuna.samplers, OPTUNA_SAMPLERS[kind])(seed=settings.get("seed"), **options)


def _settings(settings: dict) -> list[str]:
    """`sampler` and the chosen sampler's own arguments."""
    optuna = _optuna()
    kind = settings.get("sampler", "tpe")
    if kind not in OPTUNA_SAMPLERS:
        raise UserError(f"sampler: {unknown_name('optuna sampler', kind, OPTUNA_SAMPLERS)}")
    cls = getattr(optuna.samplers, OPTUNA_SAMPLERS[kind])
    return ["sampler", *(p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "seed"))]


def _build(request: Request) -> Any:
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(sampler=optuna_sampler(request.settings), points_to_evaluate=request.points or None)


def _define_by_run(request: Request) -> Any:
    from ray.tune.search.optuna import OptunaSearch

    from tune_runner.searchers.conditional import DefineByRun

    return OptunaSearch(space=DefineByRun(request.params), metric=request.metric, mode=request.mode,
                        sampler=optuna_sampler(request.settings), points_to_evaluate=request.points or None)


OPTUNA = SearcherType(name="optuna", build=_build, model_based=True, settings=_settings,
                      conditional=Conditional(build=_define_by_run), members="fixes")
