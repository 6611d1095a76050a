"""A population trial, its side (issue 43): `configs_per_trial: B` configs of the searcher trained in one trial
as one batched learner of B x K seeds (K: seeds_per_trial), each config a *member* in a *slot*.

The population searcher on the driver (tune_runner.searchers.population) chooses every slot's member: the first
ones come in the trial's config (`tune_rl_members`), later ones through the search's board, a Ray actor
(`Board`) both sides reach by name. After each report the trial waits for the board's word on that report: per
slot, the member to train next: the same one, a fresh one (its K seeds start over: `replace_member`), or none
(the slot idles; its seeds train on unreported, so the batch keeps its shape). A trial whose slots all idle
ends (`done`).

Each report carries, per slot j, the member's id, its values and its metrics (the aggregate over its K seeds) as
`member_<j>/...` (tune_runner.spec.seed_keys.member_key); under the plain names, the best member's, for what
judges whole trials (the live view, Tune's own sort). Light on purpose: Ray is imported where the board is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tune_runner.spec import reserved
from tune_runner.spec.seed_keys import (
    BATCH_STEPS,
    CONFIG_PART,
    ID_PART,
    MEMBER_COUNTS,
    MEMBER_PREFIX,
    member_key,
)

BOARD_WAIT_S = 600.0  # the longest a trial waits for the driver's word on one report before it trains on as it is


@dataclass
class Slot:
    """One slot of the batch: the member it trains (None: idle) and that member's values."""

    member: str | None
    values: dict[str, Any] = field(default_factory=dict)


class Members:
    """A population trial's slots, what each reports, and what the board says of them."""

    def __init__(self, config: Mapping[str, Any], *, trial_id: str | None = None) -> None:
        self.size = int(config[reserved.MEMBERS_KEY])
        self.seeds = int(config.get(reserved.SEEDS_KEY, 1) or 1)
        self.how = config.get(reserved.AGGREGATE_KEY) or "iqm"
        listing = config.get(reserved.MEMBER_LIST_KEY) or {}
        first = list(listing.get("members") or ())
        self.metric, self.mode = listing.get("metric", "episode_return_mean"), listing.get("mode", "max")
        # A re-evaluation's trial (tuning/reevaluate.py) also reports every seed's metric and episodes as
        # `seed_<i>/<name>`: it ranks members by their seeds, where a search judges a member by its aggregate.
        self.per_seed = bool(listing.get("per_seed"))
        if not first:
            raise ValueError(f"{reserved.MEMBERS_KEY}: a population trial needs its members from the population "
                             f"searcher ({reserved.MEMBER_LIST_KEY} is empty)")
        self.slots = [Slot(m["id"], dict(m["values"])) for m in first[:self.size]]
        self.slots += [Slot(None, dict(first[0]["values"])) for _ in range(self.size - len(self.slots))]
        self.board_name = config.get(reserved.BOARD_KEY)
        self.trial_id = trial_id
        self.reports = 0
        self.refilled = 0
        self.seed_steps: dict[int, int] = {}  # each seed's env steps at the latest report
        self.retired_steps = 0  # the env steps of the members refilled away
        self.last: dict[str, Any] = {}  # the latest report
        self.board: Any = None  # the Board actor (or, in tests, a Board itself)

    @property
    def num_seeds(self) -> int:
        return self.size * self.seeds

    def population(self) -> dict[str, list[Any]]:
        """The learner's `population`: each slot's values, once per seed of the slot."""
        keys = sorted({key for slot in self.slots for key in slot.values})
        return {key: [slot.values[key] for slot in self.slots for _ in range(self.seeds)] for key in keys}

    def seeds_of(self, slot: int) -> range:
        return range(slot * self.seeds, (slot + 1) * self.seeds)

    @property
    def alive(self) -> int:
        return sum(slot.member is not None for slot in self.slots)

    # ---- what a report says ----------------------------------------------------------------------

    def result(self, seeds_result: Mapping[str, Any]) -> dict[str, Any]:
        """The trial's report from a learner result of B x K seeds (`seed_<i>/<name>`): each live slot's member
        (id, values, metrics), the plain names the best member's, and the counts."""
        from tune_runner.algos.seeds import seed_metrics, split_seeds

        metric, mode = self.metric, self.mode
        per_seed = split_seeds(seeds_result)
        self.seed_steps = {i: int(row.get("env_steps", 0) or 0) for i, row in per_seed.items()}
        kept = (metric, "episodes") if self.per_seed else ()
        out: dict[str, Any] = {k: v for k, v in seeds_result.items()
                               if not k.startswith("seed_") or k.partition("/")[2] in kept}
        best: tuple[float, dict[str, Any]] | None = None
        for j, slot in enumerate(self.slots):
            if slot.member is None:
                continue
            rows = [per_seed.get(i, {}) for i in self.seeds_of(j)]
            metrics = rows[0] if self.seeds == 1 else seed_metrics(rows, how=self.how)
            metrics = {name: value for name, value in metrics.items() if "/" not in name}
            out.update({member_key(j, name): value for name, value in metrics.items()})
            out[member_key(j, ID_PART)] = slot.member
            out.update({member_key(j, f"{CONFIG_PART}/{key}"): value for key, value in slot.values.items()})
            value = metrics.get(metric)
            if isinstance(value, (int, float)) and not math.isnan(value):
                signed = value if mode == "max" else -value
                if best is None or signed > best[0]:
                    best = (signed, metrics)
        if best is not None:
            out.update(best[1])
        out.update({MEMBER_COUNTS[0]: self.alive, MEMBER_COUNTS[1]: self.refilled,
                    BATCH_STEPS: self.retired_steps + sum(self.seed_steps.values())})
        self.reports += 1
        self.last = out
        return out

    def final(self) -> dict[str, Any]:
        """The report of a trial whose slots all idle: its last plain numbers, no member, done."""
        last = {k: v for k, v in self.last.items() if not k.startswith(MEMBER_PREFIX)}
        return {**last, MEMBER_COUNTS[0]: 0, MEMBER_COUNTS[1]: self.refilled, "done": True}

    # ---- the board's word ----------------------------------------------------------------------

    def connect(self) -> None:
        """Find the search's board (a named Ray actor); none outside Ray or for a trial without one."""
        if self.board is not None or not self.board_name:
            return
        import ray

        if ray.is_initialized():
            self.board = ray.get_actor(self.board_name, namespace=BOARD_NAMESPACE)

    def orders(self) -> list[dict | None] | None:
        """The board's word on this trial's latest report (None: no board, or no word in time)."""
        if self.reports == 0:
            return None
        self.connect()
        if self.board is None:
            return None
        if isinstance(self.board, Board):  # in-process (tests)
            return self.board.now(self.trial_id, self.reports)
        import ray

        return ray.get(self.board.take.remote(self.trial_id, self.reports, BOARD_WAIT_S))

    def apply(self, orders: list[dict | None] | None, replace: Callable[[int, dict[str, Any]], None]) -> bool:
        """Follow the board's word: a slot whose member changes starts its seeds over with the new values
        (`replace(seed, values)` for each of its seeds); a slot told none idles. Whether any slot is still live."""
        if orders is not None:
            for j, order in enumerate(orders[:self.size]):
                slot = self.slots[j]
                if order is None:
                    slot.member = None
                elif order["id"] != slot.member:
                    slot.member, slot.values = order["id"], dict(order["values"])
                    for seed in self.seeds_of(j):
                        replace(seed, slot.values)
                        self.retired_steps += self.seed_steps.pop(seed, 0)
                    self.refilled += 1
        return self.alive > 0

    def get_state(self) -> dict[str, Any]:
        return {"slots": [(s.member, dict(s.values)) for s in self.slots], "reports": self.reports,
                "refilled": self.refilled, "seed_steps": dict(self.seed_steps), "retired_steps": self.retired_steps}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.slots = [Slot(member, dict(values)) for member, values in state["slots"]]
        self.reports, self.refilled = int(state["reports"]), int(state["refilled"])
        self.seed_steps = {int(i): int(n) for i, n in state.get("seed_steps", {}).items()}
        self.retired_steps = int(state.get("retired_steps", 0))


