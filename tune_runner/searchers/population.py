"""The population searcher (issue 43): the space's searcher fills population trials, B configs a trial, and hears
each member's results as that config's own; the member is the unit of search, the trial the unit of compute.

Searched keys split in two. *Member keys* (the learner's population keys: lr, gamma, lambda, clip_param, ...) vary
per member; every other searched key changes shapes (network size, batch size, num_envs ...) and is one value
per trial, shared by its members. How B configs come to share those values depends on the searcher:

- `random`: the trial-level values are drawn once per trial, the member values per member: random draws are
  independent, so that is a random search over whole configs.
- `grid`: the grid's points are grouped by their trial-level values; a trial takes up to B points of one group.
- `optuna`: the first member is asked as any trial is; each further member is asked with the trial-level values
  fixed (Optuna's `enqueue_trial` with those parameters: its sampler draws the rest given them), so the study
  holds one trial per config, with that config's values and result.
- `hyperopt`, `nevergrad`: no way to fix some values of a suggestion; they take spaces of member keys only.
- `smac`, `bohb` plan a budget per config themselves: refused with the reason (tuning/population.py).

Each member's results go to the searcher under the member's own id, as a trial's would. Members are judged by
the space's scheduler (asha, median): the Tune scheduler object itself, fed each member as a trial of its own,
so a member is stopped exactly where that scheduler would stop a one-config trial with the same results in the
same order. A stopped, solved or finished member hands its slot at once to a fresh config (`refill`), until
`num_samples` configs have started; the trial learns of it through the board (trainables/members.py).
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ray.tune.search import Searcher

from tune_runner.spec import reserved
from tune_runner.spec.seed_keys import CONFIG_PART, ID_PART, member_metrics, members_of


@dataclass(frozen=True)
class MemberTrial:
    """A member as schedulers see a trial: its id (hashable; the median rule keys its results by it)."""

    trial_id: str


class _NoController:
    """What the median stopping rule asks of Tune's controller: the trials waiting (none: a member never waits)."""

    def get_live_trials(self) -> list:
        return []


@dataclass
class MemberRecord:
    """One config of the search, trained as a member of a population trial."""

    id: str
    trial: str
    slot: int
    values: dict[str, Any]
    last: dict[str, Any] = field(default_factory=dict)
    ending: str | None = None  # None while it trains; done, solved, stopped_early or errored


class Source:
    """Whole configs for members, from the space's searcher: `draw` one (given the trial-level values its trial
    shares, None for a trial's first), `tell` it a member's result."""

    def set_space(self, metric: str, mode: str, space: dict) -> None:
        pass

    def draw(self, member: str, shared: Mapping[str, Any] | None) -> dict[str, Any] | None:
        raise NotImplementedError

    def tell(self, member: str, result: Mapping[str, Any], *, final: bool, error: bool = False) -> None:
        pass


class RandomSource(Source):
    """Random draws from Tune's domains, the given points first."""

    def __init__(self, *, seed: int | None, points: Sequence[Mapping[str, Any]] = ()) -> None:
        import numpy as np

        self.rng = np.random.RandomState(seed)
        self.points = [dict(p) for p in points]
        self.domains: dict[str, Any] = {}

    def set_space(self, metric: str, mode: str, space: dict) -> None:
        from ray.tune.search.sample import Domain

        self.domains = {k: v for k, v in space.items() if isinstance(v, Domain)}

    def draw(self, member: str, shared: Mapping[str, Any] | None) -> dict[str, Any] | None:
        point = self.points.pop(0) if self.points else {}
        config = {key: point[key] if key in point else domain.sample(random_state=self.rng)
                  for key, domain in self.domains.items()}
        return {**config, **(shared or {})}


class GridSource(Source):
    """Every grid point (num_samples times over), a trial's members taken from one group of trial-level values."""

    def __init__(self, *, repeats: int, trial_level: Callable[[Mapping[str, Any]], dict]) -> None:
        self.repeats, self.trial_level = repeats, trial_level
        self.points: list[dict[str, Any]] = []

    def set_space(self, metric: str, mode: str, space: dict) -> None:
        axes = {k: v["grid_search"] for k, v in space.items() if isinstance(v, dict) and "grid_search" in v}
        keys = list(axes)
        points = [dict(zip(keys, values, strict=True)) for values in itertools.product(*axes.values())]
        self.points = [dict(p) for _ in range(self.repeats) for p in points]

    def draw(self, member: str, shared: Mapping[str, Any] | None) -> dict[str, Any] | None:
        for i, point in enumerate(self.points):
            if shared is None or self.trial_level(point) == dict(shared):
                return self.points.pop(i)
        return None


