"""The seeds' distributed architecture inside one trial (`num_env_runners > 0`).

    trainer (the trial) --push weights--> ParameterServer <--pull weights-- RolloutWorker x N
    RolloutWorker --PPO: rollouts--> trainer
    RolloutWorker --DQN: transitions--> ReplayBufferActor --minibatches--> trainer

Workers are pinned to the trial's placement-group bundles (one CPU each, see
OwnTrainable.default_resource_request); the parameter server and the replay buffer take
no CPU of their own. Each worker acts with its own env copies and seed.

This module only moves weights and data. The learner's own `train_iteration` runs the
iteration (lr schedule, updates, target network) on a `Workers` source, through the public
methods of `tune_runner.algos.learner.OwnLearner`. `Workers` takes the Ray calls as plain
callables, so tests drive the same code with in-process stand-ins for the actors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import ray

from tune_runner.algos.learner import OwnLearner
from tune_runner.algos.records import learner_record
from tune_runner.trainables.agents import build_learner
from tune_runner.trainables.trial import env_config_of

Gather = Callable[..., list[dict]]
"""`gather(weights=, num_steps=, env_steps=)`: every worker's `worker_sample` batch (env_steps: each seed's)."""


@ray.remote(num_cpus=0)
class ParameterServer:
    """Holds the newest weights and a version number; workers pull only when it changed."""

    def __init__(self) -> None:
        self.version, self.weights = 0, None

    def push(self, weights: dict) -> int:
        self.version += 1
        self.weights = weights
        return self.version

    def pull(self, have: int) -> tuple[int, dict | None]:
        return self.version, (self.weights if have != self.version else None)


class SharedReplay:
    """DQN's replay memory shared by a trial's workers (they add) and its trainer (it draws minibatches): one
    buffer per seed of a K-seed learner, each drawn from by a generator of its own (seed i's from seed i's
    derived seed, tune_runner.algos.seeds)."""

    def __init__(self, capacity: int, fields: dict, seed: int, num_seeds: int = 1, prioritized: Any = None) -> None:
        from tune_runner.algos.replay import SeedReplay
        from tune_runner.algos.seeds import derived_seeds

        self.buffer = SeedReplay(num_seeds, capacity, fields=fields, prioritized=prioritized)
        self.rngs = [np.random.default_rng(s) for s in derived_seeds(seed, num_seeds)]

    def add(self, transitions: dict) -> int:
        self.buffer.add(transitions)
        return len(self.buffer)

    def sample(self, counts: list[int], batch_size: int) -> list[dict]:
        return self.buffer.minibatches(counts, batch_size, self.rngs)

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None:
        self.buffer.update_priorities(rows, td_errors, active)

    def size(self) -> np.ndarray:
        return self.buffer.sizes()

    def get_state(self) -> dict:
        """One seed: the format it always had; K seeds: {"num_seeds": K, "seeds": [one per seed]}."""
        states = [{"buffer": self.buffer.get_state(i), "rng": rng.bit_generator.state}
                  for i, rng in enumerate(self.rngs)]
        return states[0] if len(states) == 1 else {"num_seeds": len(states), "seeds": states}

    def set_state(self, state: dict) -> None:
        states = state["seeds"] if "seeds" in state else [state]
        if len(states) != len(self.rngs):
            raise ValueError(f"a replay state of {len(states)} seed(s) cannot restore one of {len(self.rngs)}")
        for i, (seed_state, rng) in enumerate(zip(states, self.rngs, strict=True)):
            self.buffer.set_state(i, seed_state["buffer"])
            rng.bit_generator.state = seed_state["rng"]


ReplayBufferActor = ray.remote(num_cpus=0)(SharedReplay)


class ReplayView(Protocol):
    """The trainer's view of the shared replay memory."""

    def size(self) -> np.ndarray: ...

    def sample(self, counts: list[int], batch_size: int) -> list[dict]: ...

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None: ...


def worker_sample(learner: OwnLearner, *, weights: Mapping | None, num_steps: int, env_steps: list[int],
                  push: Callable[[dict], Any] | None = None) -> dict:
    """A rollout worker's part of an iteration: take the newest weights (None: unchanged), follow the
    trial's env steps of each seed (DQN's epsilon schedule), collect; with `push` (DQN's shared replay)
    the transitions go there instead of back to the trainer."""
    if weights is not None:
        learner.set_weights(weights)
    learner.env_steps = env_steps
    batch = learner.collect(num_steps)
    if push is not None:
        push(batch.pop("transitions"))
    return batch


