"""The learner settings ARLBench's spaces search (issue 17, item 1), each against a hand-computed oracle:
PPO without advantage normalization, DQN without a target network, DQN's epsilon by start, end and steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig, compute_gae

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _advantages_seen(normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the advantages of one PPO batch as the first minibatch update saw them, the batch's raw GAE)."""
    learner = PPO(PPOConfig(num_envs_per_env_runner=2, train_batch_size=32, minibatch_size=32, num_epochs=1,
                            normalize_advantage=normalize, seed=5), env_id="CartPole-v1")
    batch = learner.collect(32)
    values, last_values = learner._values(batch["obs"], batch["last_obs"])
    raw, _ = compute_gae(rewards=batch["rewards"], values=values, terminated=batch["terminated"],
                         truncated=batch["truncated"], last_values=last_values, gamma=0.99, lambda_=0.95)
    raw = raw[batch["valid"]]
    seen = []
    update = learner._update
    learner._update = lambda mb, **kw: (seen.append(mb["advantages"].numpy().copy()), update(mb, **kw))[1]
    learner.learn(batch)
    return np.sort(seen[0]), np.sort(raw)


def test_ppo_advantages_are_standardized_by_default_and_raw_without_it():
    seen, raw = _advantages_seen(normalize=True)
    np.testing.assert_allclose(seen, np.sort((raw - raw.mean()) / (raw.std() + 1e-8)), rtol=1e-5, atol=1e-6)
    seen, raw = _advantages_seen(normalize=False)
    assert raw.std() > 0.1  # raw GAE here is far from standardized: the two cases differ
    np.testing.assert_allclose(seen, raw, rtol=1e-5, atol=1e-6)


def _dqn(use_target_network: bool) -> DQN:
    return DQN(DQNConfig(num_envs_per_env_runner=2, train_batch_size=8, fcnet_hiddens=(8,), seed=3, double_q=False,
                         use_target_network=use_target_network, target_network_update_freq=1), env_id="CartPole-v1")


def _minibatch(learner: DQN) -> dict[str, np.ndarray]:
    learner.buffer.add(learner.collect(16)["transitions"])
    return learner.buffer.minibatches([1], 8, [np.random.default_rng(0)])[0]


