"""Seeds per trial, as a space names them: K seeds of one config trained in one trial, judged by an aggregate.

A trial of `seeds_per_trial: K` reports each seed's metrics as `seed_<i>/<name>` and, under the plain
`<name>`, their aggregate (`seed_aggregate`), which is what schedulers, searchers, `stop_at` and the best
config judge: iqm (the interquartile mean, the default), mean, median or min. The arithmetic is
tune_runner.algos.seeds'; this module holds the names, so the spec checks them before anything is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tune_runner.spec import reserved

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


# A population trial (configs_per_trial) reports slot j's member as `member_<j>/<name>`: its id, its values
# (`member_<j>/config/<key>`) and its metrics, the aggregate over its seeds (tune_runner.trainables.members).
MEMBER_PREFIX = "member_"
ID_PART, CONFIG_PART = "id", "config"
MEMBER_COUNTS = ("members_alive", "members_refilled")
# A population trial's compute: the env steps of all its seeds, of every member it trained (refilled ones too)
BATCH_STEPS = "batch_env_steps"


def member_key(slot: int, name: str) -> str:
    """Slot `slot`'s key for `name` (a metric, ID_PART, or CONFIG_PART/<key>)."""
    return f"{MEMBER_PREFIX}{slot}/{name}"


def member_slot(key: str) -> int | None:
    """The slot j of a result key `member_<j>/...`; None for any other key."""
    head, slash, _ = key.partition("/")
    digits = head[len(MEMBER_PREFIX):]
    return int(digits) if slash and head.startswith(MEMBER_PREFIX) and digits.isdigit() else None


def members_of(result: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """A population trial's report as {slot: {name: value}} (its config under CONFIG_PART, a dict); {} for
    another trial's."""
    slots: dict[int, dict[str, Any]] = {}
    for key, value in result.items():
        slot = member_slot(key)
        if slot is None:
            continue
        name = key.partition("/")[2]
        row = slots.setdefault(slot, {CONFIG_PART: {}})
        part, slash, rest = name.partition("/")
        if part == CONFIG_PART and slash:
            row[CONFIG_PART][rest] = value
        else:
            row[name] = value
    return {slot: row for slot, row in slots.items() if row.get(ID_PART)}


def member_metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    """A member's row of one report (members_of) without its id and values: its metrics under plain names."""
    return {k: v for k, v in row.items() if k not in (ID_PART, CONFIG_PART)}


def member_seed(config: Mapping[str, Any], slot: int) -> int:
    """The first seed of the member in `slot` of a population trial of `config`: the trial's seed plus
    SEED_STRIDE times the seeds of the slots before it (tune_runner.algos.seeds numbers a batch's seeds so)."""
    seeds = int(config.get(reserved.SEEDS_KEY, 1) or 1)
    return int(config.get("seed", 0) or 0) + SEED_STRIDE * slot * seeds
