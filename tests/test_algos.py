"""Our PPO and DQN learners (tune_runner.algos): oracles, exact restore, masks, and short learning runs."""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig, ReplayBuffer, compute_gae, masked_logits
from tune_runner.algos.distributions import sample_actions
from tune_runner.algos.dqn import dqn_targets
from tune_runner.algos.learner_envs import Step
from tune_runner.algos.optim import FlatAdam
from tune_runner.algos.ppo_loss import ppo_losses
from tune_runner.algos.replay import NStepAccumulator

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


# ---- pure functions -------------------------------------------------------------------------------


def test_gae_matches_a_hand_computed_oracle():
    gamma, lam = 0.9, 0.8
    # [time, env]. Env 0 terminates at t=1; env 1 is truncated at t=0. values[t + 1] is the value
    # of what step t returned (the final observation when step t ended the episode).
    rewards = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    values = np.array([[0.5, 1.0], [0.6, 2.0], [0.7, 3.0]])
    terminated = np.array([[False, False], [True, False], [False, False]])
    truncated = np.array([[False, True], [False, False], [False, False]])
    last_values = np.array([0.8, 4.0])

    # Env 0, backwards: delta_2 = 3 + 0.9 * 0.8 - 0.7 = 3.02                      -> A_2 = 3.02
    #   t=1 terminated: delta_1 = 2 + 0 - 0.6 = 1.4, nothing carried over          -> A_1 = 1.4
    #   delta_0 = 1 + 0.9 * 0.6 - 0.5 = 1.04; A_0 = 1.04 + 0.9 * 0.8 * 1.4         -> A_0 = 2.048
    # Env 1: delta_2 = 1 + 0.9 * 4 - 3 = 1.6                                       -> A_2 = 1.6
    #   delta_1 = 1 + 0.9 * 3 - 2 = 1.7; A_1 = 1.7 + 0.72 * 1.6                    -> A_1 = 2.852
    #   t=0 truncated: bootstraps from V(final obs) = 2.0 but carries nothing back:
    #   delta_0 = 1 + 0.9 * 2.0 - 1.0 = 1.8                                        -> A_0 = 1.8
    expected = np.array([[2.048, 1.8], [1.4, 2.852], [3.02, 1.6]])

    advantages, targets = compute_gae(rewards=rewards, values=values, terminated=terminated, truncated=truncated,
                                      last_values=last_values, gamma=gamma, lambda_=lam)
    np.testing.assert_allclose(advantages, expected, rtol=1e-12)
    np.testing.assert_allclose(targets, expected + values, rtol=1e-12)


def _ppo_losses(*, vf_clip_param, new_logp=None):
    # Ratios r = exp(new - old): two above 1 + clip, two below 1 - clip, two inside; A of both signs.
    ratios = torch.tensor([1.5, 0.5, 1.5, 0.5, 1.1, 0.9], dtype=torch.float64)
    return ppo_losses(
        new_logp=ratios.log() if new_logp is None else new_logp, old_logp=torch.zeros(6, dtype=torch.float64),
        advantages=torch.tensor([2.0, 2.0, -1.0, -1.0, 3.0, -2.0], dtype=torch.float64),
        values=torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 5.0], dtype=torch.float64, requires_grad=True),
        value_targets=torch.tensor([1.5, 0.0, 3.0, 4.0, -1.0, 5.0], dtype=torch.float64),
        entropy=torch.tensor([0.5, 0.7, 0.6, 0.2, 0.4, 0.4], dtype=torch.float64),
        clip_param=0.2, vf_clip_param=vf_clip_param, vf_loss_coeff=0.5, entropy_coeff=0.01)