def test_without_a_target_network_dqn_bootstraps_from_its_q_network():
    """The oracle: r + discount * max_a Q(s', a) by the Q network itself (a step's target by hand), whatever the
    target network holds, and the step equals one with a target network that is a copy of the Q network."""
    alone, copied = _dqn(False), _dqn(True)
    sample = _minibatch(alone)
    with torch.no_grad():
        for p in alone.target.parameters():
            p.add_(torch.randn_like(p))  # garbage the learner must not read
        next_q = alone.q(torch.as_tensor(sample["next_obs"][0])).max(-1).values.numpy()
        q = alone.q(torch.as_tensor(sample["obs"][0])).gather(-1, torch.as_tensor(sample["actions"][0])[:, None])
    by_hand = sample["rewards"][0] + sample["discount"][0] * np.where(sample["terminated"][0], 0.0, next_q)
    td = np.abs(q.squeeze(-1).numpy() - by_hand).mean()
    copied.target.load_seed_state(0, copied.q.seed_state(0))
    losses = alone._update(sample, None)
    assert float(losses[1]) == pytest.approx(td, rel=1e-5)  # mean |TD error| against the hand-made target
    copied._update(sample, None)
    for a, b in zip(alone.q.parameters(), copied.q.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    before = [p.clone() for p in alone.target.parameters()]
    alone.seed_env_steps[:] = 10_000
    alone.update_target()  # never copied: there is no target network to keep
    assert all(torch.equal(a, b) for a, b in zip(before, alone.target.parameters(), strict=True))


def test_epsilon_by_start_end_and_steps_is_rllibs_linear_schedule():
    config = DQNConfig(initial_epsilon=0.9, final_epsilon=0.1, epsilon_timesteps=4000)
    assert config.epsilon == ((0, 0.9), (4000, 0.1))
    by_hand = {0: 0.9, 1000: 0.7, 2000: 0.5, 4000: 0.1, 50_000: 0.1}
    assert {s: round(config.epsilon_at(s), 12) for s in by_hand} == by_hand


@pytest.mark.parametrize(("values", "message"), [
    ({"initial_epsilon": 0.9}, "DQNConfig.initial_epsilon needs final_epsilon and epsilon_timesteps too"),
    ({"initial_epsilon": 0.9, "final_epsilon": 0.1, "epsilon_timesteps": 10, "epsilon": 0.2},
     "DQNConfig.epsilon and initial_epsilon both set the exploration schedule; keep one"),
    ({"initial_epsilon": 1.5, "final_epsilon": 0.1, "epsilon_timesteps": 10}, "must be a number in [0, 1]"),
    ({"initial_epsilon": 0.9, "final_epsilon": 0.1, "epsilon_timesteps": 0}, "must be a positive whole number"),
])
def test_a_half_given_or_conflicting_epsilon_is_refused(values, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DQNConfig.from_dict(values)


# ---- prioritized replay -----------------------------------------------------------------------------------

def _replay(alpha: float, beta: float, size: int = 4):
    from tune_runner.algos.replay import Prioritized, SeedReplay

    replay = SeedReplay(1, 8, fields={"x": ((), np.int64), "seed": ((), np.int64)},
                        prioritized=Prioritized(alpha=alpha, beta=beta, epsilon=0.0))
    replay.add({"x": np.arange(size), "seed": np.zeros(size, dtype=np.int64)})
    return replay


def test_prioritized_draws_by_priority_and_weights_by_hand():
    """Priorities 1, 2, 3, 4 (alpha 1): rows drawn with probability 0.1 ... 0.4, and with beta 1 the weights are
    (N P)^-1 over the largest, (N * 0.1)^-1: 1, 1/2, 1/3, 1/4."""
    replay = _replay(alpha=1.0, beta=1.0)
    replay.update_priorities(np.array([[0, 1, 2, 3]]), np.array([[1.0, 2.0, 3.0, 4.0]]), np.array([True]))
    (batch,) = replay.minibatches([1], 40_000, [np.random.default_rng(0)])
    rows, weights = batch["rows"][0], batch["weights"][0]
    np.testing.assert_array_equal(batch["x"][0], rows)  # the data of the rows drawn
    np.testing.assert_allclose(np.bincount(rows, minlength=4) / len(rows), [0.1, 0.2, 0.3, 0.4], atol=0.01)
    np.testing.assert_allclose(weights, np.array([1.0, 1 / 2, 1 / 3, 1 / 4])[rows], rtol=1e-6)


def test_alpha_flattens_the_draws_and_a_new_row_gets_the_largest_priority():
    replay = _replay(alpha=0.5, beta=0.0)
    replay.update_priorities(np.array([[0, 1]]), np.array([[9.0, 1.0]]), np.array([True]))  # p^0.5: 3, 1, 1, 1
    replay.add({"x": np.array([4]), "seed": np.zeros(1, dtype=np.int64)})  # a new row: max p = 9, so 3 too
    np.testing.assert_allclose(replay.priorities[0, :5], [3.0, 1.0, 1.0, 1.0, 3.0])
    (batch,) = replay.minibatches([1], 40_000, [np.random.default_rng(1)])
    np.testing.assert_allclose(np.bincount(batch["rows"][0], minlength=5) / 40_000, np.array([3, 1, 1, 1, 3]) / 9,
                               atol=0.01)
    assert np.all(batch["weights"] == 1.0)  # beta 0: no correction


def test_the_dqn_loss_weights_each_sample_and_a_step_sends_its_td_errors_back():
    learner = DQN(DQNConfig(num_envs_per_env_runner=2, train_batch_size=8, fcnet_hiddens=(8,), seed=3,
                            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 64}),
                  env_id="CartPole-v1")
    assert learner.config.prioritized.alpha == 0.6 and learner.config.prioritized.beta == 0.4  # RLlib's defaults
    learner.buffer.add(learner.collect(16)["transitions"])
    size = learner.buffer.sizes()[0]
    learner.buffer.update_priorities(np.arange(size)[None], np.linspace(0.1, 3.0, size)[None], np.array([True]))
    (sample,) = learner.buffer.minibatches([1], 8, [np.random.default_rng(0)])
    assert sample["weights"][0].std() > 0.05  # unequal weights: the weighting is visible in the loss
    with torch.no_grad():
        q = learner.q(torch.as_tensor(sample["obs"][0])).gather(-1, torch.as_tensor(sample["actions"][0])[:, None])
        next_q = learner.target(torch.as_tensor(sample["next_obs"][0]))
        best = learner.q(torch.as_tensor(sample["next_obs"][0])).argmax(-1, keepdim=True)  # double Q
        next_v = next_q.gather(-1, best).squeeze(-1).numpy()
    target = sample["rewards"][0] + sample["discount"][0] * np.where(sample["terminated"][0], 0.0, next_v)
    td = q.squeeze(-1).numpy() - target
    huber = np.where(np.abs(td) < 1, 0.5 * td ** 2, np.abs(td) - 0.5)
    losses = learner.train_on([sample], [1], replay=_Own(learner))
    assert losses[0, 0] == pytest.approx(float(np.mean(sample["weights"][0] * huber)), rel=1e-5)
    rows = sample["rows"][0]
    np.testing.assert_allclose(learner.buffer.priorities[0, rows], (np.abs(td) + 1e-6) ** 0.6, rtol=1e-4)


class _Own:
    def __init__(self, learner):
        self.learner = learner

    def update_priorities(self, rows, td_errors, active):
        self.learner.buffer.update_priorities(rows, td_errors, active)


def test_a_uniform_replay_has_no_priorities_and_bad_settings_are_refused():
    assert DQNConfig().prioritized is None and DQNConfig(replay_buffer_config={"capacity": 10}).prioritized is None
    with pytest.raises(ValueError, match="beta in \\[0, 1\\]"):
        DQNConfig(replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "beta": 2.0})
