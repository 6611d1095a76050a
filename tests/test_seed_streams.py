"""Each seed's randomness drawn for K seeds in one call (issue 44, tune_runner.algos.seed_streams): the counter
streams' uniforms and normals are what they claim and each seed's own whatever K, and the noise source is picked
by device alone. The learners' independence under either source: test_seeds_ppo.py."""

from __future__ import annotations

import pytest
import torch

from tune_runner.algos import seed_streams
from tune_runner.algos.seed_streams import CounterStreams, SeedNoise

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
