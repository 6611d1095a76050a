"""`smac`: SMAC3's multi-fidelity facade (a random forest with Hyperband) as a Ray Tune searcher, on env steps.

Ray Tune has no SMAC searcher (ray issues #25364, #49408). This one drives SMAC by ask and tell:

- Each suggestion is one of SMAC's (configuration, budget) pairs. The budget is a number of env steps
  between `min_budget` x the space's budget and the budget, and travels in the trial's config under
  BUDGET_KEY; the stopper ends the trial there (tuning/stopper.py), and no learner sees the key.
- A finished trial's metric (its last result) is told back as SMAC's cost, negated when mode is max;
  an errored trial or one that reported no finite metric is told as crashed.
- SMAC's Hyperband decides which configurations go on to larger budgets, so it runs with scheduler fifo.
  A configuration at a larger budget is a new trial, trained from its start, as in ARLBench's SMAC+HB.

Settings: `seed`; `eta`, Hyperband's halving rate (default 3); `min_budget`, the smallest budget as a share
of the space's (default 0.1, ARLBench's 10%). The space may have conditions (`when:`): SMAC's ConfigSpace
holds them (searchers/config_space.py), so an inactive parameter is never suggested.

Resume: SMAC's intensifier cannot be pickled, so the searcher pickles its log of asks and tells instead,
and unpickling replays it into a new SMAC of the same seed, which asks the same configurations again
(checked: a different one is an error, not a silent mix-up).
SMAC writes its run history to a temporary folder of its own, removed with the searcher.
"""

from __future__ import annotations

import logging
import math
import pickle
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from tune_runner.errors import UserError
from tune_runner.searchers.config_space import config_space, from_config_space
from tune_runner.searchers.record import Conditional, Request, SearcherType
from tune_runner.spec.reserved import BUDGET_KEY
from tune_runner.spec.search_space import Param
from tune_runner.trainables.metrics import finite

SETTINGS = ("eta", "min_budget")


def installed() -> str | None:
    """None where SMAC3 can be imported, else the one line that says how to get it."""
    try:
        import smac  # noqa: F401
    except ImportError:
        return "SMAC3 is not installed here; pip install 'tune-rl[smac]' (or pip install smac)"
    return None


def check_settings(*, eta: Any = 3, min_budget: Any = 0.1) -> None:
    """Hyperband's settings, checked before SMAC3 is imported (several seconds): ValueError names the bad one."""
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or eta <= 1:
        raise ValueError(f"eta must be a number above 1 (Hyperband keeps 1/eta of each rung), got {eta!r}")
    if isinstance(min_budget, bool) or not isinstance(min_budget, (int, float)) or not 0 < min_budget < 1:
        raise ValueError(f"min_budget is a share of the budget, above 0 and below 1, got {min_budget!r}")


def _never(config: Any, seed: int = 0, budget: float = 0.0) -> float:
    """SMAC's target function, which ask and tell never call: Tune's trials are the evaluations."""
    raise RuntimeError("SMAC's target function is not called in ask-and-tell use")


