"""Our own learners, one record each: what the rest of tune-rl asks about a learner, answered in one place.

The catalog of trainables and their backends, the env check before launch, the rollout workers, the population
searcher, the policy export (evaluate, load_policy, the MLflow model) and the command line read `LEARNERS`; none
of them compares a learner's name. A record is plain data and its classes are dotted paths, imported when asked
for: reading it imports no torch (`tune-rl train --help` lists our learners and their settings without it).

**A new learner** is its module plus one `register_learner(LearnerRecord(...))` below; no other file names it
(tests/test_learner_records.py registers a toy one to show it). It provides:

- a config dataclass, a `tune_runner.algos.config.LearnerConfig` importable without torch (so beside PPO's in
  algos/config.py, or in a light module of its own): its field docstrings are `tune-rl train --help`, its
  `population_keys` the settings a population may give each seed;
- the learner class (the contract of `tune_runner.algos.learner`: train_iteration, compute_actions, get_state and
  set_state, collect/absorb for rollout workers), holding its acting network as the attribute `policy_key`;
- an `Acting` (tune_runner.algos.acting) that rebuilds that network, or folds it into one plain MLP, from a
  one-seed state's weights under `policy_key`;
- and in the record: the metrics it reports, the action spaces it trains on (an env with others is refused before
  launch, and the refusal names the learners that do take them), whether it keeps a replay buffer (rollout workers
  then share a replay actor, sized by its config's `capacity` and `prioritized` and its `buffer.fields`; a
  population's memory is estimated from `replay_buffer_config.capacity`), and its settings that act on Box
  actions only (searched on another env, they are refused as idle).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tune_runner.algos.config import ALIASES, BOX_ONLY
from tune_runner.algos.spaces import ACTION_SPACES, MASKABLE_ACTIONS, OBSERVATION_SPACES, PPO_ACTION_SPACES
from tune_runner.registry import Registry

if TYPE_CHECKING:
    from tune_runner.algos.acting import Acting

LEARNERS: Registry[LearnerRecord] = Registry("learner")


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, kw_only=True)
class LearnerRecord:
    """One learner of ours. `config`, `learner` and `acting` are "module:attr" paths, imported on first use."""

    name: str
    config: str  # its LearnerConfig dataclass (no torch)
    learner: str  # its learner class (torch)
    acting: str  # its Acting (torch): the greedy policy from a one-seed state
    policy_key: str  # the acting network: the learner's attribute, and the key of its weights in the learner's state
    reports: tuple[str, ...]  # result keys besides Tune's own; `task` only with a curriculum (env_task_fn)
    action_spaces: tuple[str, ...]  # gymnasium space class names it trains on (tune_runner.algos.spaces)
    observation_spaces: tuple[str, ...] = OBSERVATION_SPACES
    masks: tuple[str, ...] = MASKABLE_ACTIONS  # the action kinds an action_mask in the observations may mask
    replay: bool = False  # keeps a replay buffer (replay_buffer_config.capacity transitions per seed)
    box_only: tuple[str, ...] = ()  # settings that act on Box actions alone
    seeds: bool = True  # trains seeds_per_trial > 1 seeds of a config as one batched learner

    def config_class(self) -> Any:
        """Its config dataclass (no torch)."""
        return _load(self.config)

    def learner_class(self) -> type:
        """Its learner class (imports torch)."""
        return _load(self.learner)  # type: ignore[no-any-return]

    def acting_network(self) -> Acting:
        """How its greedy policy is rebuilt from a one-seed state (imports torch)."""
        return _load(self.acting)()  # type: ignore[no-any-return]

    @property
    def member_keys(self) -> tuple[str, ...]:
        """The settings a population trial may give each member, under every name a space may give them."""
        return member_keys(self.config_class().population_keys)

    @property
    def trainable_name(self) -> str:
        """Its Ray Tune class's name (OwnPPO): trial folders and old pickles carry it."""
        return f"Own{self.name.upper()}"


def member_keys(population_keys: tuple[str, ...]) -> tuple[str, ...]:
    """A learner's population keys under every name a space may give them (RLlib's `lambda` too)."""
    return population_keys + tuple(alias for alias, ours in ALIASES.items() if ours in population_keys)


def register_learner(record: LearnerRecord) -> LearnerRecord:
    """Make `record` one of our learners; it is an agent too (tune_runner.plugins.AGENTS), by its class's path."""
    from tune_runner.plugins import AGENTS, check_free

    check_free(AGENTS, record.name, record.learner)
    LEARNERS.register(record.name, record)
    AGENTS.register(record.name, record.learner)
    return record


def ours() -> list[str]:
    """Our learners' names, the first registered (the most used) first."""
    return LEARNERS.in_order()


def spoken(names: list[str], *, last: str = "and") -> str:
    """Names as a message lists them: `ppo and dqn`, `ppo, dqn and sac`."""
    return f"{', '.join(names[:-1])} {last} {names[-1]}" if len(names) > 1 else "".join(names)


def learner_record(name: str) -> LearnerRecord | None:
    """The record of our learner `name`; None for any other trainable (a user's agent, RLlib's, the oracle)."""
    return LEARNERS.get(name) if name in LEARNERS else None


register_learner(LearnerRecord(
    name="ppo", config="tune_runner.algos.config:PPOConfig", learner="tune_runner.algos.ppo:PPO",
    acting="tune_runner.algos.acting:PolicyMLP", policy_key="pi",
    reports=("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "policy_loss", "vf_loss", "entropy",
             "kl", "lr", "sps", "task"),
    action_spaces=PPO_ACTION_SPACES, box_only=BOX_ONLY))
register_learner(LearnerRecord(
    name="dqn", config="tune_runner.algos.config:DQNConfig", learner="tune_runner.algos.dqn:DQN",
    acting="tune_runner.algos.qnetwork:QActing", policy_key="q",
    reports=("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "qf_loss", "td_error_mean",
             "epsilon", "lr", "sps", "task"),
    action_spaces=ACTION_SPACES, replay=True))
register_learner(LearnerRecord(
    name="sac", config="tune_runner.algos.sac_config:SACConfig", learner="tune_runner.algos.sac:SAC",
    acting="tune_runner.algos.sac_networks:SACActing", policy_key="pi",
    reports=("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "qf_loss", "policy_loss",
             "alpha_loss", "entropy", "alpha", "lr", "sps", "task"),
    action_spaces=("Box",), replay=True))
