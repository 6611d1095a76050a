"""A new learner of ours is one record (tune_runner.algos.records): issue 45's proof, before SAC.

A toy third learner, "toy", is registered here and nowhere else: PPO's config and class under another name, taking
Box actions only, with an `Acting` of this module that counts its calls. The catalog, its backend record and
trainable class, the preflight's action-space refusal and the policy's export and loading all find it; none of
them is told its name.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tune_runner.algos.acting import PolicyMLP
from tune_runner.algos.config import PPOConfig
from tune_runner.algos.records import LEARNERS, LearnerRecord, learner_record, register_learner
from tune_runner.errors import UserError
from tune_runner.plugins import AGENTS

TOY = "toy"
CALLS: list[str] = []  # what the toy's Acting was asked, in order


class CountingActing(PolicyMLP):
    """PPO's acting network, noting each question, so the tests see that the toy's record was asked."""

    def sizes(self, weights, settings):
        CALLS.append("sizes")
        return super().sizes(weights, settings)

    def layers(self, weights, settings):
        CALLS.append("layers")
        return super().layers(weights, settings)


RECORD = LearnerRecord(name=TOY, config="tune_runner.algos.config:PPOConfig", learner="tune_runner.algos.ppo:PPO",
                       acting=f"{__name__}:CountingActing", policy_key="pi",
                       reports=("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "policy_loss"),
                       action_spaces=("Box",))
CONFIG = {"env": "Pendulum-v1", "env_config": {}, "num_envs_per_env_runner": 2, "train_batch_size": 64,
          "minibatch_size": 32, "num_epochs": 1, "fcnet_hiddens": [8], "seed": 2}


@pytest.fixture
def toy(monkeypatch):
    """The toy registered; the registries as they were once the test ends."""
    monkeypatch.setattr(LEARNERS, "_entries", dict(LEARNERS._entries))
    monkeypatch.setattr(AGENTS, "_entries", dict(AGENTS._entries))
    register_learner(RECORD)
    CALLS.clear()
    return RECORD


def test_nothing_of_the_toy_outside_the_tests():
    from tune_runner.trainables.catalog import trainable_names

    assert learner_record(TOY) is None and TOY not in AGENTS
    assert TOY not in trainable_names(rllib=list)


def test_the_catalog_and_its_backend_record_know_the_toy(toy):
    from tune_runner.trainables import agents, own
    from tune_runner.trainables.backends import OwnBackend, Trains
    from tune_runner.trainables.catalog import backend, hints, trainable_names

    assert trainable_names(rllib=list)[:4] == ["ppo", "dqn", "sac", TOY]  # ours, in the order registered
    assert [b.name for b in hints()][:4] == ["ppo", "dqn", "sac", TOY]
    record = backend(TOY)
    assert isinstance(record, OwnBackend) and record.kind == "own" and record.exports_policy and record.seeds
    assert record.reports == toy.reports and "episodes" in record.time_attrs
    assert record.trains == Trains(("Box",), ("Box", "masked Dict"), masks=("Discrete",), from_zero=True)
    assert record.member_keys == backend("ppo").member_keys and not record.replay
    assert agents.is_agent(TOY) and agents.is_ours(TOY) and agents.config_class(TOY) is PPOConfig
    cls = record.trainable_class()
    assert cls.__name__ == "OwnTOY" and cls.learner_name == TOY and own.OwnTOY is cls  # found by name: pickled so
    assert record.check_settings(["clip_parm"]) == [("clip_parm", "not a setting of toy; did you mean 'clip_param'?")]
    with pytest.raises(UserError, match="did you mean 'toy'"):
        backend("TOY")


def spec_file(tmp_path, *, trainable: str, env: str):
    from tune_runner.spec.experiment import load_spec

    path = tmp_path / f"{trainable}.yaml"
    path.write_text(f"trainable: {trainable}\nenv: {env}\nbudget: {{env_steps: 1000}}\nnum_samples: 1\n"
                    f"space:\n  lr: {{choice: [0.001, 0.01]}}\n")
    return load_spec(str(path))


def test_the_preflight_refuses_the_toy_on_discrete_actions_and_offers_it_for_box_ones(toy, tmp_path):
    from tune_runner.tuning.preflight import prepare

    with pytest.raises(UserError) as refused:
        prepare(spec_file(tmp_path, trainable=TOY, env="CartPole-v1"))
    assert str(refused.value).endswith("toy needs a Box action space; CartPole-v1 has Discrete(2); use a trainable "
                                       "for discrete actions such as ppo or dqn")
    with pytest.raises(UserError) as refused:
        prepare(spec_file(tmp_path, trainable="dqn", env="Pendulum-v1"))
    # The refusal names the first two that fit, in the order registered (sac before the toy); the toy is offered
    # below by the preflight taking it on Pendulum
    assert re.search(r"dqn needs a Discrete action space; Pendulum-v1 has Box\(.*\); use a trainable for continuous "
                     r"actions such as ppo or sac$", str(refused.value))
    assert prepare(spec_file(tmp_path, trainable=TOY, env="Pendulum-v1")).backend.name == TOY


@pytest.fixture
def toy_checkpoint(toy, tmp_path):
    """A trial of the toy as a search leaves it: the saved spec naming it, params.json, a checkpoint."""
    from tests.test_policy import write_trial
    from tune_runner.paths import SPEC_FILE
    from tune_runner.trainables.agents import build_learner

    learner = build_learner(TOY, CONFIG)
    learner.train_iteration()
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / SPEC_FILE).write_text(f"trainable: {TOY}\n")  # all that load_policy reads of it
    checkpoint = write_trial(tmp_path / "exp" / "OwnTOY_Pendulum-v1_00000", learner, CONFIG)
    yield learner, checkpoint
    learner.close()


def test_the_toys_policy_loads_and_exports_by_its_record(toy_checkpoint, tmp_path):
    from tune_runner import tune_rl_policy
    from tune_runner.results.policy import OwnPolicy, load_policy
    from tune_runner.results.pyfunc_model import save_policy

    learner, checkpoint = toy_checkpoint
    obs = np.random.default_rng(3).uniform(-1, 1, size=(16, 3)).astype(np.float32)
    policy = load_policy(checkpoint)
    assert isinstance(policy, OwnPolicy) and policy.kind == TOY and CALLS == ["sizes"]
    np.testing.assert_array_equal(policy.compute_actions(obs), learner.compute_actions(obs))
    folder = save_policy(checkpoint, learner=TOY, config=CONFIG, folder=tmp_path / "policy")
    exported = tune_rl_policy.Policy(folder)
    assert CALLS == ["sizes", "layers"] and exported.spec["learner"] == TOY
    np.testing.assert_array_equal(exported.predict(obs), learner.compute_actions(obs))