BOARD_NAMESPACE = "tune_rl"


class Board:
    """What the driver says each population trial's slots train next, per report: the driver `post`s its word
    on report n of a trial, the trial `take`s it (waiting until it is there). Ray runs it as an async actor
    (`board_actor`); in tests it is used as it is (`now`)."""

    def __init__(self) -> None:
        self.words: dict[str, tuple[int, list]] = {}
        self._events: dict[str, Any] = {}

    def post(self, trial_id: str, report: int, slots: list) -> None:
        self.words[trial_id] = (report, slots)
        event = self._events.get(trial_id)
        if event is not None:
            event.set()

    def now(self, trial_id: str, report: int) -> list | None:
        word = self.words.get(trial_id)
        return word[1] if word is not None and word[0] >= report else None

    async def take(self, trial_id: str, report: int, timeout: float) -> list | None:
        import asyncio

        loop_end = asyncio.get_running_loop().time() + timeout
        while True:
            word = self.now(trial_id, report)
            left = loop_end - asyncio.get_running_loop().time()
            if word is not None or left <= 0:
                return word
            event = self._events.setdefault(trial_id, asyncio.Event())
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), timeout=left)
            except asyncio.TimeoutError:
                return self.now(trial_id, report)


def board_actor(name: str) -> Any:
    """The search's board as a named Ray actor (one per search; no CPU: it only passes words on)."""
    import ray

    return ray.remote(num_cpus=0, max_concurrency=1000)(Board).options(
        name=name, namespace=BOARD_NAMESPACE, get_if_exists=True, lifetime=None).remote()