def test_ppo_losses_match_a_hand_computed_oracle():
    # min(A * r, A * clip(r, 0.8, 1.2)) per sample:
    #   r=1.5, A=+2: min(3.0, 2.4) = 2.4    clipped: no gain from moving further up
    #   r=0.5, A=+2: min(1.0, 1.6) = 1.0    unclipped: the pessimistic side is kept
    #   r=1.5, A=-1: min(-1.5, -1.2) = -1.5 unclipped
    #   r=0.5, A=-1: min(-0.5, -0.8) = -0.8 clipped
    #   r=1.1, A=+3: 3.3;  r=0.9, A=-2: -1.8 (inside the range, unclipped)
    # sum 2.6, so policy_loss = -2.6 / 6.
    # Squared value errors: (-0.5)^2, 2^2, 0, (-4)^2, 1^2, 0 = 0.25, 4, 0, 16, 1, 0 (sum 21.25);
    # capped at vf_clip_param=3: 0.25, 3, 0, 3, 1, 0 (sum 7.25). Entropies sum to 2.8.
    # kl = mean((r - 1) - log r) = (2 * 0.0945349 + 2 * 0.1931472 + 0.0046898 + 0.0053605) / 6.
    clipped, unclipped = _ppo_losses(vf_clip_param=3.0), _ppo_losses(vf_clip_param=None)
    assert clipped["policy_loss"].item() == pytest.approx(-2.6 / 6, rel=1e-12)
    assert clipped["vf_loss"].item() == pytest.approx(7.25 / 6, rel=1e-12)
    assert unclipped["vf_loss"].item() == pytest.approx(21.25 / 6, rel=1e-12)
    assert clipped["entropy"].item() == pytest.approx(2.8 / 6, rel=1e-12)
    assert clipped["kl"].item() == pytest.approx(0.0975691, rel=1e-6)
    # total = policy + 0.5 * vf - 0.01 * entropy = (-2.6 + 3.625 - 0.028) / 6 with the cap,
    #                                              (-2.6 + 10.625 - 0.028) / 6 without.
    assert clipped["total_loss"].item() == pytest.approx(0.997 / 6, rel=1e-12)
    assert unclipped["total_loss"].item() == pytest.approx(7.997 / 6, rel=1e-12)


def test_ppo_clipped_terms_and_capped_value_errors_have_no_gradient():
    new_logp = torch.tensor([1.5, 0.5, 1.5, 0.5, 1.1, 0.9], dtype=torch.float64).log().requires_grad_()
    losses = _ppo_losses(vf_clip_param=3.0, new_logp=new_logp)
    losses["policy_loss"].backward()
    # d(-mean(A * r)) / d(log r) = -A * r / 6 where the unclipped term is the min, else 0.
    expected = [0.0, -2.0 * 0.5 / 6, 1.0 * 1.5 / 6, 0.0, -3.0 * 1.1 / 6, 2.0 * 0.9 / 6]
    np.testing.assert_allclose(new_logp.grad.numpy(), expected, rtol=1e-12, atol=1e-15)
    values = torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 5.0], dtype=torch.float64, requires_grad=True)
    ppo_losses(new_logp=torch.zeros(6), old_logp=torch.zeros(6), advantages=torch.zeros(6), values=values,
               value_targets=torch.tensor([1.5, 0.0, 3.0, 4.0, -1.0, 5.0], dtype=torch.float64),
               entropy=torch.zeros(6), clip_param=0.2, vf_clip_param=3.0, vf_loss_coeff=0.5,
               entropy_coeff=0.0)["vf_loss"].backward()
    # 2 * (V - target) / 6 where the squared error is under the cap; the errors 2 and -4 are capped.
    np.testing.assert_allclose(values.grad.numpy(), [-1.0 / 6, 0.0, 0.0, 0.0, 2.0 / 6, 0.0], rtol=1e-12)


def test_tanh_is_numpys_on_the_cpu_with_torchs_gradient_and_learners_and_logged_policies_share_it():
    from tune_runner import tune_rl_policy
    from tune_runner.algos.common import ACTIVATIONS

    assert ACTIVATIONS["tanh"] is tune_rl_policy.ACTIVATIONS["tanh"] is tune_rl_policy.Tanh
    tanh = tune_rl_policy.Tanh()
    torch.manual_seed(0)  # fixed numbers: NumPy's and torch's tanh differ in the last bit on about a third of them
    x = (torch.randn(3, 256, 16) * 3).requires_grad_()
    assert x.numel() >= tune_rl_policy.NUMPY_GRAD_MIN
    y = tanh(x)
    assert torch.equal(y, torch.from_numpy(np.tanh(x.detach().numpy())))  # NumPy's, bit for bit
    # In torch's own aligned memory (algos.common.to_tensor's reason); NumPy's own arrays are 16-byte aligned.
    assert all(tanh(torch.ones(n)).data_ptr() % 64 == 0 for n in range(1, 40))
    (y * torch.arange(16.0)).sum().backward()
    torch.testing.assert_close(x.grad, torch.arange(16.0) * (1 - y.detach() ** 2))
    for z in (x.detach(), x.detach().transpose(1, 2), x.detach().double()):  # without grad, strided, float64
        torch.testing.assert_close(tanh(z), torch.tanh(z))
    assert torch.equal(tanh(x.detach()[0, :4]), torch.from_numpy(np.tanh(x.detach()[0, :4].numpy())))  # any size
    # With a gradient, a small tensor takes torch's own tanh: the Function's Python would cost more than it saves.
    small = x.detach()[0, :100].clone().requires_grad_()
    assert torch.equal(tanh(small), torch.tanh(small))
    assert torch.autograd.gradcheck(tanh, (torch.randn(4, 5, dtype=torch.float64, requires_grad=True),))
    # Under torch.func's vmap (K registered models) it is torch's, and the gradient still flows.
    weights = torch.randn(3, 16, requires_grad=True)
    out = torch.func.vmap(lambda w: tanh(x.detach()[0] * w))(weights)
    torch.testing.assert_close(out, torch.tanh(x.detach()[0] * weights[:, None, :]))
    out.sum().backward()
    assert weights.grad is not None and weights.grad.abs().sum() > 0


