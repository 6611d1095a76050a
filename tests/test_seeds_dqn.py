"""Our DQN with num_seeds = K (issue 16): each seed trains as it would alone (its own envs, replay buffer,
epsilon, target updates and Adam state), no seed draws another's transitions, checkpoints are exact and keep
the one-seed format per seed, a one-seed state of the code before still continues as it did, results carry
every seed and their aggregate, and rollout mode collects for all seeds."""

from __future__ import annotations

import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from tests.test_algos import MaskedEnv, same
from tune_runner.algos import DQN, DQNConfig
from tune_runner.algos.replay import SeedReplay
from tune_runner.algos.seeds import aggregate
from tune_runner.plugins import register_model

FIXTURE = Path(__file__).parent / "fixtures" / "dqn_state_k1.pkl"
MASKED_ID = "TuneRlMaskedTest-v0"
# Small and quick, but every part at work within 2-3 iterations: learning starts at 200 env steps, the
# buffer (capacity 1500) wraps, n-step returns, double Q, target updates every 300 env steps, an lr schedule.
SMALL = {"num_envs_per_env_runner": 4, "fcnet_hiddens": [16, 16], "n_step": 3, "train_batch_size": 32,
         "replay_buffer_config": {"capacity": 1500}, "target_network_update_freq": 300,
         "num_steps_sampled_before_learning_starts": 200, "lr": [[0, 1e-3], [2500, 2e-4]]}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def config(**overrides) -> DQNConfig:
    return DQNConfig.from_dict({**SMALL, **overrides})


def weights_close(k_learner: DQN, seed: int, alone: DQN, *, atol: float = 1e-5) -> None:
    """Seed `seed`'s Q and target networks in `k_learner` equal `alone`'s, to float rounding."""
    for net in ("q", "target"):
        ours, theirs = k_learner.get_state()["seeds"][seed][net], alone.get_state()[net]
        assert ours.keys() == theirs.keys()
        worst = max(float((ours[key] - theirs[key]).abs().max()) for key in theirs)
        assert worst <= atol, f"seed {seed}'s {net} network differs from its run alone by {worst}"


