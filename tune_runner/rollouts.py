"""The seeds' distributed architecture inside one trial (`num_env_runners > 0`).

    trainer (the trial) --push weights--> ParameterServer <--pull weights-- RolloutWorker x N
    RolloutWorker --PPO: rollouts--> trainer
    RolloutWorker --DQN: transitions--> ReplayBufferActor --minibatches--> trainer

Workers are pinned to the trial's placement-group bundles (one CPU each, see
OwnTrainable.default_resource_request); the parameter server and the replay buffer take
no CPU of their own. Each worker acts with its own env copies and seed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray

from tune_runner.own_trainable import build_learner

# PPO rollout arrays indexed [time, env]; the rest of a batch is merged differently.
NOT_TIME_MAJOR = ("last_obs", "env_steps", "episode_returns", "episode_lens")


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


@ray.remote(num_cpus=0)
class ReplayBufferActor:
    """DQN's replay memory as an actor: workers add, the trainer samples minibatches."""

    def __init__(self, capacity: int, fields: dict, seed: int) -> None:
        from tune_runner.algos import ReplayBuffer

        self.buffer = ReplayBuffer(capacity, fields=fields)
        self.rng = np.random.default_rng(seed)

    def add(self, transitions: dict) -> int:
        self.buffer.add_batch(transitions)
        return len(self.buffer)

    def sample(self, count: int, batch_size: int) -> list[dict]:
        return [self.buffer.sample(batch_size, self.rng) for _ in range(count)]

    def size(self) -> int:
        return len(self.buffer)

    def get_state(self) -> dict:
        return {"buffer": self.buffer.get_state(), "rng": self.rng.bit_generator.state}

    def set_state(self, state: dict) -> None:
        self.buffer.set_state(state["buffer"])
        self.rng.bit_generator.state = state["rng"]


@ray.remote(num_cpus=1)
class RolloutWorker:
    """Acts in its own vector env with the newest weights; returns or pushes what it collected."""

    def __init__(self, name: str, config: dict, index: int, server: Any, replay: Any) -> None:
        import torch

        torch.set_num_threads(1)
        self.learner = build_learner(name, config, seed_offset=1000 * (index + 1))
        self.server, self.replay, self.version = server, replay, 0
        self.config_env, self.env_config = config["env"], dict(config.get("env_config") or {})

    def sample(self, num_steps: int, env_steps: int) -> dict:
        version, weights = ray.get(self.server.pull.remote(self.version))
        if weights is not None:
            self.learner.set_weights(weights)
            self.version = version
        self.learner.env_steps = env_steps  # DQN's epsilon follows the whole trial's env steps
        batch = self.learner.collect(num_steps)
        if self.replay is None:
            return batch
        ray.get(self.replay.add.remote(batch.pop("transitions")))
        return batch

    def advance_curriculum(self, ref: str, results: dict) -> list:
        """Set the task function's next task on this worker's envs; their tasks."""
        from tune_runner import curriculum

        env = self.learner.env.env
        curriculum.check_task_settable(env, env_id=self.config_env)
        return curriculum.advance(curriculum.resolve_task_fn(ref), vector_env=env, results=results,
                                  env_ctx=self.env_config)


class RolloutGroup:
    """The actors of one trial, and its training iteration over them."""

    def __init__(self, name: str, config: dict, *, num_runners: int) -> None:
        from ray.util.placement_group import get_current_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.name, self.config = name, config
        self.server = ParameterServer.remote()
        self.replay = None
        if name == "dqn":
            probe = build_learner(name, config)
            self.replay = ReplayBufferActor.remote(probe.config.capacity, probe.buffer.fields, probe.config.seed)
            probe.close()
        group = get_current_placement_group()
        self.workers = []
        for i in range(num_runners):
            options = {}
            if group is not None:  # bundle 0 is the trainer's; worker i takes bundle i + 1
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=i + 1)
            self.workers.append(RolloutWorker.options(**options).remote(name, config, i, self.server, self.replay))

    def train_iteration(self, learner: Any) -> dict[str, float]:
        start = time.perf_counter()
        ray.get(self.server.push.remote(learner.get_weights()))
        if self.name == "ppo":
            per_worker = -(-learner.config.train_batch_size // len(self.workers))
            batches = ray.get([w.sample.remote(per_worker, learner.env_steps) for w in self.workers])
            sampled = absorb(learner, batches)
            losses = learner.learn(merge_rollouts(batches))
        else:
            sampled, losses = self._dqn_iteration(learner)
        return {"episode_return_mean": learner.stats.return_mean(), "episode_len_mean": learner.stats.len_mean(),
                "episodes": learner.stats.episodes, "env_steps": learner.env_steps, **losses,
                "lr": learner.config.lr, "sps": sampled / (time.perf_counter() - start)}

    def _dqn_iteration(self, learner: Any) -> tuple[int, dict[str, float]]:
        """Workers push ~1000 env steps into the replay actor; the trainer takes the minibatches it earned."""
        c = learner.config
        per_worker = max(c.num_envs_per_env_runner, -(-1000 // len(self.workers)))
        batches = ray.get([w.sample.remote(per_worker, learner.env_steps) for w in self.workers])
        sampled = absorb(learner, batches)
        losses = {"qf_loss": float("nan"), "td_error_mean": float("nan")}
        if learner.env_steps >= c.num_steps_sampled_before_learning_starts:
            intensity = c.training_intensity or c.train_batch_size / c.num_envs_per_env_runner
            learner._update_credit += sampled * intensity / c.train_batch_size
            count = int(learner._update_credit)
            learner._update_credit -= count
            if count:
                samples = ray.get(self.replay.sample.remote(count, c.train_batch_size))
                sums = sum(learner._update(s) for s in samples)
                losses = {"qf_loss": float(sums[0]) / count, "td_error_mean": float(sums[1]) / count}
        if learner.env_steps - learner._last_target_update >= c.target_network_update_freq:
            learner.target.load_state_dict(learner.q.state_dict())
            learner._last_target_update = learner.env_steps
        return sampled, {**losses, "epsilon": c.epsilon_at(learner.env_steps)}

    def advance_curriculum(self, ref: str, results: dict) -> list:
        """Every worker sets the task function's next task on its envs (the trainer's own envs do not
        sample here); all their tasks."""
        return [task for tasks in ray.get([w.advance_curriculum.remote(ref, results) for w in self.workers])
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


def absorb(learner: Any, batches: list[dict]) -> int:
    """Count the workers' env steps and finished episodes into the trainer's own stats."""
    sampled = sum(int(b["env_steps"]) for b in batches)
    learner.env_steps += sampled
    for b in batches:
        learner.stats.recent_returns.extend(np.asarray(b["episode_returns"]).tolist())
        learner.stats.recent_lengths.extend(np.asarray(b["episode_lens"]).tolist())
        learner.stats.episodes += len(b["episode_returns"])
    return sampled


def merge_rollouts(batches: list[dict]) -> dict:
    """PPO rollouts from several workers as one batch: envs side by side."""
    merged = {key: np.concatenate([b[key] for b in batches], axis=1)
              for key in batches[0] if key not in NOT_TIME_MAJOR}
    merged["last_obs"] = np.concatenate([b["last_obs"] for b in batches], axis=0)
    return merged
