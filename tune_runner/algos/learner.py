"""What a trial asks of a learner, and the bookkeeping our PPO and DQN share.

`Learner` is every agent a trial runs, a user's included (see tune_runner/trainables/agents.py).
`OwnLearner` is what rollout mode (tune_runner.trainables.rollouts) may use of ours, and nothing more:
weights go out, data comes in. The learner owns its training loop and its lr schedule; a
`Sampler` (PPO) or `Replay` (DQN) only says where an iteration's data comes from, the
learner's own envs or rollout workers, so both modes run the same loop.

A result reports a loss only when it was computed: an iteration without a gradient step
leaves the key out (a user's agent may set it to None; the trial drops it). A NaN that a
learner did compute is divergence (tune_runner.trainables.audit.check_finite).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from tune_runner.algos.batched import load_seed_weights, seed_weights
from tune_runner.algos.common import EpisodeStats, scheduled
from tune_runner.algos.config import ALIASES
from tune_runner.algos.optim import FlatAdam
from tune_runner.algos.spaces import ACTION_SPACES, OBSERVATION_SPACES


class Learner(Protocol):
    """Any agent a trial runs."""

    def train_iteration(self) -> Mapping[str, Any]:
        """One iteration's metrics; at least episode_return_mean and env_steps."""

    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Actions for a batch of observations."""


class Sampler(Protocol):
    """Where an iteration's env steps come from."""

    def sample(self, num_steps: int) -> dict[str, Any]:
        """At least `num_steps` env steps acted with the learner's current weights, already counted into
        its env_steps and episodes; the batch as the learner's own `collect` returns it."""


class Replay(Sampler, Protocol):
    """DQN's source: sampled transitions go into a replay memory that minibatches are drawn from."""

    round_steps: int | None
    """Env steps sampled before each round of gradient steps; None: the whole iteration in one round."""

    def size(self) -> np.ndarray:
        """Transitions the replay memory holds for each seed, [K]."""

    def minibatches(self, counts: Sequence[int], batch_size: int) -> list[dict[str, np.ndarray]]:
        """max(counts) minibatches of [K, batch_size] transitions: seed i's own in the first counts[i] of them
        (replay.SeedReplay.minibatches)."""

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None:
        """A prioritized replay's new |TD errors| of the `rows` a minibatch drew ([K, batch]); uniform: nothing."""


