"""Our ppo/dqn as Tune trainables: exact checkpoint round trip, settings checks, the actor mode."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from tune_runner.trainables.audit import NonFiniteError, check_finite, computed
from tune_runner.trainables.catalog import backend
from tune_runner.trainables.own import OwnDQN, OwnPPO, check_config, own_trainable_class
from tune_runner.trainables.trial import learner_settings

PPO_CONFIG = {"env": "CartPole-v1", "env_config": {}, "num_envs_per_env_runner": 4,
              "train_batch_size_per_learner": 256, "minibatch_size": 64, "num_epochs": 2, "lr": 1e-3, "seed": 3}
DQN_CONFIG = {"env": "CartPole-v1", "env_config": {}, "num_envs_per_env_runner": 4, "seed": 5,
              "num_steps_sampled_before_learning_starts": 200, "replay_buffer_config.capacity": 2000,
              "train_batch_size": 32, "fcnet_hiddens": [32, 32]}


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def weights(trainable) -> list[np.ndarray]:
    return [a for net in trainable.learner.get_weights().values() for a in net.values()]


@pytest.mark.parametrize("cls, config", [(OwnPPO, PPO_CONFIG), (OwnDQN, DQN_CONFIG)], ids=["ppo", "dqn"])
def test_checkpoint_round_trip_gives_identical_next_update(cls, config, tmp_path):
    first = cls(config=dict(config))
    first.train()
    checkpoint = first.save(str(tmp_path / "ckpt"))
    second = cls(config=dict(config))
    second.restore(checkpoint)
    a, b = first.train(), second.train()
    for key in ("episode_return_mean", "env_steps", "episodes"):
        assert a[key] == b[key] or (np.isnan(a[key]) and np.isnan(b[key])), key
    for x, y in zip(weights(first), weights(second), strict=True):
        np.testing.assert_array_equal(x, y)
    first.stop()
    second.stop()


def test_reports_our_metric_names():
    trainable = OwnPPO(config=dict(PPO_CONFIG))
    result = trainable.train()
    assert {"episode_return_mean", "env_steps", "policy_loss", "vf_loss", "entropy", "kl", "sps"} <= set(result)
    assert result["env_steps"] >= 240
    trainable.stop()


def test_rllib_names_map_to_ours():
    settings = learner_settings({"env": "x", "num_env_runners": 2, "train_batch_size_per_learner": 512,
                                 "lambda": 0.9, "replay_buffer_config.capacity": 10})
    assert settings == {"train_batch_size": 512, "lambda_": 0.9, "replay_buffer_config": {"capacity": 10}}


def test_settings_and_values_are_checked_before_launch():
    assert backend("ppo").check_settings(["lr", "lrr", "replay_buffer_config.capacity"]) == [
        ("lrr", "not a setting of ppo; did you mean 'lr'?"),
        ("replay_buffer_config.capacity", backend("ppo").check_settings(["replay_buffer_config"])[0][1])]
    assert backend("dqn").check_settings(["replay_buffer_config.capacity", "target_network_update_freq"]) == []
    assert "num_env_runners" in check_config("ppo", {"env": "CartPole-v1", "num_env_runners": -1})
    assert check_config("ppo", dict(PPO_CONFIG)) is None
    assert backend("ppo").trainable_class() is OwnPPO and backend("dqn").name == "dqn"


def test_resources_one_bundle_per_rollout_worker():
    request = OwnPPO.default_resource_request({"num_env_runners": 2})
    assert request.bundles == [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}]
    assert OwnPPO.default_resource_request({}).bundles == [{"CPU": 1}]


def test_trial_device_follows_the_gpus_ray_assigned_fake_gpu(monkeypatch):
    # No GPU here or in CI: fake Ray's answer; the real check runs on a GPU machine.
    import ray
    import torch

    from tune_runner.trainables.trial import trial_device

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert trial_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a logical GPU: Ray's, not torch's
    assert trial_device() == "cpu"
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert trial_device() == "cpu"


def test_torch_threads_follow_the_trial_cpus_fake_runtime_context(monkeypatch):
    import ray

    from tune_runner.trainables.trial import trial_threads

    class Context:
        def get_assigned_resources(self):
            return {"CPU": 3.0}

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    assert trial_threads() == 1  # outside Ray: never asked (asking would start a local Ray)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    assert trial_threads() == 3


@pytest.mark.e2e  # a fresh process importing Ray, torch and a trainable (5-6 s): about Ray, so with the e2e tests
def test_outside_ray_the_trainable_starts_no_ray():
    """ray.get_runtime_context() starts a local Ray when none runs: a trainable built outside Ray must not
    ask it. In a fresh process, so that the suite's shared Ray (up once an e2e test ran) does not hide it."""
    import json
    import subprocess
    import sys

    probe = f"""
import json, ray
calls = []
def refuse(*args, **kwargs):
    calls.append(1)  # recorded: the code under test may swallow the error
    raise RuntimeError("ray.init called")
ray.init = refuse
from tune_runner.trainables.audit import node_id
from tune_runner.trainables.own import OwnPPO
from tune_runner.trainables.trial import trial_threads
trainable = OwnPPO(config={dict(PPO_CONFIG)!r})
result = trainable.train()
trainable.stop()
print(json.dumps({{"threads": trial_threads(), "node_id": node_id(), "result_node": result["node_id"],
                  "ray": ray.is_initialized(), "init_calls": len(calls)}}))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"threads": 1, "node_id": "", "result_node": "", "ray": False, "init_calls": 0}


# ---- losses are reported only when computed ----------------------------------------------------------


def shipped_dqn_small_config() -> dict:
    """A trial config of the shipped dqn_small space as it stands: its fixed values, and the first value
    of each searched range."""
    from tune_runner.spec.experiment import load_spec

    spec = load_spec("dqn_small")
    assert spec.trainable == "dqn"
    return {"env": spec.env, "env_config": spec.env_config, **spec.fixed, **{p.name: p.args[0] for p in spec.space}}


def test_shipped_dqn_small_reports_no_loss_before_its_first_gradient_step():
    config = shipped_dqn_small_config()
    assert config["num_steps_sampled_before_learning_starts"] == 1000  # the shipped value, not lowered
    trainable = OwnDQN(config=config)
    first = trainable.train()  # its ~960 valid env steps are short of 1000: no gradient step
    assert first["env_steps"] < 1000 and first["episodes"] > 0
    assert "qf_loss" not in first and "td_error_mean" not in first
    second = trainable.train()
    assert math.isfinite(second["qf_loss"]) and math.isfinite(second["td_error_mean"])
    assert set(first) | {"qf_loss", "td_error_mean"} == set(second)
    trainable.stop()


def test_the_nan_guard_judges_only_computed_values():
    check_finite({"episode_return_mean": 20.0, "env_steps": 964, "episodes": 44})  # no loss computed: fine
    for key in ("qf_loss", "td_error_mean", "policy_loss", "critic_loss"):  # the last a user agent's
        with pytest.raises(NonFiniteError, match=rf"^{key} is nan at 1,000 env steps; the trial diverged"):
            check_finite({"episode_return_mean": 20.0, "env_steps": 1000, key: math.nan})
    with pytest.raises(NonFiniteError, match="^loss is inf"):
        check_finite({"env_steps": 1000, "loss": math.inf})
    for value in (np.float32("nan"), np.float16("inf")):  # a user agent's loss straight from NumPy or torch .numpy()
        with pytest.raises(NonFiniteError, match=f"^loss is {float(value)}"):
            check_finite({"env_steps": 1000, "loss": value})
    check_finite({"env_steps": 1000, "loss": np.float32(0.5), "episodes": np.int64(3)})
    assert computed({"env_steps": 5, "policy_loss": None, "lr": 0.1}) == {"env_steps": 5, "lr": 0.1}


class LateLearner:
    """A user's agent that computes its loss from its second iteration on; `nan_at` makes it diverge."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--nan_at", type=int, default=0)

    def __init__(self, args):
        self.nan_at, self.iterations = args.nan_at, 0

    def train_iteration(self):
        self.iterations += 1
        loss = None if self.iterations == 1 else math.nan if self.iterations == self.nan_at else 0.5
        return {"episode_return_mean": 1.0, "env_steps": 100 * self.iterations, "policy_loss": loss}

    def compute_actions(self, obs, explore=False):
        return np.zeros(len(obs), np.int64)


