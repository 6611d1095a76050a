"""The stopper of every tune-rl Tune run: a trial ends at the env-step budget or at the space's `stop_at`.

Its own module so that re-evaluation (search/reevaluate.py) uses it without importing the runner.
Searches started by 0.1.0 pickled it as `tune_runner.runner.BudgetStopper`: search/runner.py imports it
from here, and the alias table (tune_runner/_moved.py) maps that old path to search/runner.
"""

from __future__ import annotations

from ray.tune import Stopper

from tune_runner.spec.experiment import ExperimentSpec


class BudgetStopper(Stopper):
    """Ends a trial at its env-step budget (ExperimentSpec.budget_of), or once it reaches the space's `stop_at`."""

    def __init__(self, spec: ExperimentSpec) -> None:
        self.spec = spec

    def __call__(self, trial_id: str, result: dict) -> bool:
        return int(result.get("env_steps", 0)) >= self.spec.budget_of(result) or self.spec.reached(result)

    def stop_all(self) -> bool:
        return False


class EverySeedStopper(BudgetStopper):
    """For a re-evaluation trial of several seeds (seeds_per_trial): ends at the budget, or once every seed has
    reached `stop_at` at some result (not necessarily the same one), so each seed's env steps to solve show."""

    def __init__(self, spec: ExperimentSpec) -> None:
        super().__init__(spec)
        self.reached: dict[str, set[int]] = {}

    def __call__(self, trial_id: str, result: dict) -> bool:
        from tune_runner.spec.seeds import per_seed

        if int(result.get("env_steps", 0)) >= self.spec.budget_env_steps:
            return True
        values = per_seed(result, self.spec.metric)
        done = self.reached.setdefault(trial_id, set())
        done.update(seeds_reached(self.spec, result))
        return bool(values) and len(done) == len(values)


def seeds_reached(spec: ExperimentSpec, result: dict) -> set[int]:
    """The seeds of a K-seed result whose own value reached stop_at, each over its own episodes (spec.reached)."""
    from tune_runner.spec.seeds import per_seed

    values, episodes = per_seed(result, spec.metric), per_seed(result, "episodes")
    config = result.get("config") or {}
    return {i for i, value in enumerate(values)  # a seed without an episode count is judged by its value alone
            if spec.reached({"config": config, "episodes": episodes[i] if i < len(episodes) else None,
                             spec.metric: value})}