def test_dqn_targets_match_a_hand_computed_oracle():
    # Rows: 1-step; 1-step truncated (terminated False: it bootstraps); 3-step with gamma 0.9
    # (reward 1 + 0.9 + 0.81 = 2.71, discount 0.9^3 = 0.729); 1-step terminated.
    batch = {"rewards": torch.tensor([1.0, 1.0, 2.71, 1.0], dtype=torch.float64),
             "discount": torch.tensor([0.9, 0.9, 0.729, 0.9], dtype=torch.float64),
             "terminated": torch.tensor([False, False, False, True]),
             "next_q_target": torch.tensor([[1.0, 3.0], [2.0, 0.0], [5.0, 4.0], [1.0, 3.0]], dtype=torch.float64)}
    online = torch.tensor([[2.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 9.0]], dtype=torch.float64)
    # max_a Q_target(s', a) = 3, 2, 5, (3 ignored): 1 + 2.7, 1 + 1.8, 2.71 + 3.645, 1.
    np.testing.assert_allclose(dqn_targets(**batch, next_q_online=None).numpy(), [3.7, 2.8, 6.355, 1.0],
                               rtol=1e-12)
    # Double Q: the online argmax picks actions 0, 1, 1, (1), which the target net values at 1, 0, 4:
    # 1 + 0.9, 1 + 0, 2.71 + 0.729 * 4, 1.
    np.testing.assert_allclose(dqn_targets(**batch, next_q_online=online).numpy(), [1.9, 1.0, 5.626, 1.0],
                               rtol=1e-12)


def test_n_step_transitions_give_targets_that_bootstrap_only_on_truncation():
    acc = NStepAccumulator(n=2, gamma=0.5, num_envs=2, obs_dim=1)
    out = []
    # Env 0 terminates on the third step, env 1 is truncated there; the fourth is their autoreset step.
    for t, (r, end, valid) in enumerate([(1.0, False, True), (2.0, False, True), (3.0, True, True),
                                         (0.0, False, False)]):
        step = Step(np.array([r, r], np.float32), np.array([end, False]), np.array([False, end]),
                    np.array([valid, valid]))
        out.append(acc.push(obs=np.full((2, 1), t, np.float32), actions=np.array([t, t]), step=step,
                            next_obs=np.full((2, 1), t + 1, np.float32), next_mask=None))
    rows = {k: np.concatenate([o[k] for o in out]) for k in out[0]}
    next_obs = torch.as_tensor(rows["next_obs"][:, 0], dtype=torch.float64)
    q_next = torch.stack([next_obs, 10.0 - next_obs], dim=1)  # max_a Q(s') = 10 - s' for s' <= 5
    targets = dqn_targets(rewards=torch.as_tensor(rows["rewards"], dtype=torch.float64),
                          discount=torch.as_tensor(rows["discount"], dtype=torch.float64),
                          terminated=torch.as_tensor(rows["terminated"]), next_q_target=q_next, next_q_online=None)
    got = sorted(zip(rows["obs"][:, 0].tolist(), rows["terminated"].tolist(), targets.tolist(), strict=True))
    # From obs 0 (both envs): 1 + 0.5 * 2 = 2, then 0.25 * max Q(2) = 0.25 * 8            -> 4.0
    # From obs 1, ends at obs 3: 2 + 0.5 * 3 = 3.5; terminated -> 3.5, truncated -> 3.5 + 0.25 * 7 = 5.25
    # From obs 2, ends at obs 3: 3;                  terminated -> 3.0, truncated -> 3 + 0.5 * 7 = 6.5
    assert got == [(0, False, 4.0), (0, False, 4.0), (1, False, 5.25), (1, True, 3.5), (2, False, 6.5),
                   (2, True, 3.0)]  # exact: every number here is a sum of powers of two


