"""`nevergrad`: Ray Tune's NevergradSearch, made to behave like our other searchers.

Ray's class as it is needs three things a user of ours should not have to know:

- Nevergrad's optimizers plan with a budget (NGOpt refuses to ask without one): it is the space's num_samples.
- A seed: Ray's class has none; ours seeds the parametrization's generator, which every optimizer draws from.
- A failed trial: Ray's class tells Nevergrad a missing metric (KeyError) or NaN; ours tells it nothing.

The searcher holds the space (Prepared.owns_space): quniform values are put back on their step, which Ray's
conversion drops, and a conditional space's inactive parameters are sampled, then dropped, as random search
does (Nevergrad has no conditions).

Settings: `seed`, `optimizer` (a name in nevergrad.optimizers.registry; default NGOpt, Nevergrad's own pick
for the space and budget), `points_to_evaluate` and `warm_start`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ray import tune
from ray.tune.search.nevergrad import NevergradSearch

from tune_runner.errors import UserError, closest
from tune_runner.searchers.record import Conditional, Request, SearcherType
from tune_runner.spec.search_space import Param, prune
from tune_runner.trainables.metrics import finite

DEFAULT_OPTIMIZER = "NGOpt"


def installed() -> str | None:
    """None where nevergrad can be imported, else the one line that says how to get it."""
    try:
        import nevergrad  # noqa: F401
    except ImportError:
        return "nevergrad is not installed here; pip install 'tune-rl[nevergrad]' (or pip install nevergrad)"
    return None


class SeededNevergrad(NevergradSearch):
    """NevergradSearch over our params, with a budget and a seed, quniform steps kept, failed trials not told."""

    def __init__(self, params: Sequence[Param], *, optimizer: type, budget: int, seed: int | None, metric: str,
                 mode: str, points_to_evaluate: list[dict] | None = None) -> None:
        self.params, self.seed = tuple(params), seed  # before super(): it sets Nevergrad up, seeding it (below)
        # quniform as uniform, snapped in suggest: Ray's conversion would drop the step with a warning
        space = NevergradSearch.convert_search_space(
            {p.name: tune.uniform(*p.args[:2]) if p.dist == "quniform" else p.to_tune() for p in self.params})
        # num_workers: Tune asks for several trials before it tells the first; told 1, NGOpt picks Cobyla, which
        # runs in a thread of its own that deadlocked on resume here (Nevergrad refuses it by name with more)
        options = {"budget": max(1, int(budget)), "num_workers": max(2, int(budget))}
        super().__init__(optimizer=optimizer, optimizer_kwargs=options, space=space, metric=metric, mode=mode,
                         points_to_evaluate=points_to_evaluate)

    def _setup_nevergrad(self) -> None:
        if self._space is not None and self.seed is not None:
            import numpy as np

            self._space.random_state = np.random.RandomState(self.seed)
        super()._setup_nevergrad()

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if not isinstance(config, dict):
            return config
        for param in self.params:
            if param.dist == "quniform" and param.name in config:
                config[param.name] = param.snapped(config[param.name])
        return prune(config, self.params)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        value = None if error or not result else result.get(self.metric)
        if finite(value):
            self._process_result(trial_id, result)
        self._live_trial_mapping.pop(trial_id, None)


def nevergrad_searcher(request: Request) -> SeededNevergrad:
    """The `nevergrad` record's builder: refused in one line where nevergrad is missing or the optimizer is not one
    of its names."""
    where = request.where
    missing = installed()
    if missing:
        raise UserError(f"{where}: searcher: nevergrad: {missing}")
    import nevergrad as ng

    name = request.settings.get("optimizer", DEFAULT_OPTIMIZER)
    if not isinstance(name, str) or name not in ng.optimizers.registry:
        near = closest(str(name), sorted(ng.optimizers.registry))
        hint = f"did you mean {near!r}? " if near else ""
        raise UserError(f"{where}: searcher.optimizer: unknown nevergrad optimizer {name!r}; {hint}(one of the "
                        f"{len(ng.optimizers.registry)} names in nevergrad.optimizers.registry, e.g. NGOpt, "
                        f"TwoPointsDE, CMA, PSO, OnePlusOne)")
    optimizer = ng.optimizers.registry[name]
    # Asked before building it: Nevergrad refuses several workers from inside the constructor, after the object
    # exists, and the half-built optimizer (Cobyla's) raises in its __del__ whenever the garbage collector gets
    # to it, later and anywhere in the process (inside a test's ast.parse on Python 3.11: a SystemError)
    if getattr(optimizer, "no_parallelization", False):
        raise UserError(f"{where}: searcher.optimizer: {name} runs one trial at a time (in a thread of its own), "
                        f"and Tune runs several at once; use NGOpt (the default), TwoPointsDE, CMA or PSO")
    return SeededNevergrad(request.params, optimizer=optimizer, budget=request.num_samples, seed=request.seed,
                           metric=request.metric, mode=request.mode, points_to_evaluate=request.points or None)


# It holds the space; a condition's inactive parameters are sampled, then dropped (SeededNevergrad.suggest).
NEVERGRAD = SearcherType(name="nevergrad", build=nevergrad_searcher, model_based=True, settings=("optimizer",),
                         owns_space=True, conditional=Conditional(build=nevergrad_searcher), members="member keys")