def test_a_user_agent_reports_none_for_a_loss_it_did_not_compute(monkeypatch):
    from tune_runner.plugins import AGENTS, register_agent

    monkeypatch.setattr(AGENTS, "_entries", dict(AGENTS._entries))  # undone after the test
    register_agent("late_learner")(LateLearner)
    trainable = own_trainable_class("late_learner")(config={"env": "CartPole-v1", "nan_at": 3})
    first, second = trainable.train(), trainable.train()
    assert "policy_loss" not in first and second["policy_loss"] == 0.5
    with pytest.raises(NonFiniteError, match="^policy_loss is nan at 300 env steps"):
        trainable.train()  # a NaN it computed is still divergence
    trainable.stop()


def test_min_time_s_per_iteration_trains_several_learner_iterations_per_report(monkeypatch):
    # A clock that moves 0.125 s per learner iteration and a nanosecond per reading: how many iterations fit in
    # 0.3 s must not depend on the machine's speed or on what runs beside this test (another xdist worker's training)
    clock = {"now": 0.0}

    def perf_counter() -> float:
        clock["now"] += 1e-9
        return clock["now"]

    monkeypatch.setattr(time, "perf_counter", perf_counter)
    one = OwnPPO(config=dict(PPO_CONFIG))
    grouped = OwnPPO(config={**PPO_CONFIG, "min_time_s_per_iteration": 0.3})
    calls = []
    for trainable in (one, grouped):
        def iteration(train_iteration=trainable.learner.train_iteration, trainable=trainable):
            calls.append(trainable)
            clock["now"] += 0.125
            return train_iteration()

        monkeypatch.setattr(trainable.learner, "train_iteration", iteration)
    try:
        single, result = one.train(), grouped.train()
        # One learner iteration a report, or as many as start within 0.3 s: 0.125, 0.25, then 0.375 ends it
        assert calls == [one, grouped, grouped, grouped]
        assert single["env_steps"] <= 256 and result["env_steps"] == grouped.learner.env_steps > 2 * 256
        assert result["sps"] == pytest.approx(result["env_steps"] / 0.375)  # over all three iterations, not the last
        assert grouped.train()["training_iteration"] == 2  # Tune counts reports, not learner iterations
        assert len(calls) == 7
    finally:
        one.stop()
        grouped.stop()
    for bad in (-1, "0.1", True, 1e9):
        assert check_config("ppo", {**PPO_CONFIG, "min_time_s_per_iteration": bad}).startswith(
            f"min_time_s_per_iteration must be seconds from 0 to 3600 (or null: one learner iteration a report), "
            f"got {bad!r}")
    assert check_config("ppo", {**PPO_CONFIG, "min_time_s_per_iteration": None}) is None