def test_masked_actions_are_never_sampled():
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    mask = rng.random((500, 6)) < 0.4
    mask[np.arange(500), rng.integers(0, 6, 500)] = True  # at least one allowed action per row
    mask_t = torch.as_tensor(mask)
    # Large logits on the forbidden actions: without the mask they would win almost always.
    logits = torch.where(mask_t, 0.0, 10.0) + torch.randn(500, 6, generator=gen)
    for _ in range(50):
        actions = sample_actions(masked_logits(logits, mask_t), generator=gen)
        assert mask[np.arange(500), actions.numpy()].all()
    # Every allowed action still gets drawn sometimes: the mask removes, it does not bias to one.
    counts = np.bincount(sample_actions(masked_logits(torch.zeros(20000, 3), torch.tensor([[True, False, True]])),
                                        generator=gen).numpy(), minlength=3)
    assert counts[1] == 0 and min(counts[0], counts[2]) > 9000


def test_a_row_with_no_allowed_action_keeps_its_logits():
    logits = torch.tensor([[1.0, 2.0]])
    assert torch.equal(masked_logits(logits, torch.tensor([[False, False]])), logits)


@pytest.mark.parametrize("config", [PPOConfig, DQNConfig])
def test_from_dict_names_the_closest_key(config):
    with pytest.raises(ValueError, match=r"unknown \w+Config key 'lrr'; did you mean 'lr'\?"):
        config.from_dict({"lrr": 0.1})
    assert config.from_dict({"lr": 0.1, "fcnet_hiddens": [32, 32]}).fcnet_hiddens == (32, 32)


def test_config_values_are_checked_and_lambda_is_an_alias():
    assert PPOConfig.from_dict({"lambda": 0.9}).lambda_ == 0.9
    with pytest.raises(ValueError, match="gamma=1.5"):
        PPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match="capacity"):
        DQNConfig(replay_buffer_config={"capacity": 0})


BAD_VALUES = [  # (key, value, what the message says)
    ("lr", 0, "must be > 0"), ("lr", -1.0e-3, "must be > 0"), ("lr", "1e-3", "must be a number"),
    ("gamma", 0.0, r"must be in \(0, 1\]"), ("gamma", 1.01, r"must be in \(0, 1\]"),
    ("gamma", -0.5, r"must be in \(0, 1\]"), ("num_envs_per_env_runner", 0, "must be > 0"),
    ("num_envs_per_env_runner", -8, "must be > 0"),
]


@pytest.mark.parametrize("config", [PPOConfig, DQNConfig])
@pytest.mark.parametrize(("key", "value", "says"), BAD_VALUES, ids=[f"{k}={v!r}" for k, v, _ in BAD_VALUES])
def test_from_dict_refuses_a_bad_value_naming_key_and_value(config, key, value, says):
    with pytest.raises(ValueError, match=says) as error:
        config.from_dict({key: value})
    message = str(error.value)
    assert f"{config.__name__}.{key}" in message and f"{key}={value!r}" in message and "\n" not in message


def test_gamma_of_one_is_allowed_and_a_minibatch_must_fit_in_the_train_batch():
    assert PPOConfig.from_dict({"gamma": 1.0}).gamma == DQNConfig.from_dict({"gamma": 1.0}).gamma == 1.0
    with pytest.raises(ValueError, match=r"^PPOConfig.minibatch_size must be <= train_batch_size, "
                                         r"got minibatch_size=512 > train_batch_size=256$"):
        PPOConfig.from_dict({"minibatch_size": 512, "train_batch_size": 256})
    assert PPOConfig.from_dict({"minibatch_size": 256, "train_batch_size": 256}).minibatch_size == 256


def test_epsilon_schedule_is_piecewise_linear_in_rllib_format():
    config = DQNConfig.from_dict({"epsilon": [[0, 1.0], [1000, 0.1], [2000, 0.0]]})
    assert [config.epsilon_at(s) for s in (0, 500, 1000, 1500, 10**6)] == pytest.approx([1.0, 0.55, 0.1, 0.05, 0.0])
    assert DQNConfig(epsilon=0.2).epsilon_at(123) == 0.2