def same_state(a, b) -> bool:
    """Learner states equal bit for bit (tensors, arrays, numbers, RNG states). Left out: env snapshots (pickles,
    compared by training on) and the python generator, which set_state draws from to reseed envs it cannot
    restore (a one-seed learner does the same; nothing else draws from it)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a if k not in ("snapshot", "python"))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def masked_env() -> str:
    if MASKED_ID not in gym.registry:
        gym.register(MASKED_ID, entry_point=MaskedEnv)
    return MASKED_ID


# CartPole's seeds end episodes at different times, so with one gradient step per vector step (intensity None)
# they earn their steps at different times: some seeds sit out the last gradient step of a round (learning from
# 100 env steps, this happens within one iteration), and its buffer (capacity 600) wraps within that iteration's
# 1000 env steps a seed. Acrobot-v1 (6 features, 3 actions, 500-step episodes; never tuned for) runs dueling heads,
# mse and no gradient clipping; the masked env action masks.
@pytest.mark.parametrize(("env_id", "overrides", "iterations"), [
    ("CartPole-v1", {"training_intensity": None, "num_envs_per_env_runner": 8,
                     "replay_buffer_config": {"capacity": 600}, "num_steps_sampled_before_learning_starts": 100}, 1),
    ("Acrobot-v1", {"dueling": True, "td_error_loss_fn": "mse", "grad_clip": None, "double_q": False,
                    "training_intensity": 2}, 1),
    ("masked", {"training_intensity": 4, "num_steps_sampled_before_learning_starts": 0}, 1),
    ("CartPole-v1", {"training_intensity": 4, "num_steps_sampled_before_learning_starts": 0, "replay_buffer_config": {
        "type": "PrioritizedEpisodeReplayBuffer", "capacity": 2000, "alpha": 0.7, "beta": 0.5}}, 1),
], ids=["cartpole", "acrobot", "masked", "prioritized"])
def test_each_of_three_seeds_trains_as_it_would_alone(env_id, overrides, iterations):
    env_id = masked_env() if env_id == "masked" else env_id
    together = DQN(config(seed=11, num_seeds=3, **overrides), env_id=env_id)
    alone = [DQN(config(seed=s, **overrides), env_id=env_id) for s in together.seeds]
    for _ in range(iterations):
        result = together.train_iteration()
        for i, learner in enumerate(alone):
            own = learner.train_iteration()
            for key in ("env_steps", "episodes", "epsilon", "lr"):
                assert result[f"seed_{i}/{key}"] == own[key], key
            assert result[f"seed_{i}/qf_loss"] == pytest.approx(own["qf_loss"], rel=1e-4, abs=1e-6)
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)
        assert together.optimizer.steps[i] == learner.optimizer.steps[0]
        ours, theirs = together.get_state()["seeds"][i]["buffer"], learner.get_state()["buffer"]
        assert ours["added"] == theirs["added"] and ours["pos"] == theirs["pos"]
        assert all(np.array_equal(ours["data"][k], theirs["data"][k]) for k in theirs["data"])  # the same data
        if "priorities" in theirs:  # prioritized: each seed's priorities are its own, as alone
            np.testing.assert_allclose(ours["priorities"], theirs["priorities"], rtol=1e-4)
            assert len(set(theirs["priorities"].round(6))) > 10  # updated from TD errors, not all the initial one
    if env_id == "CartPole-v1" and overrides["training_intensity"] is None:
        assert len(set(together.optimizer.steps)) > 1, "no seed ever sat a step out: the test proves less"
    w = together.get_weights()["q"]["trunk.0.weight"]
    assert not np.allclose(w[0], w[1])  # independent runs, not copies


def test_a_population_of_three_configs_trains_each_as_its_own_config_would_alone():
    """Seeds that differ in lr (one a schedule of its own) and gamma (the n-step returns' discounts): each trains
    as the one-seed DQN of its own config (`member`), its replay data included."""
    population = {"lr": [1e-3, 3e-3, 5e-4], "gamma": [0.99, 0.9, 0.95]}
    together = DQN(config(seed=7, num_seeds=3, training_intensity=4, population=population), env_id="CartPole-v1")
    alone = [DQN(together.config.member(i), env_id="CartPole-v1") for i in range(3)]
    assert [learner.seeds[0] for learner in alone] == together.seeds
    result = together.train_iteration()
    for i, learner in enumerate(alone):
        own = learner.train_iteration()
        assert result[f"seed_{i}/lr"] == own["lr"] == population["lr"][i]
        assert result[f"seed_{i}/qf_loss"] == pytest.approx(own["qf_loss"], rel=1e-4, abs=1e-6)
        ours, theirs = together.get_state()["seeds"][i]["buffer"], learner.get_state()["buffer"]
        assert all(np.array_equal(ours["data"][k], theirs["data"][k]) for k in theirs["data"])
        weights_close(together, i, learner)
    discounts = [together.get_state()["seeds"][i]["buffer"]["data"]["discount"] for i in range(3)]
    assert [float(d.min()) for d in discounts] == pytest.approx([0.99 ** 3, 0.9 ** 3, 0.95 ** 3])  # n_step 3


def test_no_seed_ever_draws_another_seeds_transitions():
    replay = SeedReplay(3, 5, fields={"x": ((), np.int64), "seed_of": ((), np.int64)})
    rng = np.random.default_rng(0)
    for n in (4, 7, 3, 9):  # rows of all seeds mixed, more than a seed's capacity at once: every path of add
        seeds = rng.integers(0, 3, size=n)
        seeds[:6 if n == 9 else 0] = 1
        replay.add({"x": rng.integers(0, 1000, size=n), "seed_of": seeds, "seed": seeds})
    assert replay.sizes().tolist() == [5, 5, 5] and len(replay) == 15
    for i, buffer in enumerate(replay.buffers):
        assert (buffer.data["seed_of"] == i).all()
    alone = [np.random.default_rng(s) for s in (1, 2, 3)]
    batches = replay.minibatches([2, 0, 1], 64, [np.random.default_rng(s) for s in (1, 2, 3)])
    assert len(batches) == 2 and batches[0]["x"].shape == (3, 64)
    for u, batch in enumerate(batches):
        assert all((batch["seed_of"][i] == i).all() for i in range(3))
        for i, count in enumerate([2, 0, 1]):
            if u < count:  # seed i's draws are those its buffer alone makes
                assert np.array_equal(batch["x"][i], replay.buffers[i].sample(64, alone[i])["x"])


def test_results_hold_every_seed_and_the_aggregate():
    learner = DQN(config(num_seeds=3, seed_aggregate="mean"), env_id="CartPole-v1")
    result = learner.train_iteration()  # 1000 env steps a seed: episodes ended, gradient steps taken
    for name in ("episode_return_mean", "episode_len_mean", "qf_loss", "td_error_mean", "epsilon", "lr"):
        per_seed = [result[f"seed_{i}/{name}"] for i in range(3)]
        assert result[name] == aggregate(per_seed, "mean")
    assert result["env_steps"] == min(result[f"seed_{i}/env_steps"] for i in range(3)) == learner.env_steps
    assert result["episodes"] == min(result[f"seed_{i}/episodes"] for i in range(3)) > 0
    assert "seed_3/qf_loss" not in result and "seed_0/sps" not in result
    one = DQN(config(), env_id="CartPole-v1").train_iteration()
    assert not any(key.startswith("seed_") for key in one)  # one seed: the names it always had


@pytest.mark.parametrize("include_buffer", [True, False])
def test_a_k_seed_checkpoint_restores_exactly_and_each_seed_is_a_one_seed_checkpoint(include_buffer):
    original = DQN(config(num_seeds=3), env_id="CartPole-v1")
    original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state(include_buffer=include_buffer)))
    assert state["num_seeds"] == 3 and len(state["seeds"]) == 3
    restored = DQN(config(num_seeds=3), env_id="CartPole-v1")
    restored.set_state(state)
    assert restored.stats.lengths.any() and restored.nstep.live.any()  # mid-episode, n-step returns pending
    if not include_buffer:
        assert len(restored.buffer) == 0
        return
    lone = DQN(config(seed=original.seeds[2]), env_id="CartPole-v1")
    lone.set_state(state["seeds"][2])  # seed 2's part, in the one-seed format
    assert same(original.train_iteration(), restored.train_iteration())
    lone.train_iteration()
    assert same_state(original.get_state(), restored.get_state())  # bit for bit, buffers too
    weights_close(original, 2, lone)
    with pytest.raises(ValueError, match="state of 3 seed.*num_seeds=2"):
        DQN(config(num_seeds=2), env_id="CartPole-v1").set_state(state)


# Across machines, a float number is the same only within rounding: torch's CPU kernels (AVX2 on the machine
# that wrote the fixture, AVX-512 elsewhere) sum in other orders, so qf_loss was 3.1820122194 here and
# 3.1820122114 there. Counts and the format are exact everywhere; float results within 1e-6 of the old code's,
# weights within 1e-5 (one update of an lr around 1e-4 from them). Bit for bit holds on one machine: the restored
# old-format state, saved and restored again, trains on exactly as the first restore does.
def test_a_one_seed_state_written_before_seeds_existed_continues_as_it_did():
    saved = pickle.loads(FIXTURE.read_bytes())  # tests/fixtures/make_dqn_state_fixture.py, run on the old code
    learner = DQN(DQNConfig.from_dict(saved["config"]), env_id="CartPole-v1")
    learner.set_state(saved["state"])
    again = DQN(DQNConfig.from_dict(saved["config"]), env_id="CartPole-v1")
    again.set_state(pickle.loads(pickle.dumps(learner.get_state())))
    result = learner.train_iteration()
    assert result.keys() - {"sps"} == saved["next_result"].keys()
    for key, value in saved["next_result"].items():
        if isinstance(value, float):
            assert result[key] == pytest.approx(value, rel=1e-6), key
        else:
            assert result[key] == value, key
    after = learner.get_state(include_buffer=False)
    assert after.keys() == saved["next_state"].keys()  # one seed still saves that format
    for key in ("q", "target"):
        assert after[key].keys() == saved["next_state"][key].keys()
        for name, value in saved["next_state"][key].items():
            torch.testing.assert_close(after[key][name], value, rtol=1e-5, atol=1e-7, msg=f"{key}.{name}")
    for name in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(after["optimizer"][name], saved["next_state"]["optimizer"][name],
                                   rtol=1e-5, atol=1e-7, msg=name)
    assert (after["env_steps"], after["update_credit"], after["last_target_update"]) == tuple(
        saved["next_state"][k] for k in ("env_steps", "update_credit", "last_target_update"))
    assert same(again.train_iteration(), result)
    assert same_state(again.get_state(), learner.get_state())  # on this machine: bit for bit


@register_model("tune_rl_test_dqn_seeds_net")
class TwoLayer(nn.Module):
    def __init__(self, num_inputs, num_outputs, args):
        super().__init__()
        self.hidden, self.out = nn.Linear(num_inputs, 12), nn.Linear(12, num_outputs)

    def forward(self, obs):
        return self.out(torch.relu(self.hidden(obs)))


def test_a_registered_model_trains_k_seeds_through_vmap():
    values = {"model": "tune_rl_test_dqn_seeds_net", "fcnet_hiddens": [], "seed": 4}
    together = DQN(config(**values, num_seeds=2), env_id="CartPole-v1")
    alone = [DQN(config(**{**values, "seed": s}), env_id="CartPole-v1") for s in together.seeds]
    together.train_iteration()
    for learner in alone:
        learner.train_iteration()
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)
    assert set(together.get_state()["seeds"][0]["q"]) == {"hidden.weight", "hidden.bias", "out.weight", "out.bias"}


@pytest.mark.parametrize(("key", "value", "says"), [("num_seeds", 0, "must be > 0"),
                                                    ("num_seeds", 2.5, "must be a whole number"),
                                                    ("seed_aggregate", "iqr", "did you mean")])
def test_seed_settings_are_checked_naming_the_key(key, value, says):
    with pytest.raises(ValueError, match=f"(?s)DQNConfig.{key}.*{says}"):
        DQNConfig.from_dict({key: value})


def test_rollout_mode_collects_for_every_seed_and_each_seed_trains_as_it_would_alone():
    from tests.test_rollouts import stand_ins
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.rollouts import Workers

    def rollout_run(values: dict) -> tuple[DQN, list[dict]]:
        trainer = build_learner("dqn", values)
        workers, gather, replay = stand_ins("dqn", values)
        results = [trainer.train_iteration(Workers(trainer, gather=gather, count=len(workers), replay=replay))
                   for _ in range(2)]
        assert replay.size().tolist() == [len(b) for b in replay.buffer.buffers] and min(replay.size()) > 0
        return trainer, results

    # A steep epsilon schedule: seeds a few env steps apart explore differently enough to tell.
    values = {"env": "CartPole-v1", **SMALL, "seed": 7, "training_intensity": 8, "epsilon": [[0, 1.0], [2500, 0.0]]}
    together, results = rollout_run({**values, "num_seeds": 2})
    assert together.env.num_envs == 2 * SMALL["num_envs_per_env_runner"]
    for i, seed in enumerate(together.seeds):
        alone, own = rollout_run({**values, "seed": seed})
        for key in ("env_steps", "episodes", "epsilon", "lr"):  # epsilon: the workers follow each seed's steps
            assert [r[f"seed_{i}/{key}"] for r in results] == [r[key] for r in own], key
        assert [r[f"seed_{i}/qf_loss"] for r in results] == pytest.approx([r["qf_loss"] for r in own], rel=1e-4)
        weights_close(together, i, alone)
