"""Trainables by name: `backend(name)` resolves a name to its record (tune_runner.trainables.backends).

Our own learners are made from their records (tune_runner.algos.records) and the oracles are registered here;
a user's agent is whatever `@register_agent` put in tune_runner.plugins.AGENTS; `rllib/<ALGO>` is any algorithm
RLlib registers, made by the factory registered under its prefix.

Importing this module loads neither Ray nor torch: the checks that refuse a search before Ray
starts read it (`backend_before_ray`). The RLlib trainable, a Ray Tune class, lives in
tune_runner.trainables.rllib.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tune_runner.algos.config import PPO_POPULATION
from tune_runner.algos.records import LEARNERS, LearnerRecord, member_keys, ours
from tune_runner.errors import UserError, unknown_name
from tune_runner.registry import Registry
from tune_runner.trainables.backends import (
    ORACLE_CLASSES,
    ORACLE_REPORTS,
    RLLIB_ACTIONS,
    RLLIB_PREFIX,
    AgentBackend,
    Backend,
    OracleBackend,
    OwnBackend,
    RLlibBackend,
    Trains,
)

ORACLES = tuple(ORACLE_CLASSES)
BACKENDS: Registry[Backend] = Registry("trainable")  # the oracles; ours are their records' (own_backend)
ORACLE_MEMBER_KEYS = member_keys(PPO_POPULATION)  # the oracle's population takes PPO's: the others stay trial-level
for _name in ORACLES:
    BACKENDS.register(_name, OracleBackend(name=_name, reports=ORACLE_REPORTS, trains=None,
                                           can_checkpoint=_name != "oracle/stateless",
                                           member_keys=() if _name == "oracle/stateless" else ORACLE_MEMBER_KEYS))


@functools.cache
def own_backend(record: LearnerRecord) -> OwnBackend:
    """The trainable of our learner `record`: what its record says (its spaces and settings: no torch)."""
    return OwnBackend(name=record.name, reports=record.reports, can_checkpoint=True, seeds=record.seeds,
                      trains=Trains(record.action_spaces, record.observation_spaces, masks=record.masks,
                                    from_zero=True),
                      member_keys=record.member_keys, replay=record.replay)


def our_backends() -> list[OwnBackend]:
    """The trainables of our learners, the first registered (the most used) first."""
    return [own_backend(LEARNERS.get(name)) for name in ours()]


def _known(name: str) -> bool:
    """Whether `name` is ours or an oracle (a name no user's agent can take)."""
    return name in LEARNERS or name in BACKENDS


def rllib_algorithms() -> list[str]:
    """The algorithm names RLlib registers (PPO, DQN, SAC, ...)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    return sorted(ALGORITHMS)


def rllib_backend(name: str) -> RLlibBackend:
    """`rllib/PPO` → the record of RLlib's PPO, with a did-you-mean answer for a name RLlib lacks."""
    algo = name[len(RLLIB_PREFIX):]
    known = rllib_algorithms()
    if algo in known:
        return RLlibBackend.of(algo)
    upper = {algo.upper(): algo for algo in known}
    if algo.upper() in upper:
        raise UserError(f"unknown trainable {name!r}; did you mean "
                        f"{RLLIB_PREFIX + upper[algo.upper()]!r}? (names are case-sensitive)")
    raise UserError(unknown_name("trainable", name, trainable_names()))


FAMILIES: dict[str, Callable[[str], Backend]] = {RLLIB_PREFIX: rllib_backend}  # prefix -> factory


def backend(name: str) -> Backend:
    """The record of trainable `name`; an unknown name is a UserError with the choices and the closest."""
    from tune_runner.plugins import AGENTS

    if name in LEARNERS:
        return own_backend(LEARNERS.get(name))
    if name in BACKENDS:
        return BACKENDS.get(name)
    if name in AGENTS:
        return AgentBackend.of(name)
    if _known(name.lower()):
        raise UserError(f"unknown trainable {name!r}; did you mean {name.lower()!r}?")
    for prefix, factory in FAMILIES.items():
        if name.startswith(prefix):
            return factory(name)
    raise UserError(unknown_name("trainable", name, trainable_names()))


def backend_before_ray(name: str) -> Backend | None:
    """`backend(name)` where no Ray is needed to tell it; None for an RLlib algorithm outside our table
    of their action kinds (RLlib's registry, which imports Ray, would have to say whether it exists)."""
    from tune_runner.plugins import AGENTS

    for prefix in FAMILIES:
        if name.startswith(prefix):
            algo = name[len(prefix):]
            return RLlibBackend.of(algo) if algo in RLLIB_ACTIONS else None
    if _known(name) or name in AGENTS or _known(name.lower()):
        return backend(name)
    return None


def trainable_names(*, rllib: Callable[[], list[str]] = rllib_algorithms) -> list[str]:
    """Every trainable name a space file may use: ours, the registered agents, the oracles, then RLlib's
    algorithms as `rllib` lists them (RLlib's registry by default, which imports Ray)."""
    from tune_runner.plugins import AGENTS

    users = [name for name in AGENTS if not _known(name)]
    return [*ours(), *users, *ORACLES, *(RLLIB_PREFIX + name for name in rllib())]


def hints() -> list[Backend]:
    """Trainables to suggest for an env, the most used first, as records (RLlib's registry is not imported)."""
    from tune_runner.plugins import AGENTS

    first = [*our_backends(), *(RLlibBackend.of(a) for a in ("PPO", "SAC", "DQN"))]
    rest = [*(AgentBackend.of(name) for name in AGENTS if not _known(name)),
            *(RLlibBackend.of(a) for a in sorted(RLLIB_ACTIONS))]
    seen = {b.name for b in first}
    return first + [b for b in rest if b.name not in seen]


def __getattr__(name: str) -> Any:
    """`RLlibTrainable`, still importable from here (and unpickled by this name), loaded with Ray on first use."""
    if name == "RLlibTrainable":
        from tune_runner.trainables.rllib import RLlibTrainable

        return RLlibTrainable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