class Workers:
    """A trial's rollout workers as its learner's data source (a Sampler; for DQN a Replay).

    `sample` sends the learner's weights out and counts what comes back into the learner
    (`absorb`); the minibatches come from the shared replay. An iteration samples in one
    round: a round trip to the workers costs far more than one vector step.
    """

    round_steps = None

    def __init__(self, learner: OwnLearner, *, gather: Gather, count: int, replay: ReplayView | None = None) -> None:
        self.learner, self.gather, self.count, self.replay = learner, gather, count, replay

    def sample(self, num_steps: int) -> dict[str, Any]:
        batches = self.gather(weights=self.learner.get_weights(), num_steps=-(-num_steps // self.count),
                              env_steps=self.learner.seed_env_steps.tolist())
        return self.learner.absorb(batches)

    def size(self) -> np.ndarray:
        return self.replay.size()

    def minibatches(self, counts: list[int], batch_size: int) -> list[dict[str, np.ndarray]]:
        return self.replay.sample(counts, batch_size)

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None:
        self.replay.update_priorities(rows, td_errors, active)


class ActorReplay:
    """The replay-buffer actor as a ReplayView."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def size(self) -> np.ndarray:
        return ray.get(self.actor.size.remote())

    def sample(self, counts: list[int], batch_size: int) -> list[dict]:
        return ray.get(self.actor.sample.remote(counts, batch_size))

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None:
        self.actor.update_priorities.remote(rows, td_errors, active)  # an actor runs one caller's calls in order


@ray.remote(num_cpus=1)
class RolloutWorker:
    """Acts in its own vector env with the newest weights; returns or pushes what it collected."""

    def __init__(self, name: str, config: dict, index: int, server: Any, replay: Any) -> None:
        import torch

        torch.set_num_threads(1)
        self.learner = build_learner(name, config, seed_offset=1000 * (index + 1))
        self.server, self.replay, self.version = server, replay, 0
        self.config_env, self.env_config = config["env"], env_config_of(config)

    def sample(self, num_steps: int, env_steps: list[int]) -> dict:
        self.version, weights = ray.get(self.server.pull.remote(self.version))
        push = None if self.replay is None else (lambda transitions: ray.get(self.replay.add.remote(transitions)))
        return worker_sample(self.learner, weights=weights, num_steps=num_steps, env_steps=env_steps, push=push)

    def advance_curriculum(self, ref: str, result: dict, **more: Any) -> list:
        """Set the task function's next task on this worker's envs, each seed's from its own result; their
        tasks."""
        from tune_runner.trainables import curriculum

        curriculum.check_seeds_settable(self.learner, env_id=self.config_env)
        return curriculum.advance_seeds(curriculum.resolve_task_fn(ref), learner=self.learner, result=result,
                                        env_ctx=self.env_config, **more)


class RolloutGroup:
    """The actors of one trial, and its training iteration over them."""

    def __init__(self, name: str, config: dict, *, num_runners: int) -> None:
        from ray.util.placement_group import get_current_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.name, self.config = name, config
        self.server = ParameterServer.remote()
        self.replay = None
        if (record := learner_record(name)) is not None and record.replay:  # one buffer the workers fill
            probe = build_learner(name, config)
            self.replay = ReplayBufferActor.remote(probe.config.capacity, probe.buffer.fields, probe.config.seed,
                                                   probe.num_seeds, probe.config.prioritized)
            probe.close()
        group = get_current_placement_group()
        self.workers = []
        for i in range(num_runners):
            options = {}
            if group is not None:  # bundle 0 is the trainer's; worker i takes bundle i + 1
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=i + 1)
            self.workers.append(RolloutWorker.options(**options).remote(name, config, i, self.server, self.replay))

    def train_iteration(self, learner: OwnLearner) -> dict[str, float]:
        """The learner's own iteration, on these workers' data."""
        replay = ActorReplay(self.replay) if self.replay is not None else None
        return learner.train_iteration(Workers(learner, gather=self._gather, count=len(self.workers), replay=replay))

    def _gather(self, *, weights: dict, num_steps: int, env_steps: list[int]) -> list[dict]:
        ray.get(self.server.push.remote(weights))
        return ray.get([w.sample.remote(num_steps, env_steps) for w in self.workers])

    def advance_curriculum(self, ref: str, result: dict, **more: Any) -> list:
        """Every worker sets the task function's next task on its envs (the trainer's own envs do not
        sample here); all their tasks."""
        return [task for tasks in ray.get([w.advance_curriculum.remote(ref, result, **more) for w in self.workers])
                for task in tasks]

    def get_state(self) -> dict | None:
        """The replay actor's contents (DQN); workers keep no state worth saving."""
        return ray.get(self.replay.get_state.remote()) if self.replay is not None else None

    def set_state(self, state: dict | None) -> None:
        if state is not None and self.replay is not None:
            ray.get(self.replay.set_state.remote(state))

    def stop(self) -> None:
        for actor in [*self.workers, self.server, *([self.replay] if self.replay is not None else [])]:
            ray.kill(actor)