@pytest.mark.parametrize(("algo", "config"), [(PPO, PPOConfig), (DQN, DQNConfig)], ids=["ppo", "dqn"])
def test_lr_schedule_in_rllib_format_drives_the_optimizer(algo, config):
    values = {"num_envs_per_env_runner": 4, "fcnet_hiddens": [8], "lr": [[0, 1.0e-3], [2000, 1.0e-4]]}
    if algo is PPO:
        values.update(train_batch_size=1000, minibatch_size=500, num_epochs=1)
    learner = algo(config.from_dict(values), env_id="CartPole-v1")
    def expected(steps: int) -> float:
        return 1.0e-3 - 9.0e-4 * min(steps, 2000) / 2000

    seen = []
    while learner.env_steps < 3000:
        at = learner.env_steps
        lr = learner.train_iteration()["lr"]
        seen.append(lr)
        # the schedule's value at some point of the iteration (PPO: its start; DQN: its last vector step)
        assert expected(learner.env_steps) - 1e-12 <= lr <= expected(at) + 1e-12
    assert len(seen) >= 3 and seen[0] <= 1.0e-3 and seen == sorted(seen, reverse=True)
    assert seen[-1] == pytest.approx(1.0e-4)
    assert learner.optimizer.lr == pytest.approx(1.0e-4)


@pytest.mark.parametrize("bad", [[[100, 1e-3]], [[0, 1e-3], [0, 1e-4]], [[0, 0.0]], [[0, 1e-3], [10, -1e-4]],
                                 [[0, "fast"]], [1e-3, 1e-4], []])
def test_a_bad_lr_schedule_is_refused_naming_the_key(bad):
    with pytest.raises(ValueError, match=r"^PPOConfig\.lr") as error:
        PPOConfig.from_dict({"lr": bad})
    assert "\n" not in str(error.value)


def _ints(start: int, stop: int) -> dict[str, np.ndarray]:
    return {"x": np.arange(start, stop, dtype=np.int64), "y": np.arange(start, stop, dtype=np.float32)[:, None]}


def test_replay_buffer_wraps_around_and_round_trips_its_state():
    buffer = ReplayBuffer(5, fields={"x": ((), np.int64), "y": ((1,), np.float32)})
    buffer.add_batch(_ints(0, 3))
    buffer.add_batch(_ints(3, 7))  # 7 rows into 5: 0 and 1 are overwritten
    assert (len(buffer), buffer.pos, buffer.added) == (5, 2, 7)
    assert buffer.data["x"].tolist() == [5, 6, 2, 3, 4]
    assert buffer.chronological()["x"].tolist() == [2, 3, 4, 5, 6]

    copy = ReplayBuffer(5, fields=buffer.fields)
    copy.set_state(pickle.loads(pickle.dumps(buffer.get_state())))
    a, b = buffer.sample(100, np.random.default_rng(1)), copy.sample(100, np.random.default_rng(1))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    buffer.add_batch(_ints(7, 8))
    copy.add_batch(_ints(7, 8))
    assert np.array_equal(buffer.data["x"], copy.data["x"]) and copy.pos == 3

    smaller = ReplayBuffer(3, fields=buffer.fields)  # e.g. PBT changed the capacity
    smaller.set_state(buffer.get_state())
    assert smaller.chronological()["x"].tolist() == [5, 6, 7]
    big_batch = ReplayBuffer(3, fields=buffer.fields)
    big_batch.add_batch(_ints(0, 8))
    assert big_batch.chronological()["x"].tolist() == [5, 6, 7]