class OwnLearner(Learner, Protocol):
    """Our PPO and DQN, as rollout mode sees them."""

    config: Any
    env_steps: int
    seed_env_steps: np.ndarray
    """Each seed's env steps, [num_seeds]; setting env_steps sets them all."""

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """The networks a rollout worker acts with, as numpy arrays."""

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        """Act with `get_weights`' output."""

    def collect(self, num_steps: int) -> dict[str, Any]:
        """Act in this learner's own envs; the batch, counted into its own env steps and episodes."""

    def absorb(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Count batches collected elsewhere into this learner; them merged as one batch."""

    def train_iteration(self, source: Any = None) -> dict[str, Any]:
        """One iteration on this learner's own envs, or on `source` (a Sampler or a Replay)."""


class LearnerBase:
    """The bookkeeping PPO and DQN share: the lr schedule, remote batches, episode metrics."""

    action_spaces = ACTION_SPACES  # the envs our vector env takes (checked before launch)
    observation_spaces = OBSERVATION_SPACES
    config: Any
    optimizer: FlatAdam
    stats: EpisodeStats
    env_steps: int

    def apply_lr_schedule(self) -> float:
        """Set the optimizer's lr to the schedule's value at this learner's env steps; that value."""
        self.optimizer.lr = scheduled(self.config.lr, self.env_steps)
        return self.optimizer.lr

    def absorb(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Count batches collected elsewhere (rollout workers') into this learner's env steps and
        episodes; them merged as one batch, with `env_steps` their sum."""
        for batch in batches:
            self.count_batch(batch)
        merged = self.merge(batches)
        merged.update(env_steps=sum(int(b["env_steps"]) for b in batches),
                      episode_returns=np.concatenate([b["episode_returns"] for b in batches]),
                      episode_lens=np.concatenate([b["episode_lens"] for b in batches]))
        return merged

    def count_batch(self, batch: Mapping[str, Any]) -> None:
        """Count one batch collected elsewhere into the env steps and the episode window."""
        self.env_steps += int(batch["env_steps"])
        self.stats.add_finished(batch["episode_returns"], batch["episode_lens"])

    def merge(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The learner's own data of several batches as one (counts and episodes are merged by absorb)."""
        raise NotImplementedError

    def episode_metrics(self) -> dict[str, float]:
        """The return and length over the recent episodes, and the counters."""
        return {"episode_return_mean": self.stats.return_mean(), "episode_len_mean": self.stats.len_mean(),
                "episodes": self.stats.episodes, "env_steps": self.env_steps}



class SeedLearnerBase(LearnerBase):
    """The bookkeeping of a learner of K seeds trained as one batched model (issue 16).

    A subclass sets `seeds` (tune_runner.algos.seeds.derived_seeds), one `rngs` per seed, `env` (a
    learner_envs.SeedEnvs), `stats` (a seeds.SeedStats), `optimizer` (an optim.SeedAdam) and
    `seed_env_steps`, and names its batched networks in `networks`. Its state is the K states a
    one-seed learner of each seed would save: one seed's is that state itself, as before seeds existed;
    K seeds' is {"num_seeds": K, "seeds": [...]}. A subclass with more to save extends `seed_state`
    and `set_seed_state`.
    """

    networks: tuple[str, ...] = ()
    """Attribute names of the batched networks (BatchedMLP / StackedModule), which are also their state keys."""

    def _seed_envs(self, config: Any, env_id: str, env_config: Mapping[str, Any] | None) -> Any:
        """Set this learner's `seeds` (derived_seeds of config.seed), their vector envs `env` (make_seed_envs, as the
        config's env settings ask, on `device`) and one `rngs` per seed; the envs."""
        from tune_runner.algos.common import Rngs
        from tune_runner.algos.env_backend import make_seed_envs
        from tune_runner.algos.seeds import derived_seeds

        self.seeds = derived_seeds(config.seed, config.num_seeds)
        self.env = make_seed_envs(env_id, env_config=env_config, seeds=self.seeds, device=self.device,
                                  num_envs=config.num_envs_per_env_runner, backend=config.env_backend,
                                  vectorize_mode=config.gym_env_vectorize_mode,
                                  processes=config.num_env_processes or 1)
        self.rngs = [Rngs(seed) for seed in self.seeds]
        return self.env
    seeds: list[int]
    rngs: list[Any]
    env: Any
    stats: Any
    optimizer: Any
    seed_env_steps: np.ndarray
    env_id: str
    env_config: Mapping[str, Any] | None
    device: Any
    members: list[Any] | None = None  # each seed's one-seed config, where the seeds' settings differ (a population)
    streams: Any = None  # the seeds' seed_streams.CounterStreams, where the learner draws from them

    @property
    def num_seeds(self) -> int:
        return len(self.seeds)

    @property
    def env_steps(self) -> int:
        """Env steps per seed: the fewest any seed has taken (seeds differ by their autoreset steps)."""
        return int(self.seed_env_steps.min())

    @env_steps.setter
    def env_steps(self, value: int) -> None:
        self.seed_env_steps[:] = value

    def apply_lr_schedule(self) -> list[float]:
        """Each seed's lr from its schedule (its own, in a population) at its own env steps, set on the optimizer
        (a float for one seed)."""
        schedules = [member.lr for member in self.members] if self.members else [self.config.lr] * self.num_seeds
        lrs = [scheduled(lr, int(steps)) for lr, steps in zip(schedules, self.seed_env_steps, strict=True)]
        self.optimizer.lr = lrs[0] if self.num_seeds == 1 else lrs
        return lrs

    def count_batch(self, batch: Mapping[str, Any]) -> None:
        """Count a rollout worker's batch into each seed's env steps and episode window."""
        self.seed_env_steps += np.asarray(batch["seed_env_steps"], dtype=np.int64)
        self.stats.add_finished(batch["episode_returns"], batch["episode_lens"], batch["episode_seeds"])

    def seed_episode_metrics(self, seed: int) -> dict[str, float]:
        """Seed `seed`'s return and length over its recent episodes, and its counters."""
        return {"episode_return_mean": self.stats.return_mean(seed), "episode_len_mean": self.stats.len_mean(seed),
                "episodes": int(self.stats.seed_episodes[seed]), "env_steps": int(self.seed_env_steps[seed])}

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """The networks' parameters as numpy arrays (what a rollout worker needs); with several seeds each
        array has the seed as its first axis."""
        return {name: seed_weights(getattr(self, name)) for name in self.networks}

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        for name in self.networks:
            load_seed_weights(getattr(self, name), weights[name])

    def get_state(self) -> dict[str, Any]:
        """Everything `set_state` needs to continue exactly; picklable, shares no memory with the learner."""
        states = [self.seed_state(i) for i in range(self.num_seeds)]
        return states[0] if self.num_seeds == 1 else {"num_seeds": self.num_seeds, "seeds": states}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `get_state` of a learner with as many seeds. This learner's config wins (PBT may have
        changed lr)."""
        states = state["seeds"] if "seeds" in state else [state]
        if len(states) != self.num_seeds:
            raise ValueError(f"a learner state of {len(states)} seed(s) cannot restore a learner with "
                             f"num_seeds={self.num_seeds}")
        for i, seed_state in enumerate(states):
            self.set_seed_state(i, seed_state)

    def seed_state(self, seed: int) -> dict[str, Any]:
        """What a one-seed learner of seed `seed` would save."""
        rngs = self.rngs[seed].get_state()
        if self.streams is not None:  # its draws so far: beside the generators' states, as one seed saves them
            rngs["counter"] = self.streams.counter(seed)
        return {**{name: getattr(self, name).seed_state(seed) for name in self.networks},
                "optimizer": self.optimizer.seed_state_dict(seed), "rngs": rngs,
                "stats": self.stats.get_state(seed), "env_steps": int(self.seed_env_steps[seed]),
                "env": self.env.envs[seed].get_state()}

    def set_seed_state(self, seed: int, state: Mapping[str, Any]) -> bool:
        """Continue seed `seed` from `seed_state`'s format (a one-seed learner's state); whether its envs were
        restored exactly (else they were reset, and a subclass drops what it kept of their episodes)."""
        for name in self.networks:
            getattr(self, name).load_seed_state(seed, state[name])
        self.optimizer.load_seed_state_dict(seed, state["optimizer"])
        self.rngs[seed].set_state(state["rngs"])
        if self.streams is not None:  # a state saved before the streams existed: from their start
            self.streams.set_counter(seed, state["rngs"].get("counter", 0))
        self.stats.set_state(seed, state["stats"])
        self.seed_env_steps[seed] = int(state["env_steps"])
        exact = self.env.envs[seed].set_state(state["env"], seed=self.rngs[seed].python.randrange(2**31))
        if not exact:
            self.stats.drop_running(seed)
        return exact

    def replace_member(self, seed: int, values: Mapping[str, float]) -> None:
        """Start seed `seed` over as a fresh seed of a population whose values there are `values` (a population
        trial's refill, tune_runner.trainables.members): its networks, optimizer state, envs, RNGs, counters and
        normalizers become those a one-seed learner of that seed and those values starts with, built here; the
        other seeds go on as they were. `values` names settings of the config's `population`."""
        population = {key: list(values_) for key, values_ in self.config.population.items()}
        for key, value in values.items():
            key = ALIASES.get(key, key)
            if key not in population:
                raise ValueError(f"replace_member: {key!r} is not a setting of this learner's population "
                                 f"({', '.join(population) or 'none'})")
            population[key][seed] = value
        self.set_population(population)
        fresh = type(self)(self.config.member(seed), env_id=self.env_id, env_config=self.env_config,
                           device=str(self.device))
        try:
            state = fresh.get_state()
        finally:
            fresh.close()
        self.set_seed_state(seed, state)

    def set_population(self, population: Mapping[str, Sequence[float]]) -> None:
        """Train on with these values per seed (the config's `population`, checked as a config checks it)."""
        import dataclasses

        self.config = dataclasses.replace(self.config, population=population)
        self.members = [self.config.member(i) for i in range(self.num_seeds)]
        self.refresh_population()

    def refresh_population(self) -> None:
        """Re-make what the learner derived from its population's values at construction (a subclass's)."""

    def close(self) -> None:
        self.env.close()
