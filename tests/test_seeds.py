"""The pieces of K-seed learners (issue 16): seed derivation, the IQM and the other aggregates, per-seed
results, the batched MLP and the per-seed Adam. No learner runs here (test_seeds_ppo.py; minibatch plans:
test_seed_streams.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tune_runner.algos.batched import BatchedMLP, orthogonal_mlps
from tune_runner.algos.common import mlp
from tune_runner.algos.optim import SeedAdam
from tune_runner.algos.seeds import SEED_STRIDE, aggregate, derived_seeds, iqm, seed_metrics

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


# ---- aggregates -------------------------------------------------------------------------------------


def test_iqm_is_the_mean_of_the_middle_half_by_hand():
    # 4 values: the middle two. 8 values: the middle four.
    assert iqm([100.0, 1.0, 3.0, 2.0]) == 2.5
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5
    # 3 values, sorted 1, 2, 10: the middle half of the mass [1/4, 3/4] takes 1/12 of 1, all 1/3 of 2 and
    # 1/12 of 10: (1/12 * 1 + 4/12 * 2 + 1/12 * 10) / (1/2) = (1 + 8 + 10) / 6.
    assert iqm([10.0, 1.0, 2.0]) == pytest.approx(19 / 6)
    # 5 values, sorted 1, 2, 3, 4, 100: shares 0.15, 0.2, 0.15 of 2, 3, 4 -> (3*2 + 4*3 + 3*4) / 10.
    assert iqm([4.0, 100.0, 1.0, 3.0, 2.0]) == pytest.approx(3.0)
    assert iqm([7.0]) == 7.0 and iqm([1.0, 4.0]) == 2.5  # one or two values: their mean


def test_iqm_agrees_with_scipy_trim_mean_where_that_is_defined_the_same_way():
    values = np.random.default_rng(0).normal(size=12)
    middle = np.sort(values)[3:9]  # 12 values: trim 3 at each end
    assert iqm(values) == pytest.approx(middle.mean())


def test_aggregate_by_each_rule_and_nan_does_not_hide():
    values = [3.0, 1.0, 10.0, 2.0]
    assert aggregate(values) == 2.5  # iqm by default
    assert [aggregate(values, how) for how in ("mean", "min", "median")] == [4.0, 1.0, 2.5]
    assert math.isnan(aggregate([1.0, float("nan"), 3.0], "min"))
    with pytest.raises(ValueError, match="seed aggregate 'iq'.*iqm"):
        aggregate(values, "iq")


def test_seed_metrics_reports_each_seed_and_aggregates_counters_as_the_minimum():
    per_seed = [{"episode_return_mean": 10.0, "env_steps": 1000, "episodes": 5, "policy_loss": 0.1},
                {"episode_return_mean": 30.0, "env_steps": 990, "episodes": 7},  # took no gradient step
                {"episode_return_mean": 20.0, "env_steps": 1004, "episodes": 6, "policy_loss": 0.3}]
    result = seed_metrics(per_seed, how="mean")
    assert result["seed_1/episode_return_mean"] == 30.0 and "seed_1/policy_loss" not in result
    assert result["seed_2/env_steps"] == 1004
    assert result["episode_return_mean"] == 20.0
    assert (result["env_steps"], result["episodes"]) == (990, 5)
    assert result["policy_loss"] == pytest.approx(0.2)  # over the seeds that computed it
    assert seed_metrics(per_seed[:1]) == per_seed[0]  # one seed: its own names, nothing added


# ---- seeds ------------------------------------------------------------------------------------------


def test_derived_seeds_start_at_the_configs_seed_and_keep_env_streams_apart():
    assert derived_seeds(7, 3) == [7, 7 + SEED_STRIDE, 7 + 2 * SEED_STRIDE]
    # A vector env seeds env j with seed + j; rollout workers add 1000 * (w + 1). With 1024 envs per seed,
    # 32 seeds and 8 workers, no two envs anywhere share a stream.
    streams = [s + 1000 * w + j for s in derived_seeds(0, 32) for w in range(9) for j in range(1024)]
    assert len(set(streams)) < len(streams)  # the workers' offsets overlap within one seed's envs...
    per_seed = [{s + 1000 * w + j for w in range(9) for j in range(1024)} for s in derived_seeds(0, 32)]
    assert sum(map(len, per_seed)) == len(set().union(*per_seed))  # ...as they always did; never across seeds


# ---- batched layers and optimizer -------------------------------------------------------------------


def nets(k: int, sizes=(3, 8, 8, 2)) -> list[torch.nn.Sequential]:
    torch.manual_seed(0)
    return [mlp(list(sizes), "tanh") for _ in range(k)]


def init_layers(net: torch.nn.Sequential, *, out_gain: float) -> torch.nn.Sequential:
    """How PPO initialised one seed's MLP before its seeds were built at once (the oracle of orthogonal_mlps)."""
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    for layer in linears:
        torch.nn.init.orthogonal_(layer.weight, gain=out_gain if layer is linears[-1] else math.sqrt(2))
        torch.nn.init.zeros_(layer.bias)
    return net


@pytest.mark.parametrize("hidden", [[32, 32], [16, 40], []], ids=["32x32", "wide", "one-layer"])
@pytest.mark.parametrize("seeds", [[3], [3, 1_000_003, 2_000_003]], ids=["K1", "K3"])
def test_orthogonal_mlps_give_each_seed_the_weights_its_own_build_draws(hidden, seeds):
    """Each seed's policy and value nets as the one-seed build made them in turn under torch.manual_seed(seed):
    nn.Linear's init (overwritten, but it moves the stream) then orthogonal_, bit for bit."""
    shapes = [([4, *hidden, 2], 0.01), ([4, *hidden, 1], 1.0)]
    pi, vf = orthogonal_mlps(seeds, [(mlp(sizes, "tanh"), gain) for sizes, gain in shapes], device=torch.device("cpu"))
    for i, seed in enumerate(seeds):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            own = [init_layers(mlp(sizes, "tanh"), out_gain=gain) for sizes, gain in shapes]
        for batched, net in zip((pi, vf), own, strict=True):
            state = batched.seed_state(i)
            assert state.keys() == net.state_dict().keys()
            assert all(torch.equal(state[key], value) for key, value in net.state_dict().items())
    assert pi.num_seeds == len(seeds)


