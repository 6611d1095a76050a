"""Agents by name: the learning rule a trial runs. Ours have a record each (tune_runner.algos.records); a user
adds one with `@register_agent("name")` in a plugin file (an `envs/` folder, `--plugins`, or `plugins:` in a space
file).

A user's agent is a class with

    add_args(parser)                     its hyperparameters: flags of `tune-rl train`, keys of a space file
    __init__(self, args)                 those options, plus env, env_config, seed, device, model, model_config
    train_iteration() -> dict            one iteration; reports at least episode_return_mean and env_steps.
                                         A loss it did not compute (no update yet) is None or left out;
                                         a NaN or infinite loss it did compute stops the trial as diverged
    compute_actions(obs, explore=False)  actions for a batch of observations (evaluate, load_policy)
    get_state() / set_state(state)       optional: checkpoints (PBT, resume, evaluate)
    get_weights() / set_weights(w)       optional (seed 000's shape)
    close()                              optional
    seeds_per_trial = True               optional: it trains `args.num_seeds` seeds of its config at once and
                                         reports `seed_<i>/<name>` per seed (tune_runner.spec.seed_keys); the trial
                                         adds the aggregates. Undeclared: a search with seeds_per_trial > 1 is
                                         refused before launch
    action_spaces = ("Box",)             optional: the gymnasium space classes it trains on (and
    observation_spaces = ("Box",)        observation_spaces); a search on another env is refused
                                         before launch. Undeclared: any

`tune_runner.algos.Learner` is that contract as a typing.Protocol. `tune_runner.algos.make_vec_env`
and `tune_runner.algos.networks.build_model` give it the same vector env and registered networks our agents use.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from tune_runner.algos.records import learner_record
from tune_runner.plugins import AGENTS
from tune_runner.spec.reserved import AGGREGATE_KEY, RUNNERS_KEY, SEEDS_KEY, TASK_FN_KEY
from tune_runner.spec.seed_keys import DEFAULT_AGGREGATE
from tune_runner.trainables.trial import env_config_of, learner_settings, load_trial_plugins, trial_threads

# Our learners are in AGENTS once tune_runner.algos.records is imported (above), each by its record; their settings
# come from the record, without torch: `tune-rl train --help` lists them without a learner.
PROVIDED = ("seed", "model", "model_config")  # keys every user agent accepts besides its add_args options
REQUIRED = ("train_iteration", "compute_actions")


class ArgsConfig:
    """A user agent's config: its add_args options as an argparse Namespace (ours use dataclasses)."""

    def __init__(self, name: str, cls: type) -> None:
        self.name, self.cls = name, cls

    def names(self) -> list[str]:
        from tune_runner.plugins.add_args import options

        return [*options(self.cls, prog=f"agent {self.name}"), *PROVIDED]

    def from_dict(self, values: Mapping[str, Any]) -> argparse.Namespace:
        """Defaults updated by `values`; an unknown key is a ValueError with the closest option."""
        from tune_runner.algos.networks import BUILT_IN, check_model
        from tune_runner.plugins.add_args import parse_options

        own = {k: v for k, v in values.items() if k not in PROVIDED}
        args = parse_options(self.cls, own, prog=f"agent {self.name}")
        args.seed = int(values.get("seed", 0))
        args.model, args.model_config = values.get("model", BUILT_IN), dict(values.get("model_config") or {})
        check_model(args.model, args.model_config)
        return args


def names() -> list[str]:
    """Every registered agent."""
    return list(AGENTS)


def is_agent(name: str) -> bool:
    return name in AGENTS


def agent_class(name: str) -> type:
    """The registered class; a user's must have the methods a trial calls."""
    cls = AGENTS.get(name)
    missing = [m for m in REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"agent {name!r} ({cls.__module__}.{cls.__qualname__}) lacks {', '.join(missing)}; "
                         f"see tune_runner/trainables/agents.py for what an agent provides")
    return cls


def config_class(name: str) -> Any:
    """An object with `from_dict(values)`: our dataclass config, or the add_args adapter of a user agent."""
    record = learner_record(name)
    if record is not None:
        return record.config_class()
    cls = agent_class(name)
    return getattr(cls, "config_class", None) or ArgsConfig(name, cls)


def is_ours(name: str) -> bool:
    """Whether the agent takes our learner constructor (config dataclass, env_id, env_config, device)."""
    return getattr(AGENTS.get(name), "config_class", None) is not None


def build(name: str, settings: Mapping[str, Any], *, env: str, env_config: Mapping[str, Any], device: str,
          num_seeds: int = 1, seed_aggregate: str = DEFAULT_AGGREGATE) -> Any:
    """A learner of agent `name` for one trial's settings (already nested, aliases renamed); `num_seeds` > 1
    only for an agent that trains several (checked before launch): ours take it in their config, a user's
    agent that declares `seeds_per_trial = True` as `args.num_seeds` and `args.seed_aggregate`."""
    cls, config = agent_class(name), config_class(name)
    seeds = {"num_seeds": num_seeds, "seed_aggregate": seed_aggregate} if num_seeds > 1 else {}
    if is_ours(name):  # a one-seed learner is built as it always was
        return cls(config.from_dict({**settings, **seeds}), env_id=env, env_config=dict(env_config), device=device)
    args = config.from_dict(settings)
    args.env, args.env_config, args.device = env, dict(env_config), device
    if getattr(cls, "seeds_per_trial", False) is True:
        args.num_seeds, args.seed_aggregate = num_seeds, seed_aggregate
    return cls(args)


def trial_config(name: str, config: Mapping[str, Any]) -> Any:
    """Agent `name`'s config of a flat trial config, checked as the trial builds it: ours with the trial's
    num_seeds, against which settings given per seed (a population) are checked. ValueError/TypeError if bad."""
    seeds = int(config.get(SEEDS_KEY, 1))
    by_trial = {"num_seeds": seeds} if seeds > 1 and is_ours(name) else {}
    return config_class(name).from_dict({**learner_settings(dict(config)), **by_trial})


def checkpoints(name: str) -> bool:
    """Whether the agent's state can be saved and restored (get_state and set_state)."""
    cls = AGENTS.get(name)
    return callable(getattr(cls, "get_state", None)) and callable(getattr(cls, "set_state", None))


def build_learner(name: str, config: dict[str, Any], *, device: str = "cpu", seed_offset: int = 0) -> Any:
    """A learner for one trial config (rollout workers pass a seed offset)."""
    load_trial_plugins(config)
    settings = learner_settings(config)
    if is_ours(name) and settings.get("num_env_processes") is None and not config.get(RUNNERS_KEY) \
            and not config.get(TASK_FN_KEY):  # a curriculum sets tasks on envs in this process
        settings["num_env_processes"] = max(1, trial_threads() // int(config.get(SEEDS_KEY, 1)))
    if seed_offset:
        settings["seed"] = int(settings.get("seed", 0)) + seed_offset
    return build(name, settings, env=config["env"], env_config=env_config_of(config), device=device,
                 num_seeds=int(config.get(SEEDS_KEY, 1)), seed_aggregate=config.get(AGGREGATE_KEY, DEFAULT_AGGREGATE))
