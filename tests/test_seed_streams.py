"""Each seed's randomness drawn for K seeds in one call (issue 44, tune_runner.algos.seed_streams): the counter
streams' uniforms and normals are what they claim and each seed's own whatever K, the minibatch plans cut each
seed's own permutations as `minibatch_plan` says, and the noise source is picked by device alone. The learners'
independence under either source: test_seeds_ppo.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tune_runner.algos import seed_streams
from tune_runner.algos.seed_streams import CounterStreams, SeedNoise, minibatch_plan

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
SEEDS = [7, 1_000_007, 2_000_007]


def test_uniforms_and_normals_have_their_moments_and_the_seeds_rows_are_unrelated():
    streams = CounterStreams(SEEDS)
    u, z = streams.uniform((3, 1_000_000)), streams.normal((3, 1_000_001))  # an odd size: Box-Muller's halves
    assert u.dtype == z.dtype == torch.float32 and u.shape == (3, 1_000_000) and z.shape == (3, 1_000_001)
    assert u.min() >= 0 and u.max() < 1
    for row in u.double():  # sd of the mean 2.9e-4, of the variance 7.5e-5
        assert abs(row.mean() - 0.5) < 0.002 and abs(row.var() - 1 / 12) < 0.0005
    for row in z.double():  # sd of the mean 1e-3, of the variance 1.4e-3, of the 4th moment 1e-2
        assert abs(row.mean()) < 0.005 and abs(row.var() - 1) < 0.007 and abs((row ** 4).mean() - 3) < 0.05
    assert abs(torch.corrcoef(z.double()[:, :-1])[0, 1:]).max() < 0.005 and abs(
        torch.corrcoef(u.double())[0, 1:]).max() < 0.005
    assert abs(torch.corrcoef(torch.stack([u[0, :-1], u[0, 1:]]).double())[0, 1]) < 0.005  # neighbours
    assert len(torch.unique(u[:, :2000])) > 5990  # 24-bit values: a few of 6000 may meet; no copied rows
    assert streams.counters.tolist() == [2, 2, 2]


def test_a_seeds_draws_are_its_own_whatever_k_and_the_others_counters():
    together = CounterStreams(SEEDS)
    alone = CounterStreams(SEEDS[1:2])
    together.uniform((3, 5))  # seed 1 is one draw ahead alone too
    alone.uniform((1, 5))
    for draw in ("uniform", "normal"):
        assert torch.equal(getattr(together, draw)((3, 4, 2))[1], getattr(alone, draw)((1, 4, 2))[0])
    assert not torch.equal(together.uniform((3, 8))[0], together.uniform((3, 8))[0])  # each draw afresh
    saved = together.counter(1)
    first = together.uniform((3, 6))[1]
    together.set_counter(1, saved)
    assert torch.equal(together.uniform((3, 6))[1], first)  # the counter is the whole state


def test_the_noise_source_is_chosen_by_device_alone_and_both_give_a_seed_its_own_rows():
    assert seed_streams.noise_source(torch.device("cpu")) == "generators"
    assert seed_streams.noise_source(torch.device("cuda", 0)) == "counter"
    cpu = torch.device("cpu")

    def noise(seeds: list[int]) -> SeedNoise:
        return SeedNoise([torch.Generator().manual_seed(s) for s in seeds], CounterStreams(seeds), cpu)

    together, alone = noise(SEEDS), noise(SEEDS[2:])
    assert torch.equal(together.uniform((3, 4))[2], alone.uniform((1, 4))[0])
    own = torch.Generator().manual_seed(SEEDS[2])
    torch.rand(4, generator=own)
    assert torch.equal(alone.normal((1, 6))[0], torch.randn(6, generator=own))  # one seed: torch.randn itself
    together.source = alone.source = "counter"
    assert torch.equal(together.normal((3, 4))[2], alone.normal((1, 4))[0])
    assert together.streams.counters.tolist() == [1, 1, 1]  # the generators' draws left the counters alone


def test_minibatch_plan_gives_each_seed_exactly_its_one_seed_sequence():
    counts, size, epochs = [130, 0, 64, 200], 64, 2
    together = CounterStreams([1, 2, 3, 4])
    plan = minibatch_plan(counts, num_epochs=epochs, minibatch_size=size, streams=together)
    assert together.counters.tolist() == [1, 0, 1, 1]  # a seed without rows draws nothing, as alone (no plan)
    offsets = [0, 130, 130, 194]
    for seed, count in enumerate(counts):
        streams = CounterStreams([seed + 1])
        alone = minibatch_plan([count], num_epochs=epochs, minibatch_size=size, streams=streams) if count else []
        assert streams.counters.tolist() == [1 if count else 0]
        got = [mb.index[seed][:int(mb.mask[seed].sum()) if mb.mask is not None else None]
               for mb in plan if mb.active[seed]]
        assert len(got) == len(alone) == epochs * -(-count // size)
        assert all(torch.equal(a, b.index[0] + offsets[seed]) for a, b in zip(got, alone, strict=True))
        for epoch in range(epochs if count else 0):  # each epoch a permutation of the seed's rows, cut in order
            pieces = got[epoch * len(got) // epochs:(epoch + 1) * len(got) // epochs]
            assert [len(p) for p in pieces] == [min(size, count - i) for i in range(0, count, size)]
            assert sorted(torch.cat(pieces).tolist()) == list(range(offsets[seed], offsets[seed] + count))
        for mb in plan:  # padding repeats the seed's own rows (or row 0, for a seed without data)
            rows = set(mb.index[seed].tolist())
            assert rows <= set(range(offsets[seed], offsets[seed] + count)) if count else rows == {0}
    assert len(plan) == 8 and [mb.active.tolist() for mb in plan[:2]] == [[True, False, True, True]] * 2
    assert plan[2].mask[0].sum() == 2 and plan[2].mask.shape == (4, 64)  # 130 = 64 + 64 + 2; 200's 3rd piece 64
    assert plan[3].mask[3].sum() == 8 and plan[3].mask[0].sum() == 64  # 200 = 3 * 64 + 8; 130's 2nd epoch
    assert plan[7].index.shape == (4, 8) and plan[7].active.tolist() == [False, False, False, True]
    assert not plan[1].active[1] and plan[1].mask[1].sum() == 0  # a seed without rows: all padding
    assert all(mb.index.dtype == torch.int64 for mb in plan)
    first = [mb.index[0] for mb in plan[:3]]
    assert not all(torch.equal(a, b) for a, b in zip(first, [mb.index[0] for mb in plan[3:6]], strict=True))


def test_seeds_with_pieces_of_one_width_need_no_mask():
    plan = minibatch_plan([256, 250], num_epochs=3, minibatch_size=64, streams=CounterStreams([5, 6]))
    assert len(plan) == 12 and [mb.mask is None for mb in plan] == [True, True, True, False] * 3
    assert all(mb.index.shape == (2, 64) for mb in plan)


def test_a_cpu_plan_sorts_as_torch_does_on_any_device():
    """seed_streams.sort_rows sorts a CPU plan's keys with NumPy and a GPU's with torch: the same rows, since a
    plan's keys never tie (its position is in their low bits)."""
    streams = CounterStreams(SEEDS)
    counts = np.array([300, 5, 0])
    positions = torch.arange(300)
    keys = (streams.bits(positions[None].expand(2, -1)) >> 1) & seed_streams.HIGH31 | positions
    assert torch.equal(seed_streams.sort_rows(keys), keys.sort(dim=-1).values)
    order = streams.permutations(counts, 2)
    assert order.shape == (3, 2, 300) and sorted(order[1, 1, :5].tolist()) == list(range(5))
    assert order[1, 1, 5:].tolist() == list(range(5, 300)) and order[2, 0].tolist() == list(range(300))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_streams_draw_and_plan_as_the_cpu():
    cpu, cuda = CounterStreams(SEEDS), CounterStreams(SEEDS, device="cuda")
    assert torch.equal(cpu.uniform((3, 1000)), cuda.uniform((3, 1000)).cpu())
    torch.testing.assert_close(cpu.normal((3, 1001)), cuda.normal((3, 1001)).cpu(), rtol=1e-5, atol=1e-5)
    counts = [130, 0, 64]
    for a, b in zip(minibatch_plan(counts, num_epochs=2, minibatch_size=64, streams=cpu),
                    minibatch_plan(counts, num_epochs=2, minibatch_size=64, streams=cuda), strict=True):
        assert b.index.is_cuda and torch.equal(a.index, b.index.cpu()) and (a.active == b.active).all()
        assert (a.mask is None) == (b.mask is None) and (a.mask is None or torch.equal(a.mask, b.mask.cpu()))
    assert torch.equal(cpu.counters, cuda.counters.cpu())
