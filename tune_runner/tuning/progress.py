"""The live view: one compact line per trial event, never a config dump.

    [00:41] a1b2c_00003 started     lr=1.2e-03 num_epochs=7
    [01:02] a1b2c_00003 50%         return 212.4  steps 25,000/50,000  sps 1,310
    [01:20] a1b2c_00003 stopped     return  88.0  steps 10,000/50,000  (early, by the scheduler)

A population trial (configs_per_trial, issue 43) shows its best member's numbers and, on the same line, how its
members stand: `members 3/4 alive, 2 stopped, 1 solved, 5 refilled` (tracking.members counts them).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from ray.tune import Callback

from tune_runner.results.analysis import fmt_config, fmt_value  # noqa: F401 - kept importable from here
from tune_runner.spec import reserved
from tune_runner.tracking.callback import last_error_line
from tune_runner.tracking.members import Turnover, fmt_counts, is_member_key


class LiveView(Callback):
    """Prints trial starts, progress at each quarter of the budget, and endings."""

    def __init__(self, *, searched: tuple[str, ...], budget: int, metric: str, mode: str = "max",
                 ending: Callable[[dict], str] | None = None, out: TextIO | None = None, milestones: int = 4,
                 heartbeat_s: float = 30.0) -> None:
        self.searched = searched
        self.budget = budget
        self.metric = metric
        self.mode = mode
        self.ending = ending or (lambda r: "done" if int(r.get("env_steps", 0)) >= budget else "stopped_early")
        self.milestones = milestones
        self.heartbeat_s = heartbeat_s
        self.out = out
        self._start = self._last_line = time.monotonic()
        self._seen: dict[str, int] = {}
        self._members: dict[str, Turnover] = {}  # population trials: trial id -> its members

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["out"] = None
        return state

    def _print(self, trial: Any, event: str, detail: str) -> None:
        self._emit(f"{trial.trial_id} {event:<10} {detail}")

    def _emit(self, text: str) -> None:
        now = time.monotonic()
        elapsed = int(now - self._start)
        print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {text}".rstrip(), file=self.out or sys.stdout, flush=True)
        self._last_line = now

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """After `heartbeat_s` of silence, one summary line: how many run, and the best so far."""
        if time.monotonic() - self._last_line < self.heartbeat_s:
            return
        counts: dict[str, int] = {}
        for trial in trials:
            counts[trial.status.lower()] = counts.get(trial.status.lower(), 0) + 1
        values = [t.last_result[self.metric] for t in trials
                  if isinstance((t.last_result or {}).get(self.metric), (int, float))
                  and t.last_result[self.metric] == t.last_result[self.metric]]
        best = (max if self.mode == "max" else min)(values) if values else None
        steps = sum(int((t.last_result or {}).get("env_steps", 0)) for t in trials)
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        members = ""
        if self._members:
            total: dict[str, int] = {}
            for turnover in self._members.values():
                for key, n in turnover.counts().items():
                    total[key] = total.get(key, 0) + n
            members = f"; {fmt_counts(total)}"
        self._emit(f"{'':11} {'...':<10} {summary}{members}; best {fmt_value(best) if best is not None else '-'}; "
                   f"{steps:,} env steps in all")

    def _progress(self, result: dict[str, Any], trial: Any = None) -> str:
        value = result.get(self.metric)
        steps = int(result.get("env_steps", 0))
        label = self.metric.removeprefix("episode_").removesuffix("_mean")
        text = f"{label} {fmt_value(value) if value is not None else '-':>7}"
        text += f"  steps {steps:,}/{self.budget:,}"
        if result.get("sps"):
            text += f"  sps {result['sps']:,.0f}"
        turnover = self._members.get(trial.trial_id) if trial is not None else None
        if turnover is not None:
            text += f"  {fmt_counts(turnover.counts(), size=_size(trial))}"
        return text

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        detail = fmt_config(trial.config, self.searched)
        first = len(((trial.config or {}).get(reserved.MEMBER_LIST_KEY) or {}).get("members") or ())
        if first:  # a population trial: its shared values above, each member's own in its runs
            detail = f"{detail}  {first} members".lstrip()
        self._print(trial, "started", detail)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if trial.trial_id in self._members or any(is_member_key(key) for key in result):
            self._members.setdefault(trial.trial_id, Turnover()).update(result, ending=self.ending)
        share = int(result.get("env_steps", 0)) * self.milestones // max(self.budget, 1)
        if 0 < share < self.milestones and share > self._seen.get(trial.trial_id, 0):
            self._seen[trial.trial_id] = share
            self._print(trial, f"{100 * share // self.milestones}%", self._progress(result, trial))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        result = trial.last_result or {}
        turnover = self._members.get(trial.trial_id)
        if turnover is not None:  # its members end with it; a trial ends when none is left, not stopped itself
            turnover.end_all(ending=self.ending)
            self._print(trial, "done", self._progress(result, trial))
            return
        ending = self.ending(result)
        event, note = {"solved": ("solved", "  (reached stop_at)"),
                       "stopped_early": ("stopped", "  (early, by the scheduler)")}.get(ending, ("done", ""))
        self._print(trial, event, self._progress(result) + note)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._print(trial, "ERROR", last_error_line(trial))


def _size(trial: Any) -> int | None:
    """A population trial's slots (configs_per_trial)."""
    size = (getattr(trial, "config", None) or {}).get(reserved.MEMBERS_KEY)
    return int(size) if isinstance(size, int) else None
