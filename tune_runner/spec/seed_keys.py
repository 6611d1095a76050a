"""Seeds per trial, as a space names them: K seeds of one config trained in one trial, judged by an aggregate.

A trial of `seeds_per_trial: K` reports each seed's metrics as `seed_<i>/<name>` and, under the plain
`<name>`, their aggregate (`seed_aggregate`), which is what schedulers, searchers, `stop_at` and the best
config judge: iqm (the interquartile mean, the default), mean, median or min. The arithmetic is
tune_runner.algos.seeds'; this module holds the names, so the spec checks them before anything is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

AGGREGATES = ("iqm", "mean", "median", "min")
DEFAULT_AGGREGATE = "iqm"
PREFIX = "seed_"  # seed i's metrics: seed_<i>/<name>
SEED_STRIDE = 1_000_000  # seed i of a config whose seed is s: s + SEED_STRIDE * i (tune_runner.algos.seeds)


def seed_key(index: int, name: str) -> str:
    """Seed `index`'s key for metric `name`."""
    return f"{PREFIX}{index}/{name}"


def per_seed(result: Mapping[str, Any], name: str) -> list[float]:
    """Seed 0, 1, ...'s values of metric `name` in one result (empty for a one-seed trial)."""
    values, index = [], 0
    while seed_key(index, name) in result:
        values.append(result[seed_key(index, name)])
        index += 1
    return values
