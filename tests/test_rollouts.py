"""Rollout mode's iteration without Ray: the learner's own loop on `Workers`, the actors replaced by
in-process stand-ins that run the workers' own code (`worker_sample`, `SharedReplay`)."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from tests.test_own_trainable import shipped_dqn_small_config
from tune_runner.algos import OwnLearner
from tune_runner.algos.common import scheduled
from tune_runner.trainables.agents import build_learner
from tune_runner.trainables.rollouts import SharedReplay, Workers, worker_sample

PPO_CONFIG = {"env": "CartPole-v1", "num_envs_per_env_runner": 4, "train_batch_size": 512, "minibatch_size": 128,
              "num_epochs": 2, "fcnet_hiddens": [16, 16], "seed": 1}
LR_SCHEDULE = [[0, 2.0e-3], [3000, 1.0e-3]]  # what the tests are about: rollout mode follows it
WORKERS = 2


def protocol_members(protocol: type) -> set[str]:
    """The attributes and public methods a Protocol declares, its bases' included."""
    members = set()
    for cls in protocol.__mro__:
        if cls in (typing.Protocol, typing.Generic, object):
            continue
        members |= set(vars(cls).get("__annotations__", {}))
        members |= {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}
    return members


class PublicOnly:
    """A learner as rollout mode may see it: the members of OwnLearner, nothing else, and read-only."""

    allowed = protocol_members(OwnLearner)

    def __init__(self, learner) -> None:
        object.__setattr__(self, "_learner", learner)

    def __getattr__(self, name: str):
        if name not in self.allowed:
            raise AssertionError(f"rollout mode used learner.{name}, which OwnLearner does not offer")
        return getattr(self._learner, name)

    def __setattr__(self, name: str, value) -> None:
        raise AssertionError(f"rollout mode set learner.{name}")


def stand_ins(name: str, config: dict):
    """The workers' learners, `gather` as RolloutGroup's does it, and DQN's shared replay (None for PPO)."""
    workers = [build_learner(name, config, seed_offset=1000 * (i + 1)) for i in range(WORKERS)]
    replay = None
    if name == "dqn":
        replay = SharedReplay(workers[0].config.capacity, workers[0].buffer.fields, seed=int(config.get("seed", 0)),
                              num_seeds=int(config.get("num_seeds", 1)))  # as RolloutGroup builds it

    def gather(*, weights, num_steps, env_steps):
        push = replay.add if replay is not None else None
        return [worker_sample(w, weights=weights, num_steps=num_steps, env_steps=env_steps, push=push)
                for w in workers]

    return workers, gather, replay


def same_weights(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[net][k], b[net][k]) for net in a for k in a[net])


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_rollout_mode_runs_the_learners_own_iteration_and_lr_schedule_through_public_methods(name):
    config = {**(PPO_CONFIG if name == "ppo" else shipped_dqn_small_config()), "lr": LR_SCHEDULE}
    trainer, in_process = build_learner(name, config), build_learner(name, config)
    workers, gather, replay = stand_ins(name, config)
    seen = []
    while trainer.env_steps < 4000:
        at, weights = trainer.env_steps, trainer.get_weights()
        result = PublicOnly(trainer).train_iteration(
            Workers(PublicOnly(trainer), gather=gather, count=WORKERS, replay=replay))
        own = in_process.train_iteration()
        # The lr is the schedule's value at the iteration's start, a float, and the optimizer's.
        assert type(result["lr"]) is float and result["lr"] == pytest.approx(scheduled(trainer.config.lr, at))
        assert trainer.optimizer.lr == result["lr"]
        assert set(result) == set(own), "rollout mode and in-process mode report different keys"
        # The workers acted with the trainer's weights, and what they sampled was counted into it.
        assert all(same_weights(w.get_weights(), weights) for w in workers)
        assert result["env_steps"] == trainer.env_steps > at
        seen.append(result)
    assert seen[-1]["lr"] < seen[0]["lr"] == 2.0e-3
    if name == "dqn":  # shipped learning_starts: the first iteration's ~980 env steps train nothing
        assert seen[0]["env_steps"] < 1000 and "qf_loss" not in seen[0]
        assert all(np.isfinite(r["qf_loss"]) for r in seen[1:])