def test_a_seed_restored_alone_keeps_its_own_n_step_slots_and_leaves_the_others_pending_starts():
    # Seeds 0 and 1 (one env each) in one accumulator; seed 1 starts over from a fresh accumulator's state after 2
    # steps (a population's refill). Seed 0 must emit what it emits alone, and seed 1 what a fresh one emits, in
    # the same order: a slot counter shared by all envs, reset by seed 1's state, overwrote seed 0's live starts.
    def step(t: int, valid: np.ndarray) -> Step:
        end = np.array([t == 5, t in (4, 8)])
        return Step(np.array([t, 10 * t], np.float32), end, np.zeros(2, bool), valid)

    def push(acc: NStepAccumulator, t: int, envs: slice) -> dict[str, np.ndarray]:
        valid = np.array([t != 6, t != 5])  # each env's autoreset step
        obs = np.array([[t], [100 + t]], np.float32)
        s = step(t, valid)
        return acc.push(obs=obs[envs], actions=np.array([t, t])[envs], next_obs=obs[envs] + 1, next_mask=None,
                        step=Step(s.rewards[envs], s.terminated[envs], s.truncated[envs], s.valid[envs]))

    together = NStepAccumulator(n=3, gamma=0.5, num_envs=2, obs_dim=1, envs_per_seed=1)
    seed0 = NStepAccumulator(n=3, gamma=0.5, num_envs=1, obs_dim=1)
    seed1 = NStepAccumulator(n=3, gamma=0.5, num_envs=1, obs_dim=1)
    for t in range(2):
        push(together, t, slice(None)), push(seed0, t, slice(0, 1))
    together.set_state(seed1.get_state(), slice(1, 2))
    for t in range(2, 10):
        out = push(together, t, slice(None))
        for seed, alone in enumerate((push(seed0, t, slice(0, 1)), push(seed1, t, slice(1, 2)))):
            rows = out["seed"] == seed
            for key in ("obs", "actions", "rewards", "discount", "terminated"):
                assert out[key][rows].tolist() == alone[key].tolist(), f"seed {seed}'s {key} at step {t}"
    slots = [together.get_state(envs)["slot"] for envs in (slice(0, 1), slice(1, 2))]
    assert slots == [seed0.get_state()["slot"], seed1.get_state()["slot"]] and slots[0] != slots[1]


def test_n_step_returns_stop_at_the_episode_end_and_bootstrap_only_on_truncation():
    acc = NStepAccumulator(n=2, gamma=0.5, num_envs=2, obs_dim=1)
    out = []
    # Env 0 terminates on the third step, env 1 is truncated there; the fourth is their autoreset step.
    steps = [(1.0, False, False, True), (2.0, False, False, True), (3.0, True, True, True), (0.0, False, False, False)]
    for t, (r, term, trunc, valid) in enumerate(steps):
        step = Step(np.array([r, r], np.float32), np.array([term, False]), np.array([False, trunc]),
                    np.array([valid, valid]))
        out.append(acc.push(obs=np.full((2, 1), t, np.float32), actions=np.array([t, t]), step=step,
                            next_obs=np.full((2, 1), t + 1, np.float32), next_mask=None))
    assert len(out[0]["rewards"]) == 0
    assert out[1]["rewards"].tolist() == [2.0, 2.0]  # 1 + 0.5 * 2, from obs 0 to obs 2
    assert out[1]["discount"].tolist() == [0.25, 0.25] and out[1]["next_obs"][:, 0].tolist() == [2, 2]
    last = out[2]  # the episode end flushes both pending starts of each env
    rows = zip(last["obs"][:, 0].tolist(), last["rewards"].tolist(), last["discount"].tolist(), strict=True)
    assert sorted(rows) == [(1, 3.5, 0.25), (1, 3.5, 0.25), (2, 3.0, 0.5), (2, 3.0, 0.5)]
    assert last["terminated"].sum() == 2  # env 0's two; env 1's truncated ones still bootstrap
    assert len(out[3]["rewards"]) == 0  # nothing pending survives the episode end


def _twin_nets():
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    b = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    b.load_state_dict(a.state_dict())
    return a, b


