"""Observation normalization (observation_filter: MeanStdFilter) and reward scaling (normalize_rewards) in our
PPO (issue 18): the statistics against numpy's over the same data, what the learner stores, exact checkpoints,
rollout workers' statistics merged into the learner's, and the same scaling in every loaded policy."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from tests.test_algos import same, same_weights, small_ppo
from tune_runner.algos import PPO
from tune_runner.algos.normalize import Moments, RewardScaler, RunningMeanStd, combined

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
PENDULUM = "Pendulum-v1"  # its angular speed spans +-8: far from mean 0, std 1


def test_running_statistics_merged_in_any_batches_are_numpys_over_all_the_data():
    rng = np.random.default_rng(0)
    data = rng.normal(loc=[3.0, -1.0], scale=[2.0, 0.1], size=(2, 300, 2))  # 2 seeds
    stats = RunningMeanStd(2, 2)
    for part in np.array_split(data, [5, 6, 100, 250], axis=1):
        stats.update(part)
    # The prior (count 1e-4 of mean 0, var 1) weighs next to nothing against 300 samples.
    np.testing.assert_allclose(stats.mean, data.mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(stats.var, data.var(axis=1), rtol=1e-4)
    assert stats.count.tolist() == pytest.approx([300.0001, 300.0001])
    both = combined([Moments(d.mean(1), d.var(1), np.full(2, 150.0)) for d in np.split(data, 2, axis=1)])
    np.testing.assert_allclose(both.mean, data.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(both.var, data.var(axis=1), rtol=1e-12)


def test_reward_scaling_divides_by_the_std_of_the_discounted_returns_so_far():
    rng = np.random.default_rng(1)
    rewards = rng.normal(-3.0, 2.0, size=60).astype(np.float32)
    scaler = RewardScaler(1, 1, gamma=0.9)
    returns, seen, scaled = 0.0, [], []
    for r in rewards:
        scaled.append(scaler(np.array([r]), valid=np.array([True]), done=np.array([False]))[0])
        returns = 0.9 * returns + r
        seen.append(returns)
    for t in range(10, 60):  # by hand: r_t / std(the discounted returns up to t)
        assert scaled[t] == pytest.approx(rewards[t] / np.std(seen[:t + 1]), rel=2e-3)
    # An episode's end starts its env's discounted return again; an autoreset step adds nothing to it.
    scaler(np.array([5.0]), valid=np.array([True]), done=np.array([True]))
    scaler(np.array([0.0]), valid=np.array([False]), done=np.array([False]))
    assert scaler.returns.tolist() == [[0.0]]


def test_stored_observations_are_scaled_by_the_statistics_of_every_raw_one_seen():
    learner = PPO(small_ppo(observation_filter="MeanStdFilter", train_batch_size=400), env_id=PENDULUM)
    raw = [learner.env.obs.copy()]
    step = learner.env.step

    def recording(actions):
        result = step(actions)
        raw.append(learner.env.obs.copy())
        return result

    learner.env.step = recording
    batch = learner.collect(400)
    raw = np.stack(raw[:-1])  # [time, env, 3]: what each step showed, before it was scaled
    flat = raw.reshape(-1, 3)
    stats = learner.obs_filter.stats
    np.testing.assert_allclose(stats.mean[0], flat.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats.var[0], flat.var(0), rtol=1e-3)
    # Step t was scaled with the statistics of steps 0..t (Pendulum's speed: far from std 1).
    t = len(raw) - 1
    seen = raw[:t + 1].reshape(-1, 3)
    expected = np.clip((raw[t] - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(batch["obs"][t], expected, rtol=1e-3, atol=1e-4)
    assert np.abs(batch["obs"]).max() <= 10.0 and flat[:, 2].std() > 2.0


def test_reported_returns_stay_raw_while_the_stored_rewards_are_scaled():
    plain = PPO(small_ppo(seed=4), env_id=PENDULUM)
    scaled = PPO(small_ppo(seed=4, normalize_rewards=True), env_id=PENDULUM)
    a, b = plain.collect(1000), scaled.collect(1000)  # the same weights and draws: the same episodes
    assert len(a["episode_returns"]) > 0
    np.testing.assert_array_equal(a["episode_returns"], b["episode_returns"])
    assert not np.allclose(a["rewards"], b["rewards"]) and np.abs(b["rewards"]).max() <= 10.0
    ratio = a["rewards"][a["valid"]] / b["rewards"][a["valid"]]
    assert (ratio > 0).all()  # scaled by a positive std, sign kept


@pytest.mark.parametrize("settings", [{"observation_filter": "MeanStdFilter"}, {"normalize_rewards": True},
                                      {"observation_filter": "MeanStdFilter", "normalize_rewards": True,
                                       "num_seeds": 2}], ids=["obs", "rewards", "both-2-seeds"])
def test_the_statistics_survive_a_checkpoint_exactly(settings):
    config = small_ppo(**settings)
    original = PPO(config, env_id=PENDULUM)
    for _ in range(2):
        original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    restored = PPO(config, env_id=PENDULUM)
    restored.set_state(state)
    for kept in ("obs_filter", "reward_scaler"):
        ours, theirs = getattr(original, kept), getattr(restored, kept)
        if ours is not None:
            for name in ("mean", "var", "count"):
                assert np.array_equal(getattr(ours.stats, name), getattr(theirs.stats, name))
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
    assert same_weights(original, restored)
    with pytest.raises(ValueError, match="holds no"):
        PPO(small_ppo(**settings), env_id=PENDULUM).set_state(
            PPO(small_ppo(num_seeds=settings.get("num_seeds", 1)), env_id=PENDULUM).get_state())


def test_a_rollout_workers_statistics_reach_the_learner():
    from tests.test_rollouts import stand_ins
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.rollouts import Workers

    config = {"env": PENDULUM, "num_envs_per_env_runner": 4, "train_batch_size": 400, "minibatch_size": 100,
              "num_epochs": 1, "fcnet_hiddens": [16], "seed": 3, "observation_filter": "MeanStdFilter",
              "normalize_rewards": True}
    trainer = build_learner("ppo", config)
    workers, gather, _ = stand_ins("ppo", config)  # 2 workers, each starting from the learner's statistics
    start = {kept: RunningMeanStd(1, 3 if kept == "obs_filter" else 1) for kept in ("obs_filter", "reward_scaler")}
    trainer.train_iteration(Workers(trainer, gather=gather, count=2))
    for kept, before in start.items():
        # The learner holds its start plus what each worker added to the same start: counts and sums add up.
        ours, theirs = getattr(trainer, kept).stats, [getattr(w, kept).stats for w in workers]
        added = [t.count - before.count for t in theirs]
        assert all(a > 0 for a in added)
        np.testing.assert_allclose(ours.count, before.count + sum(added), rtol=1e-12)
        sums = before.mean * before.count[:, None] + sum(t.mean * t.count[:, None] - before.mean * before.count[:, None]
                                                         for t in theirs)
        np.testing.assert_allclose(ours.mean, sums / ours.count[:, None], rtol=1e-9, atol=1e-12)
    seen = trainer.obs_filter.stats.count[0]
    trainer.train_iteration(Workers(trainer, gather=gather, count=2))  # the workers now act with the learner's
    for worker in workers:
        assert worker.obs_filter.stats.count[0] - seen == pytest.approx(200)  # 50 steps of its 4 envs
    assert trainer.obs_filter.stats.count[0] == pytest.approx(seen + 400)


def test_every_loaded_policy_scales_observations_as_the_learner_does(tmp_path):
    from tests.test_continuous import pendulum_observations
    from tests.test_policy import write_trial
    from tune_runner import tune_rl_policy
    from tune_runner.results import pyfunc_model as model
    from tune_runner.results.policy import load_policy
    from tune_runner.trainables.agents import build_learner

    config = {"env": PENDULUM, "env_config": {}, "num_envs_per_env_runner": 4, "train_batch_size_per_learner": 512,
              "minibatch_size": 128, "num_epochs": 2, "fcnet_hiddens": [16, 16], "seed": 6,
              "observation_filter": "MeanStdFilter"}
    learner = build_learner("ppo", config)
    learner.train_iteration()
    with torch.no_grad():
        [p for p in learner.pi.parameters()][-2].mul_(50.0)  # greedy actions spread over [-2, 2]
    checkpoint = write_trial(tmp_path / "exp" / "OwnPPO_Pendulum-v1_00000", learner, config)
    obs = pendulum_observations()
    expected = learner.compute_actions(obs)
    assert len(np.unique(expected.round(3))) > 20
    np.testing.assert_array_equal(load_policy(checkpoint).compute_actions(obs), expected)
    data = model.save_policy(checkpoint, learner="ppo", config=config, folder=tmp_path / "policy")
    np.testing.assert_array_equal(tune_rl_policy.Policy(data).predict(obs), expected)
    # Not a formality: without the statistics the actions differ.
    learner.obs_filter = None
    assert not np.allclose(learner.compute_actions(obs), expected)


@pytest.mark.parametrize(("key", "value", "says"), [("observation_filter", "MeanStd", "did you mean 'MeanStdFilter'"),
                                                    ("normalize_rewards", "yes", "true or false")])
def test_bad_normalization_settings_name_the_key(key, value, says):
    with pytest.raises(ValueError, match=f"{key}.*{says}|{says}.*{key}|{key}"):
        small_ppo(**{key: value})