class SMACSearch(Searcher):
    """SMAC3's MultiFidelityFacade with a Hyperband intensifier, asked for each trial and told its result."""

    def __init__(self, params: Sequence[Param], *, budget: int, num_samples: int, metric: str, mode: str,
                 seed: int | None = None, eta: float = 3, min_budget: float = 0.1) -> None:
        check_settings(eta=eta, min_budget=min_budget)
        super().__init__(metric=metric, mode=mode)
        self.params, self.budget, self.num_samples = tuple(params), int(budget), int(num_samples)
        self.seed, self.eta, self.min_budget = 0 if seed is None else int(seed), float(eta), float(min_budget)
        self._log: list[tuple] = []  # ("ask", trial_id, config), ("tell", trial_id, cost or None): replayed
        self._asked: dict[str, Any] = {}  # trial_id -> SMAC's TrialInfo, until told
        self._smac = self._facade()

    def _facade(self) -> Any:
        """A new SMAC of this searcher's seed, writing to a temporary folder removed with the searcher."""
        from smac import MultiFidelityFacade, Scenario
        from smac.intensifier.hyperband import Hyperband
        from smac.model.random_forest import RandomForest

        self._folder = Path(tempfile.mkdtemp(prefix="tune-rl-smac-"))
        weakref.finalize(self, shutil.rmtree, self._folder, True)
        scenario = Scenario(config_space(self.params, seed=self.seed), deterministic=True,
                            n_trials=max(self.num_samples, 1), min_budget=self.min_budget * self.budget,
                            max_budget=self.budget, seed=self.seed, output_directory=self._folder / "smac3")
        intensifier = Hyperband(scenario, eta=self.eta, incumbent_selection="highest_budget")
        # The facade's own forest with two changes that leave the model as it is: one thread (joblib on every core
        # polls its threads and took the trials' cores from the driver) and depth-first trees (a leaf limit of 2**20
        # made sklearn build each tree best-first, 0.15 s a tree on a dozen points). An ask after the first bracket
        # cost 3 s with SMAC's forest here, 0.6 s with this one.
        forest = RandomForest(scenario.configspace, log_y=True, n_trees=10, ratio_features=1.0, min_samples_split=2,
                              min_samples_leaf=1, max_depth=2**20, max_leaf_nodes=None, bootstrapping=True,
                              seed=self.seed, n_jobs=1)
        return MultiFidelityFacade(scenario, target_function=_never, intensifier=intensifier, model=forest,
                                   overwrite=True, logging_level=logging.ERROR)

    def suggest(self, trial_id: str) -> dict | None:
        info = self._smac.ask()
        self._asked[trial_id] = info
        config = {**from_config_space(self.params, dict(info.config)), BUDGET_KEY: self._env_steps(info.budget)}
        self._log.append(("ask", trial_id, config))
        return config

    def _env_steps(self, budget: float | None) -> int:
        return self.budget if budget is None else max(1, min(self.budget, int(math.ceil(budget - 1e-9))))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self._asked:
            return
        value = None if error or not result else result.get(self.metric)
        cost = (-float(value) if self.mode == "max" else float(value)) if finite(value) else None
        self._tell(trial_id, cost)
        self._log.append(("tell", trial_id, cost))

    def _tell(self, trial_id: str, cost: float | None) -> None:
        from smac.runhistory.dataclasses import TrialValue
        from smac.runhistory.enumerations import StatusType

        info = self._asked.pop(trial_id)
        value = TrialValue(cost=cost) if cost is not None else TrialValue(cost=math.inf, status=StatusType.CRASHED)
        self._smac.tell(info, value, save=False)

    def __getstate__(self) -> dict[str, Any]:
        """Everything but SMAC itself (its intensifier holds generators): __setstate__ replays the log into a
        new one. Tune pickles a searcher with the experiment, and saves it through `save`."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_smac", "_asked", "_folder")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        log = state.pop("_log")
        self.__dict__.update(state, _log=[], _asked={})
        self._smac = self._facade()
        for entry in log:
            if entry[0] == "ask" and self.suggest(entry[1]) != entry[2]:
                raise RuntimeError(f"the restored SMAC asked for another configuration than {entry[1]} had: "
                                   f"{entry[2]}; SMAC's asks are no longer reproducible from its seed")
            if entry[0] == "tell" and entry[1] in self._asked:
                self._tell(entry[1], entry[2])
                self._log.append(entry)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__getstate__(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__setstate__(pickle.load(f))


def smac_searcher(request: Request) -> SMACSearch:
    """The `smac` record's builder: refused in one line where SMAC3 is missing or given start points."""
    where, options = request.where, {k: request.settings[k] for k in SETTINGS if k in request.settings}
    check_settings(**options)
    missing = installed()
    if missing:
        raise UserError(f"{where}: searcher: smac: {missing}")
    if request.points:
        raise UserError(f"{where}: searcher: smac cannot start from given points (points_to_evaluate, warm_start); "
                        f"drop them, or use searcher optuna")
    if request.budget is None:
        raise UserError(f"{where}: searcher: smac needs the space's budget in env steps (budget: {{env_steps: N}})")
    return SMACSearch(request.params, budget=request.budget, num_samples=request.num_samples, metric=request.metric,
                      mode=request.mode, seed=request.seed, **options)


# Its ConfigSpace holds the space, conditions included; SMAC's Hyperband picks the budgets, so Tune's scheduler is fifo.
SMAC = SearcherType(name="smac", build=smac_searcher, model_based=True, settings=SETTINGS, scheduler="fifo",
                    owns_space=True, conditional=Conditional(build=smac_searcher),
                    members_why="SMAC's intensifier gives each config its own budget, and a population trial's "
                                "members share one")