def test_flat_adam_takes_torch_adams_steps_and_clips_like_clip_grad_norm():
    ours_net, torch_net = _twin_nets()
    ours = FlatAdam(ours_net.parameters(), lr=0.05)
    reference = torch.optim.Adam(torch_net.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    for step in range(6):
        x, y = torch.randn(16, 3, generator=gen), torch.randn(16, 2, generator=gen)
        ours.zero_grad()
        reference.zero_grad()
        ((ours_net(x) - y) ** 2).mean().backward()
        ((torch_net(x) - y) ** 2).mean().backward()
        if step % 2:  # a tight clip every other step, so that it binds
            ours.clip_grad_norm_(0.1)
            torch.nn.utils.clip_grad_norm_(torch_net.parameters(), 0.1)
        ours.step()
        reference.step()
        for p, q in zip(ours_net.parameters(), torch_net.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # The parameters are views of the flat buffer: loading a module state writes through to it.
    ours_net.load_state_dict(torch_net.state_dict())
    assert torch.equal(ours.flat, torch.cat([q.detach().reshape(-1) for q in torch_net.parameters()]))


def test_flat_adam_refuses_the_state_of_another_network_size():
    net, _ = _twin_nets()
    state = FlatAdam(torch.nn.Linear(3, 4).parameters(), lr=0.1).state_dict()
    with pytest.raises(ValueError, match="optimizer state for 16 parameters, this one has 32"):
        FlatAdam(net.parameters(), lr=0.1).load_state_dict(state)


@pytest.mark.e2e  # a fresh interpreter importing torch and training both learners (3-4 s): with the e2e tests
def test_learners_never_import_torch_dynamo():
    # torch.optim imports torch._dynamo on the first optimizer built: seconds, on one thread.
    code = ("import sys; from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig; "
            "PPO(PPOConfig(train_batch_size=64, minibatch_size=32, num_envs_per_env_runner=4), "
            "env_id='CartPole-v1').train_iteration(); "
            "DQN(DQNConfig(num_steps_sampled_before_learning_starts=0, fcnet_hiddens=(8,)), "
            "env_id='CartPole-v1').train_iteration(); "
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]


# ---- learners ---------------------------------------------------------------------------------------


def small_ppo(**overrides) -> PPOConfig:
    return PPOConfig.from_dict({"train_batch_size": 256, "minibatch_size": 64, "num_epochs": 2,
                                "num_envs_per_env_runner": 4, "fcnet_hiddens": [16, 16], **overrides})


def small_dqn(**overrides) -> DQNConfig:
    # A capacity below the 2000 steps sampled makes the buffer wrap; n_step 3 leaves transitions pending.
    return DQNConfig.from_dict({"num_envs_per_env_runner": 4, "fcnet_hiddens": [16, 16], "n_step": 3,
                                "replay_buffer_config": {"capacity": 1500}, "target_network_update_freq": 300,
                                "num_steps_sampled_before_learning_starts": 200, "training_intensity": 4,
                                **overrides})


def same(a: dict, b: dict) -> bool:
    """Metrics equal, NaN included; `sps` is a timing."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) for k in a if k != "sps")


def same_weights(a, b) -> bool:
    wa, wb = a.get_weights(), b.get_weights()
    return all(np.array_equal(wa[net][k], wb[net][k]) for net in wa for k in wa[net])


@pytest.mark.parametrize(("algo", "config"), [(PPO, small_ppo()), (PPO, small_ppo(gym_env_vectorize_mode="sync")),
                                              (PPO, small_ppo(lr=[[0, 1e-3], [600, 1e-4]])), (DQN, small_dqn())],
                         ids=["ppo", "ppo-sync", "ppo-lr-schedule", "dqn"])
def test_set_state_continues_exactly(algo, config):
    original = algo(config, env_id="CartPole-v1")
    original.train_iteration()
    original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))  # as a checkpoint on disk would
    assert state["env"]["snapshot"] is not None
    restored = algo(config, env_id="CartPole-v1")
    restored.set_state(state)
    assert restored.stats.lengths.any()  # restored mid-episode, not at a convenient boundary
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
    assert same_weights(original, restored)


def test_same_seed_same_run_and_another_seed_differs():
    a, b, c = (PPO(small_ppo(seed=s), env_id="CartPole-v1") for s in (3, 3, 4))
    ma, mb, mc = a.train_iteration(), b.train_iteration(), c.train_iteration()
    assert same(ma, mb) and same_weights(a, b)
    assert not same(ma, mc)


def test_restore_without_an_env_snapshot_resets_the_envs_and_trains_on():
    original = PPO(small_ppo(), env_id="CartPole-v1")
    original.train_iteration()
    state = original.get_state()
    state["env"]["snapshot"] = None  # what an env that cannot be pickled leaves
    restored = PPO(small_ppo(), env_id="CartPole-v1")
    restored.set_state(state)
    assert restored.stats.episodes == original.stats.episodes and not restored.stats.lengths.any()
    assert same_weights(original, restored)
    assert restored.train_iteration()["env_steps"] > original.env_steps


def test_dqn_state_can_leave_the_buffer_out():
    learner = DQN(small_dqn(), env_id="CartPole-v1")
    learner.train_iteration()
    state = learner.get_state(include_buffer=False)
    assert state["buffer"] is None and len(pickle.dumps(state)) < len(pickle.dumps(learner.get_state())) / 2
    fresh = DQN(small_dqn(), env_id="CartPole-v1")
    fresh.set_state(state)
    assert len(fresh.buffer) == 0 and fresh.env_steps == learner.env_steps


def test_dqn_owes_gradient_steps_only_after_learning_starts_and_with_a_minibatch_in_the_replay():
    learner = DQN(DQNConfig(training_intensity=4, train_batch_size=64, fcnet_hiddens=(8,)), env_id="CartPole-v1")
    assert learner.config.num_steps_sampled_before_learning_starts == 1000  # the default, as shipped
    learner.env_steps = 999
    assert learner.updates_owed(32, replay_size=5000) == [0]  # before learning starts: nothing, no credit either
    learner.env_steps = 1000
    assert learner.updates_owed(32, replay_size=63) == [0]  # the replay holds less than one minibatch
    # 32 sampled env steps x intensity 4 = 128 trained transitions = 2 minibatches; fractions carry over.
    assert learner.updates_owed(32, replay_size=64) == [2]
    assert [learner.updates_owed(8, replay_size=64) for _ in range(4)] == [[0], [1], [0], [1]]


def test_autoreset_steps_are_not_counted_as_env_steps():
    learner = PPO(small_ppo(), env_id="CartPole-v1")
    batch = learner.collect(2000)
    # Every transition is in a finished or a running episode; the autoreset steps are in neither.
    assert batch["episode_lens"].sum() + learner.stats.lengths.sum() == batch["env_steps"] == learner.env_steps
    # One autoreset step follows each finished episode, unless it ended on the last step.
    assert batch["valid"].size - batch["env_steps"] == len(batch["episode_lens"]) - learner.env.resetting.sum()
    assert (batch["rewards"][~batch["valid"]] == 0).all()


class MaskedEnv(gym.Env):
    """Refuses forbidden actions loudly, so any learner that takes one fails the test."""

    observation_space = gym.spaces.Dict({"observations": gym.spaces.Box(-1, 1, (3,), np.float32),
                                         "action_mask": gym.spaces.MultiBinary(4)})
    action_space = gym.spaces.Discrete(4)

    def _obs(self):
        self.mask = self.np_random.random(4) < 0.5
        self.mask[self.np_random.integers(4)] = True
        return {"observations": self.np_random.uniform(-1, 1, 3).astype(np.float32),
                "action_mask": self.mask.astype(np.int8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if not self.mask[action]:
            raise AssertionError(f"masked action {action} taken; mask {self.mask}")
        self.t += 1
        return self._obs(), float(action), self.t >= 7, False, {}


@pytest.mark.parametrize("algo", [PPO, DQN])
def test_learners_only_take_allowed_actions(algo):
    if "TuneRlMaskedTest-v0" not in gym.registry:
        gym.register("TuneRlMaskedTest-v0", entry_point=MaskedEnv)
    config = small_ppo() if algo is PPO else small_dqn(num_steps_sampled_before_learning_starts=0)
    learner = algo(config, env_id="TuneRlMaskedTest-v0")
    result = learner.train_iteration()
    # NaN weights would hide here: argmax picks a NaN logit, the only one a one-hot mask leaves.
    assert all(math.isfinite(v) for k, v in result.items() if k.endswith("loss")), result
    assert all(np.isfinite(a).all() for net in learner.get_weights().values() for a in net.values())
    obs = {"observations": np.zeros((64, 3), np.float32), "action_mask": np.eye(4, dtype=np.int8)[np.arange(64) % 4]}
    for explore in (False, True):
        assert (learner.compute_actions(obs, explore=explore) == np.arange(64) % 4).all()


# ---- learning ---------------------------------------------------------------------------------------


def train_until(learner, *, target: float, max_env_steps: int) -> dict:
    result = {}
    while learner.env_steps < max_env_steps:
        result = learner.train_iteration()
        if result["episode_return_mean"] >= target:
            break
    return result


@pytest.mark.e2e  # trains for tens of seconds: not for the quick unit run
def test_ppo_learns_cartpole():
    config = PPOConfig(lr=1e-3, train_batch_size=2000, vf_clip_param=None, seed=0)
    result = train_until(PPO(config, env_id="CartPole-v1"), target=150, max_env_steps=60_000)
    assert result["episode_return_mean"] >= 150, result


@pytest.mark.e2e  # trains for tens of seconds: not for the quick unit run
def test_dqn_learns_cartpole():
    result = train_until(DQN(DQNConfig(seed=0), env_id="CartPole-v1"), target=100, max_env_steps=30_000)
    assert result["episode_return_mean"] >= 100, result
