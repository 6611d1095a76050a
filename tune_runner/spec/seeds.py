"""Seeds per trial: K seeds of one config trained in one trial, judged by an aggregate of the K values.

A trial of `seeds_per_trial: K` reports each seed's metrics as `seed_<i>/<name>` and, under the plain
`<name>`, their aggregate (`seed_aggregate`), which is what schedulers, searchers, `stop_at` and the best
config judge. The aggregates:

    iqm     the interquartile mean: the mean after dropping floor(K / 4) values at each end (rliable's
            IQM, scipy.stats.trim_mean(values, 0.25)); for K < 4 that drops nothing: the mean
    mean    the mean of the K values
    median  the middle value (the mean of the two middle ones for an even K)
    min     the lowest value (the worst seed where higher is better)

Plain Python: the spec checks the names before anything heavy is imported, and the trial computes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

AGGREGATES = ("iqm", "mean", "median", "min")
DEFAULT_AGGREGATE = "iqm"
PREFIX = "seed_"  # seed i's metrics: seed_<i>/<name>


def seed_key(index: int, name: str) -> str:
    """Seed `index`'s key for metric `name`."""
    return f"{PREFIX}{index}/{name}"


def aggregate(values: Iterable[float], how: str = DEFAULT_AGGREGATE) -> float:
    """The aggregate `how` of the finite values; NaN when none is finite."""
    kept = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if not kept:
        return math.nan
    if how == "min":
        return float(kept[0])
    if how == "median":
        middle = len(kept) // 2
        return float(kept[middle]) if len(kept) % 2 else (kept[middle - 1] + kept[middle]) / 2
    if how == "iqm":
        cut = len(kept) // 4
        kept = kept[cut:len(kept) - cut]
    elif how != "mean":
        raise ValueError(f"seed_aggregate {how!r}: one of {', '.join(AGGREGATES)}")
    return math.fsum(kept) / len(kept)


def per_seed(result: Mapping[str, Any], name: str) -> list[float]:
    """Seed 0, 1, ...'s values of metric `name` in one result (empty for a one-seed trial)."""
    values, index = [], 0
    while seed_key(index, name) in result:
        values.append(result[seed_key(index, name)])
        index += 1
    return values


def with_aggregates(result: Mapping[str, Any], how: str) -> dict[str, Any]:
    """`result` with every per-seed numeric metric's aggregate under its plain name (replacing any there)."""
    names = {key.partition("/")[2] for key in result if key.startswith(f"{PREFIX}0/")}
    out = dict(result)
    for name in sorted(names):
        values = per_seed(result, name)
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[name] = aggregate(values, how)
    return out
