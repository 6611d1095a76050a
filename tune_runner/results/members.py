"""A population search read as the configs it tried (issue 43): each member of a population trial becomes a trial
record of its own, so that what reads trials (best, export, the re-evaluation, report, the API) reads configs.

A member's record: id `<trial id>-<n>`, its trial's config with the member's values (and the seed its first slot
trained with, so `train --config` of it trains as the member did), its own history (the `member_<j>/...` values
of the reports while it held slot j, under plain names), and Tune's summary of each metric over that history. Its
status is its trial's while it still held a slot at the trial's last report, else TERMINATED. Only a member still
in its slot at the end is in its trial's last checkpoint, and a checkpoint holds the whole batch: a member's record
names no trial folder, so nothing reads a policy of another member for it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tune_runner.spec import reserved
from tune_runner.spec.seed_keys import CONFIG_PART, ID_PART, member_metrics, member_seed, members_of


def is_population(trial: Any) -> bool:
    return bool((getattr(trial, "config", None) or {}).get(reserved.MEMBERS_KEY))


def expand(analysis: Any) -> Any:
    """`analysis` (ours or Ray's ExperimentAnalysis) with every population trial replaced by its members, as
    tune_runner.results.trials.Results; `analysis` itself when it holds none."""
    from tune_runner.results.trials import Results, TrialRecord, _read_history

    if not any(is_population(t) for t in analysis.trials):
        return analysis
    records, histories = [], {}
    for trial in analysis.trials:
        rows = analysis.rows(trial.trial_id) if hasattr(analysis, "rows") else _read_history(Path(trial.path))
        if not is_population(trial):
            records.append(_record_of(trial))
            histories[trial.trial_id] = rows
            continue
        for member, (config, history, in_slot) in _members(trial, rows).items():
            status = trial.status if in_slot else "TERMINATED"
            records.append(TrialRecord(trial_id=member, status=status, config=config,
                                       last_result={**history[-1], "trial_id": member}, path="",
                                       metric_analysis=summary(history)))
            histories[member] = history
    return Results(Path(getattr(analysis, "path", None) or getattr(analysis, "experiment_path", "")), records,
                   histories)


def _record_of(trial: Any) -> Any:
    from tune_runner.results.trials import TrialRecord

    return TrialRecord(trial_id=trial.trial_id, status=trial.status, config=dict(trial.config),
                       last_result=dict(trial.last_result or {}), path=str(trial.path),
                       metric_analysis=dict(getattr(trial, "metric_analysis", {}) or {}))


def _members(trial: Any, rows: list[dict]) -> dict[str, tuple[dict, list[dict], bool]]:
    """member id -> (its config, its history, whether it held a slot at the trial's last report)."""
    base = {k: v for k, v in trial.config.items()
            if k not in (reserved.MEMBERS_KEY, reserved.MEMBER_LIST_KEY, reserved.BOARD_KEY)}
    out: dict[str, tuple[dict, list[dict], bool]] = {}
    last_ids: set[str] = set()
    for row in rows:
        slots = members_of(row)
        if slots:
            last_ids = {values[ID_PART] for values in slots.values()}
        for slot, values in slots.items():
            member = values[ID_PART]
            if member not in out:
                config = {**base, **values[CONFIG_PART], "seed": member_seed(trial.config, slot)}
                out[member] = (config, [], False)
            history = out[member][1]
            history.append({**member_metrics(values), "training_iteration": len(history) + 1,
                            "time_total_s": row.get("time_total_s"), "timestamp": row.get("timestamp")})
    return {m: (c, h, m in last_ids) for m, (c, h, _) in out.items()}


def summary(history: list[dict]) -> dict[str, dict[str, float]]:
    """Tune's `metric_analysis` of one history: each numeric metric's max, min, avg, last, last-5-avg and
    last-10-avg."""
    out: dict[str, dict[str, float]] = {}
    names = {k for row in history for k, v in row.items() if _number(v)}
    for name in names:
        values = [float(row[name]) for row in history if _number(row.get(name))]
        if not values:
            continue
        out[name] = {"max": max(values), "min": min(values), "avg": sum(values) / len(values), "last": values[-1],
                     "last-5-avg": _mean(values[-5:]), "last-10-avg": _mean(values[-10:])}
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