class SearcherSource(Source):
    """A Ray Tune Searcher asked once per member; Optuna's with the trial-level values fixed."""

    def __init__(self, searcher: Any, *, fixes: bool) -> None:
        self.searcher, self.fixes = searcher, fixes

    def set_space(self, metric: str, mode: str, space: dict) -> None:
        self.searcher.set_search_properties(metric, mode, space)

    def draw(self, member: str, shared: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if shared and self.fixes:
            self.searcher._ot_study.enqueue_trial(dict(shared), skip_if_exists=False)  # noqa: SLF001 - Optuna's study
        config = self.searcher.suggest(member)
        if config is None or config == Searcher.FINISHED:
            return None
        return dict(config)

    def tell(self, member: str, result: Mapping[str, Any], *, final: bool, error: bool = False) -> None:
        if final:
            self.searcher.on_trial_complete(member, result=None if error else dict(result), error=error)
        else:
            self.searcher.on_trial_result(member, dict(result))


class PopulationSearcher(Searcher):
    """Tune's searcher for a search of population trials: suggests trials of B members, routes each member's
    results to the space's searcher and scheduler, refills the slots of ended members through the board."""

    def __init__(self, source: Source, *, size: int, num_configs: int, member_keys: Sequence[str],
                 space: dict, refill: bool, budget: int, reached: Callable[[dict], bool],
                 scheduler: Any = None, time_attr: str = "env_steps", metric: str, mode: str,
                 board: str, concurrent: int | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        self.source, self.size, self.num_configs = source, size, num_configs
        self.member_keys, self.space, self.refill = tuple(member_keys), space, refill
        self.budget, self.reached, self.scheduler, self.time_attr = budget, reached, scheduler, time_attr
        self.board_name, self.concurrent = board, concurrent
        self.members: dict[str, MemberRecord] = {}
        self.trials: dict[str, dict[str, Any]] = {}  # trial id -> {"shared": ..., "slots": [member id | None]}
        self.started = 0
        self.exhausted = False
        self._board: Any = None
        self._space_set = False

    # ---- Tune's Searcher interface -----------------------------------------------------------------

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        self._metric, self._mode = metric or self._metric, mode or self._mode
        self._set_space()
        return True

    def _set_space(self) -> None:
        if not self._space_set:
            self.source.set_space(self._metric, self._mode, self.space)
            if self.scheduler is not None:
                self.scheduler.set_search_properties(self._metric, self._mode)
            self._space_set = True

    def suggest(self, trial_id: str) -> dict | None:
        self._set_space()
        self.board()  # before the trial looks it up
        if self.started >= self.num_configs or self.exhausted:
            return Searcher.FINISHED
        live = sum(1 for t in self.trials.values() if any(t["slots"]))
        if self.refill and self.concurrent is not None and live >= self.concurrent:
            return None  # its slots will be refilled: no more trials than run at once
        shared, first = None, []
        for slot in range(self.size):
            drawn = self._draw(trial_id, slot, shared)
            if drawn is None:
                break
            record, config = drawn
            if shared is None:
                shared = self._trial_level(config)
            first.append({"id": record.id, "values": record.values})
            if self.started >= self.num_configs:
                break
        if not first:
            self.exhausted = True
            return Searcher.FINISHED
        slots = [m["id"] for m in first] + [None] * (self.size - len(first))
        self.trials[trial_id] = {"shared": shared, "slots": slots, "drawn": len(first)}
        return {**(shared or {}), reserved.BOARD_KEY: self.board_name,
                reserved.MEMBER_LIST_KEY: {"members": first, "metric": self._metric, "mode": self._mode}}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        trial = self.trials.get(trial_id)
        if trial is None:
            return
        for slot, row in members_of(result).items():
            record = self.members.get(row[ID_PART])
            if record is None or record.ending is not None:
                continue
            record.last = self._member_result(row, result)
            ending = self._judge(record)
            if ending is None:
                self.source.tell(record.id, record.last, final=False)
                continue
            self._end(record, ending)
            trial["slots"][slot] = self._refill(trial_id, trial, slot)
        self._post(trial_id, int(result.get("training_iteration", 0)), trial)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        trial = self.trials.get(trial_id)
        if trial is None:
            return
        for slot, member in enumerate(trial["slots"]):
            record = self.members.get(member) if member else None
            if record is not None and record.ending is None:
                self._end(record, "errored" if error else "done")
            trial["slots"][slot] = None

    def save(self, checkpoint_path: str) -> None:
        state = {k: v for k, v in self.__dict__.items() if k != "_board"}
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))  # noqa: S301 - our own searcher state
        self._board = None
        for trial_id, trial in self.trials.items():  # a resumed trial waits for the word on its last report
            if any(trial["slots"]) and trial.get("report"):
                self._post(trial_id, trial["report"], trial)

    # ---- members ---------------------------------------------------------------------------------

    def _trial_level(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k not in self.member_keys}

    def _draw(self, trial_id: str, slot: int, shared: Mapping[str, Any] | None) -> tuple[MemberRecord, dict] | None:
        if self.started >= self.num_configs:
            return None
        trial = self.trials.get(trial_id)
        number = trial["drawn"] if trial else slot
        member = f"{trial_id}-{number}"
        config = self.source.draw(member, shared)
        if config is None:
            return None
        if trial:
            trial["drawn"] += 1
        self.started += 1
        values = {k: v for k, v in config.items() if k in self.member_keys}
        record = MemberRecord(member, trial_id, slot, values)
        self.members[member] = record
        if self.scheduler is not None:
            self.scheduler.on_trial_add(None, MemberTrial(member))
        return record, config

    def _member_result(self, row: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
        """A member's report as a one-config trial's: its own metrics under the plain names, its config."""
        config = {**(result.get("config") or {}), **row[CONFIG_PART]}
        return {**member_metrics(row), "training_iteration": result.get("training_iteration"), "config": config}

    def _judge(self, record: MemberRecord) -> str | None:
        """How the member ends at this result (None: it trains on)."""
        last = record.last
        if self.reached(last):
            return "solved"
        if int(last.get("env_steps", 0) or 0) >= self.budget:
            return "done"
        if self.scheduler is not None and self.time_attr in last and self._metric in last:
            action = self.scheduler.on_trial_result(_NoController(), MemberTrial(record.id), last)
            if action in ("STOP", "PAUSE"):
                return "stopped_early"
        return None

    def _end(self, record: MemberRecord, ending: str) -> None:
        record.ending = ending
        error = ending == "errored"
        self.source.tell(record.id, record.last, final=True, error=error or not record.last)
        if self.scheduler is not None and ending != "stopped_early" and record.last and not error:
            self.scheduler.on_trial_complete(None, MemberTrial(record.id), record.last)

    def _refill(self, trial_id: str, trial: dict, slot: int) -> str | None:
        if not self.refill:
            return None
        drawn = self._draw(trial_id, slot, trial["shared"])
        return drawn[0].id if drawn else None

    def _post(self, trial_id: str, report: int, trial: dict) -> None:
        """The word for the trial's report `report`: per slot its member and values, or None."""
        trial["report"] = report
        slots = [None if m is None else {"id": m, "values": self.members[m].values} for m in trial["slots"]]
        from tune_runner.trainables.members import Board

        board = self.board()
        if isinstance(board, Board):  # in-process (tests)
            board.post(trial_id, report, slots)
        elif board is not None:
            board.post.remote(trial_id, report, slots)

    def board(self) -> Any:
        """The search's board actor (created on first use: prepare runs before Ray)."""
        if self._board is None:
            import ray

            if not ray.is_initialized():
                return None
            from tune_runner.trainables.members import board_actor

            self._board = board_actor(self.board_name)
        return self._board

    def endings(self) -> dict[str, int]:
        """How many members ended how (and `running`)."""
        counts: dict[str, int] = {}
        for record in self.members.values():
            counts[record.ending or "running"] = counts.get(record.ending or "running", 0) + 1
        return counts