def test_batched_mlp_is_each_seeds_own_network():
    seqs = nets(3)
    batched = BatchedMLP(seqs)
    x = torch.randn(3, 5, 3)
    out = batched(x)
    for i, seq in enumerate(seqs):
        torch.testing.assert_close(out[i], seq(x[i]))
        assert batched.seed_state(i).keys() == seq.state_dict().keys()
    single = BatchedMLP(seqs[:1])
    assert torch.equal(single(x[:1])[0], seqs[0](x[0]))  # one seed: nn.Linear's op itself, bit for bit


@pytest.mark.parametrize("sizes", [(4, 64, 64, 2), (5, 64, 32, 1)])
def test_tanh_mlp_node_gives_the_layer_by_layer_numbers_bit_for_bit(sizes):
    """K seeds' tanh MLP runs as one autograd node (TanhMLP) with its activations overwritten in place: its output,
    its gradients and the next forward pass after SeedAdam steps are those of the layers one by one, to the bit."""
    runs = []
    for fused in (False, True):
        batched = BatchedMLP(nets(8, sizes))
        assert batched._tanh_width == min(sizes[1:-1])
        if not fused:
            batched._tanh_width = 0  # the layers one by one
        adam = SeedAdam(list(batched.parameters()), num_seeds=8, lr=[1e-2] * 4 + [3e-3] * 4)
        gen = torch.Generator().manual_seed(2)
        for _ in range(3):
            x, g = torch.randn(8, 64, sizes[0], generator=gen), torch.randn(8, 64, sizes[-1], generator=gen)
            adam.zero_grad()
            out = batched(x)
            assert (type(out.grad_fn).__name__ == "TanhMLPBackward") == fused
            (out * g).sum().backward()
            adam.step()
        with torch.no_grad():
            runs.append((out.detach(), adam.grad.clone(), adam.flat.clone(), batched(x)))
    for name, plain, fused in zip(("output", "gradient", "parameters", "no-grad output"), *runs, strict=True):
        assert torch.equal(plain, fused), name


def test_seed_adam_clips_and_steps_each_seed_alone_and_leaves_a_sat_out_seed_untouched():
    seqs, copies = nets(3), nets(3)
    batched = BatchedMLP(seqs)
    ours = SeedAdam(list(batched.parameters()), num_seeds=3, lr=[0.05, 0.01, 0.02])
    references = [torch.optim.Adam(c.parameters(), lr=lr) for c, lr in zip(copies, (0.05, 0.01, 0.02), strict=True)]
    gen = torch.Generator().manual_seed(1)
    for step in range(6):
        x, y = torch.randn(3, 16, 3, generator=gen), torch.randn(3, 16, 2, generator=gen) * (1 + 10 * step)
        active = np.array([True, step % 2 == 0, step != 3])  # seed 1 sits out every other step, seed 2 once
        before = batched.seed_state(1)
        ours.zero_grad()
        ((batched(x) - y) ** 2).mean(dim=(1, 2)).sum().backward()
        ours.clip_grad_norm_(0.5)  # binds for the large targets: per seed, not over all seeds
        ours.step(active)
        for i in np.flatnonzero(active):
            references[i].zero_grad()
            ((copies[i](x[i]) - y[i]) ** 2).mean().backward()
            torch.nn.utils.clip_grad_norm_(copies[i].parameters(), 0.5)
            references[i].step()
        for i, copy in enumerate(copies):
            for key, value in copy.state_dict().items():
                torch.testing.assert_close(batched.seed_state(i)[key], value, rtol=1e-5, atol=1e-6)
        if not active[1]:
            assert all(torch.equal(before[k], v) for k, v in batched.seed_state(1).items())
    assert ours.steps.tolist() == [6, 3, 5]
    assert ours.seed_state_dict(1)["exp_avg"].shape == (sum(p.numel() for p in copies[1].parameters()),)


def test_seed_adam_steps_each_seed_to_the_bits_of_a_one_seed_adam_whatever_its_lr_and_step_count():
    # A population's seeds have their own lrs, and a refilled seed its own step count; each must land on the
    # one-seed optimizer's bits (issue 43): a last-bit difference grows chaotically in DQN.
    gen = torch.Generator().manual_seed(2)
    ours = SeedAdam([torch.nn.Parameter(torch.randn(3, 500, generator=gen))], num_seeds=3, lr=[1e-3, 2e-3, 3e-3])
    alone = [SeedAdam([torch.nn.Parameter(ours.flat[i].clone())], num_seeds=1, lr=lr)
             for i, lr in enumerate(ours.lr)]
    for step in range(5):
        active = np.array([True, step != 1, step % 2 == 0])
        grad = torch.randn(3, 500, generator=gen)
        ours.grad.copy_(grad)
        ours.step(active if step else None)
        for i in np.flatnonzero(active if step else [True] * 3):
            alone[i].grad.copy_(grad[i])
            alone[i].step()
        for i, one in enumerate(alone):
            assert torch.equal(ours.flat[i], one.flat[0]), f"seed {i} after step {step}"
            assert torch.equal(ours.exp_avg_sq[i], one.exp_avg_sq[0])
