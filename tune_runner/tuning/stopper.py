"""The stopper of every tune-rl Tune run: a trial ends at the env-step budget or at the space's `stop_at`.

Its own module so that re-evaluation (tuning/reevaluate.py) uses it without importing the runner.
Searches started by 0.1.0 pickled it as `tune_runner.runner.BudgetStopper`: tuning/runner.py imports it
from here, and the alias table (tune_runner/_moved.py) maps that old path to search/runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ray.tune import Stopper

from tune_runner.spec import reserved
from tune_runner.spec.experiment import ExperimentSpec


class BudgetStopper(Stopper):
    """Ends a trial at its env-step budget (ExperimentSpec.budget_of), or once it reaches the space's `stop_at`."""

    def __init__(self, spec: ExperimentSpec) -> None:
        self.spec = spec

    def __call__(self, trial_id: str, result: dict) -> bool:
        from tune_runner.spec.seed_keys import MEMBER_COUNTS

        if MEMBER_COUNTS[0] in result:  # a population trial: its members end one by one, then it ends itself
            return False
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
        from tune_runner.spec.seed_keys import per_seed

        if int(result.get("env_steps", 0)) >= self.spec.budget_env_steps:
            return True
        values = per_seed(result, self.spec.metric)
        done = self.reached.setdefault(trial_id, set())
        done.update(seeds_reached(self.spec, result))
        return bool(values) and len(done) == len(values)


def seeds_reached(spec: ExperimentSpec, result: dict) -> set[int]:
    """The seeds of a K-seed result whose own value reached stop_at, each over its own episodes (spec.reached)."""
    from tune_runner.spec.seed_keys import per_seed

    values, episodes = per_seed(result, spec.metric), per_seed(result, "episodes")
    config = result.get("config") or {}
    return {i for i, value in enumerate(values)  # a seed without an episode count is judged by its value alone
            if spec.reached({"config": config, "episodes": episodes[i] if i < len(episodes) else None,
                             spec.metric: value})}


@dataclass
class _Trial:
    """What RankingStopper knows of one re-evaluation trial: its candidate, each seed's env steps where it first
    reached stop_at and its value then (else its latest value), its latest env steps, and whether it ended."""

    candidate: int
    reached_at: dict[int, int] = field(default_factory=dict)
    values: dict[int, float] = field(default_factory=dict)
    env_steps: int = 0
    ended: bool = False


class RankingStopper(EverySeedStopper):
    """EverySeedStopper for a re-evaluation of `count` candidates, one trial of all seeds each, that also ends the
    last running trial once nothing its unsolved seeds could still do would change the verdict: the ranking, and
    whether the winner is clear (tune_runner.results.robust.rank).

    A seed that has not reached stop_at will either reach it at some later env step or never (then it counts
    at the budget, as robust.summarise counts it). The verdict is a sorted order on keys that only get worse
    as those seeds do worse, and a winner's clearness moves one way with the runner-up's env steps, so when the
    best case (every such seed solves at the trial's current env steps, with the best value) and the worst case
    (none ever does, with the worst value) give the same verdict, every outcome does. The trial is then
    stopped: its unsolved seeds count at the budget, as in the worst case, and the report says where it stopped.
    With 2 candidates of 3 seeds (the default), the runner-up otherwise trains its unsolved seed to the full
    budget after the winner has finished: in `make search`, 130k env steps of 3 seeds on one core for nothing.
    Only a trial that cannot become the winner in its best case is stopped."""

    def __init__(self, spec: ExperimentSpec, *, count: int) -> None:
        super().__init__(spec)
        self.count = count
        self.trials: dict[str, _Trial] = {}

    def __call__(self, trial_id: str, result: dict) -> bool:
        from tune_runner.spec.seed_keys import per_seed

        candidate = (result.get("config") or {}).get(reserved.CANDIDATE_KEY)
        if candidate is None or isinstance(candidate, list):  # not one candidate's (a search's trial, or a
            return super().__call__(trial_id, result)        # population trial of several): EverySeedStopper
        trial = self.trials.setdefault(trial_id, _Trial(int(candidate)))
        trial.env_steps = int(result.get("env_steps", 0))
        for index in seeds_reached(self.spec, result):
            trial.reached_at.setdefault(index, trial.env_steps)
        for index, value in enumerate(per_seed(result, self.spec.metric)):
            if trial.reached_at.get(index, trial.env_steps) == trial.env_steps:  # kept from where it first reached
                trial.values[index] = float(value)
        trial.ended = super().__call__(trial_id, result)
        if not trial.ended and self._decided(trial):
            trial.ended = True
        return trial.ended

    def _decided(self, running: _Trial) -> bool:
        """Whether `running` is the one trial left and its best and worst cases give one verdict."""
        others = [t for t in self.trials.values() if t is not running]
        if self.spec.stop_at is None or len(others) != self.count - 1 or not all(t.ended for t in others):
            return False
        best, worst = self._verdict(others, running, best=True), self._verdict(others, running, best=False)
        return best[0][0] != running.candidate and best == worst

    def _verdict(self, others: list[_Trial], running: _Trial, *, best: bool) -> tuple[tuple[int, ...], bool]:
        """The candidates' order and the clear flag with `running`'s unsolved seeds at their best or worst."""
        from tune_runner.results import robust

        extreme = 1e300 if (self.spec.mode == "max") == best else -1e300
        target, evaluated = robust.target_of(self.spec), []
        for trial in sorted([*others, running], key=lambda t: t.candidate):
            runs = []
            for index, value in sorted(trial.values.items()):
                reached = trial.reached_at.get(index)
                if trial is running and reached is None:
                    value, reached = extreme, (trial.env_steps if best else None)
                runs.append(robust.SeedRun(index, value, reached))
            candidate = robust.Candidate(str(trial.candidate), {}, 0.0)
            evaluated.append(robust.summarise(candidate, runs, target=target))
        verdict = robust.rank(evaluated, mode=self.spec.mode, target=target)
        return tuple(int(e.candidate.trial_id) for e in verdict.ranked), verdict.clear
