"""Trainables by name: `backend(name)` resolves a name to its record (tune_runner.trainables.backends).

Our own `ppo` and `dqn` and the oracles are registered here; a user's agent is whatever
`@register_agent` put in tune_runner.plugins.AGENTS; `rllib/<ALGO>` is any algorithm RLlib
registers, made by the factory registered under its prefix.

Importing this module loads neither Ray nor torch: the checks that refuse a search before Ray
starts read it (`backend_before_ray`). The RLlib trainable, a Ray Tune class, lives in
tune_runner.trainables.rllib.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tune_runner.algos.config import ALIASES, DQN_POPULATION, PPO_POPULATION
from tune_runner.algos.spaces import ACTION_SPACES, MASKABLE_ACTIONS, OBSERVATION_SPACES, PPO_ACTION_SPACES
from tune_runner.errors import UserError, unknown_name
from tune_runner.registry import Registry
from tune_runner.trainables.backends import (
    ORACLE_CLASSES,
    ORACLE_REPORTS,
    OWN_REPORTS,
    RLLIB_ACTIONS,
    RLLIB_PREFIX,
    AgentBackend,
    Backend,
    OracleBackend,
    OwnBackend,
    RLlibBackend,
    Trains,
)

OURS = ("ppo", "dqn")
OWN_ACTIONS = {"ppo": PPO_ACTION_SPACES, "dqn": ACTION_SPACES}
SEEDED = ("ppo", "dqn")  # ours that train seeds_per_trial > 1 seeds as one batched learner
ORACLES = tuple(ORACLE_CLASSES)
BACKENDS: Registry[Backend] = Registry("trainable")


def member_keys(population_keys: tuple[str, ...]) -> tuple[str, ...]:
    """A learner's population keys under every name a space may give them (RLlib's `lambda` too)."""
    return population_keys + tuple(alias for alias, ours in ALIASES.items() if ours in population_keys)


OWN_MEMBER_KEYS = {"ppo": member_keys(PPO_POPULATION), "dqn": member_keys(DQN_POPULATION)}
for _name in OURS:  # their spaces are declared beside their settings: no torch
    BACKENDS.register(_name, OwnBackend(name=_name, reports=OWN_REPORTS[_name], can_checkpoint=True,
                                        trains=Trains(OWN_ACTIONS[_name], OBSERVATION_SPACES, masks=MASKABLE_ACTIONS,
                                                      from_zero=True), seeds=_name in SEEDED,
                                        member_keys=OWN_MEMBER_KEYS[_name]))
for _name in ORACLES:  # the oracle's population takes PPO's keys: a space's other keys stay trial-level
    BACKENDS.register(_name, OracleBackend(name=_name, reports=ORACLE_REPORTS, trains=None,
                                           can_checkpoint=_name != "oracle/stateless",
                                           member_keys=() if _name == "oracle/stateless" else OWN_MEMBER_KEYS["ppo"]))


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

    if name in BACKENDS:
        return BACKENDS.get(name)
    if name in AGENTS:
        return AgentBackend.of(name)
    if name.lower() in BACKENDS:
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
    if name in BACKENDS or name in AGENTS or name.lower() in BACKENDS:
        return backend(name)
    return None


def trainable_names(*, rllib: Callable[[], list[str]] = rllib_algorithms) -> list[str]:
    """Every trainable name a space file may use: ours, the registered agents, the oracles, then RLlib's
    algorithms as `rllib` lists them (RLlib's registry by default, which imports Ray)."""
    from tune_runner.plugins import AGENTS

    users = [name for name in AGENTS if name not in BACKENDS]
    return [*OURS, *users, *ORACLES, *(RLLIB_PREFIX + name for name in rllib())]


def hints() -> list[Backend]:
    """Trainables to suggest for an env, the most used first, as records (RLlib's registry is not imported)."""
    from tune_runner.plugins import AGENTS

    first = [BACKENDS.get("ppo"), BACKENDS.get("dqn"), *(RLlibBackend.of(a) for a in ("PPO", "SAC", "DQN"))]
    rest = [*(AgentBackend.of(name) for name in AGENTS if name not in BACKENDS),
            *(RLlibBackend.of(a) for a in sorted(RLLIB_ACTIONS))]
    seen = {b.name for b in first}
    return first + [b for b in rest if b.name not in seen]


def __getattr__(name: str) -> Any:
    """`RLlibTrainable`, still importable from here (and unpickled by this name), loaded with Ray on first use."""
    if name == "RLlibTrainable":
        from tune_runner.trainables.rllib import RLlibTrainable

        return RLlibTrainable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
