"""A population trial's members as the driver sees them come and go in the trial's results (issue 43), for the
MLflow runs of members (tracking.callback) and the live view's member counts (tuning.progress).

Each report names every live slot's member (`member_<j>/id`, tune_runner.trainables.members); a member that is in
one report and not in the next has ended: the scheduler stopped it, it solved, or it reached its budget (its
slot then idles or trains a fresh member). How it ended is read from its last row as a trial's ending is from its
last result (`ExperimentSpec.ending`). Nothing here imports Ray or MLflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tune_runner.spec.seed_keys import CONFIG_PART, ID_PART, MEMBER_COUNTS, member_metrics, member_slot, members_of

# Member endings as the live view counts them (ExperimentSpec.ending's words), in the order it shows them.
ENDINGS = {"stopped_early": "stopped", "solved": "solved", "done": "done"}


@dataclass
class Member:
    """One member while its trial reports it: its slot, its values, its latest own metrics."""

    id: str
    slot: int
    values: dict[str, Any]
    last: dict[str, Any] = field(default_factory=dict)
    reports: int = 0  # the trial's reports that carried it (since this driver saw it first)


class Turnover:
    """One population trial's live members, updated from each of its results: who started, who ended."""

    def __init__(self) -> None:
        self.live: dict[str, Member] = {}
        self.refilled = 0  # the trial's own count (members_refilled), which survives a resume
        self.endings: dict[str, int] = {}

    def update(self, result: Mapping[str, Any], *, ending: Callable[[dict], str]) -> tuple[list[Member], list[Member]]:
        """The members that started and those that ended at this result (these with their last rows)."""
        rows = members_of(result)
        now = {row[ID_PART]: (slot, row) for slot, row in rows.items()}
        ended = [self.live.pop(member) for member in list(self.live) if member not in now]
        started = []
        for member, (slot, row) in now.items():
            if member not in self.live:
                self.live[member] = Member(member, slot, dict(row[CONFIG_PART]))
                started.append(self.live[member])
            self.live[member].last = member_metrics(row)
            self.live[member].reports += 1
        if isinstance(result.get(MEMBER_COUNTS[1]), int):
            self.refilled = result[MEMBER_COUNTS[1]]
        self._count(ended, ending)
        return started, ended

    def end_all(self, *, ending: Callable[[dict], str]) -> list[Member]:
        """Every live member, ended with its trial."""
        ended = list(self.live.values())
        self.live.clear()
        self._count(ended, ending)
        return ended

    def _count(self, ended: list[Member], ending: Callable[[dict], str]) -> None:
        for member in ended:
            how = ending(member.last)
            self.endings[how] = self.endings.get(how, 0) + 1

    def counts(self) -> dict[str, int]:
        """alive, stopped, solved, done and refilled, for the live view."""
        return {"alive": len(self.live), **{word: self.endings.get(how, 0) for how, word in ENDINGS.items()},
                "refilled": self.refilled}


def is_member_key(key: str) -> bool:
    """Whether a result key is one slot's (`member_<j>/...`): the member's run holds it, not the trial's."""
    return member_slot(key) is not None


def fmt_counts(counts: Mapping[str, int], *, size: int | None = None) -> str:
    """`members 3/4 alive, 2 stopped, 1 solved, 5 refilled`: the counts that are not zero, alive always."""
    alive = f"{counts.get('alive', 0)}/{size}" if size else str(counts.get("alive", 0))
    rest = [f"{counts[word]} {word}" for word in (*ENDINGS.values(), "refilled") if counts.get(word)]
    return ", ".join([f"members {alive} alive", *rest])
