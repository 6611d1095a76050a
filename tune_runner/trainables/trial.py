"""What every trial's process shares, whichever trainable runs in it: the env_config its config builds, its
settings nested for a learner, its env's spaces, the plug-ins the search named, and the resources, device and
threads Ray gave it.

Light on purpose (Ray and torch are imported inside the functions that need them): the checks before a search
starts read these too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tune_runner.algos.config import ALIASES
from tune_runner.spec import reserved
from tune_runner.spec.reserved import PREFIX

if TYPE_CHECKING:
    import gymnasium as gym

ENV_KEYS = reserved.NOT_RLLIB  # keys of our trial config that are not RLlib AlgorithmConfig attributes
TRIAL_KEYS = reserved.NOT_LEARNER  # keys of a trial config that are ours, not the learner's


def env_config_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The env_config a trial config builds its env with: `env_config`, then its `env_config.NAME` keys."""
    merged = dict(config.get("env_config") or {})
    merged.update({key.removeprefix(PREFIX): value for key, value in config.items() if key.startswith(PREFIX)})
    return merged


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1, "c": 2}` → `{"a": {"b": 1}, "c": 2}`."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def learner_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The learner's part of a flat trial config: aliases renamed, dotted keys nested."""
    flat = {ALIASES.get(k, k): v for k, v in config.items() if k not in TRIAL_KEYS and not k.startswith(PREFIX)}
    return nest(flat)


def population_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """A trial config's population (PPOConfig.population: a mapping, or `population.X` keys as a space's fixed
    mapping is flattened): {setting: [a value per seed]}, {} for none."""
    return {**(config.get("population") or {}),
            **{k.removeprefix("population."): v for k, v in config.items() if k.startswith("population.")}}


def one_seed_config(config: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """Seed `seed` of a trial config of several seeds (seeds_per_trial) as a one-seed trial config: the seed keys
    left out, and the settings of a population at that seed's values (`population_of`). How a policy's network is
    rebuilt (acting depends on none of a population's settings) and a population's best seed exported."""
    population = population_of(config)
    one = {k: v for k, v in config.items()
           if k not in reserved.SEED_KEYS and k != "population" and not k.startswith("population.")}
    one.update({ALIASES.get(key, key): values[seed] for key, values in population.items()})
    return one


def best_member(config: Mapping[str, Any], result: Mapping[str, Any], *, metric: str,
                mode: str) -> tuple[dict[str, Any], int | None]:
    """A trial config as one config: itself, or of a trial whose seeds were a population (`population_of`) the
    one-seed config of the seed whose `metric` in `result` was best (NaN, no episode yet: never), with that seed's
    own seed; and which seed that was (None: no population)."""
    from tune_runner.spec.seed_keys import SEED_STRIDE, per_seed

    if not population_of(config):
        return dict(config), None
    values = per_seed(result, metric)
    scored = [(v if mode == "max" else -v, -i) for i, v in enumerate(values) if v == v]
    member = -max(scored)[1] if scored else 0
    one = one_seed_config(config, member)
    one["seed"] = int(config.get("seed", 0)) + SEED_STRIDE * member
    return one, member


def load_trial_plugins(config: dict[str, Any]) -> None:
    """Import the plugin files the search named, in this (trial or rollout) process."""
    plugins = config.get(reserved.PLUGINS_KEY) or ()
    shipped = [p.partition(":")[2] for p in plugins if p.startswith("module:")]  # to a joined cluster
    for module in shipped:
        import importlib

        importlib.import_module(module)
    paths = [p for p in plugins if not p.startswith("module:")]
    if paths:
        from tune_runner.plugins import load_plugins, ship_to_ray

        load_plugins(paths, discover=False)  # the driver's list is whole: ./envs/ files it imported are on it
        ship_to_ray()  # RLlib's env runners look the env up in Ray Tune's registry


def trainer_bundle(config: dict) -> dict[str, float]:
    """The trial's own resource bundle from `cpus_per_trial` / `gpus_per_trial` (1 CPU, no GPU by default)."""
    bundle = {"CPU": float(config.get(reserved.CPUS_KEY, 1) or 0)}
    gpus = float(config.get(reserved.GPUS_KEY, 0) or 0)
    if gpus:
        bundle["GPU"] = gpus
    return bundle


def trial_device() -> str:
    """`cuda` when Ray gave this trial a GPU, else `cpu`."""
    import ray

    if not ray.is_initialized():  # a trainable built outside Ray (tests, notebooks)
        return "cpu"
    if not ray.get_gpu_ids():
        return "cpu"
    import torch

    # Ray can hand out logical GPUs (num_gpus declared on a node without one): then train on the CPU.
    return "cuda" if torch.cuda.is_available() else "cpu"


def trial_threads() -> int:
    """Torch threads = the CPUs Ray assigned to this trial's process (at least 1)."""
    import ray

    if not ray.is_initialized():  # a trainable built outside Ray: get_runtime_context would start one
        return 1
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1) or 1
    except Exception:  # noqa: BLE001 - a driver rather than a Ray worker
        cpus = 1
    return max(1, int(cpus))


@dataclass(frozen=True)
class Spaces:
    """The observation and action space of one built env."""

    observation: gym.Space
    action: gym.Space


_BUILT: dict[tuple[str, str], tuple[Any, Spaces]] = {}  # (env, config) -> (its registration, its spaces)


def env_spaces(env_id: str, env_config: Mapping[str, Any] | None = None) -> Spaces | None:
    """The spaces of one `gymnasium.make(env_id, **env_config)`, closed after; None for an env that only
    RLlib can make (a class path). The env's own exception propagates. Each distinct (env, config) is
    built once per process, again only if the env was registered anew."""
    import gymnasium as gym

    if env_id not in gym.registry:  # registered with Ray Tune only: made a gymnasium id (needs Ray and torch)
        from tune_runner.plugins import ensure_gym_id

        if not ensure_gym_id(env_id):  # gymnasium or Ray Tune registers it (preflight.check_env said so)
            return None
    key = (env_id, json.dumps(dict(env_config or {}), sort_keys=True, default=repr))
    registered = gym.spec(env_id)
    if key not in _BUILT or _BUILT[key][0] is not registered:
        # Without gymnasium's checker: its warnings would add lines to a one-line refusal.
        env = gym.make(env_id, disable_env_checker=True, **dict(env_config or {}))
        try:
            _BUILT[key] = registered, Spaces(env.observation_space, env.action_space)
        finally:
            env.close()
    return _BUILT[key][1]
