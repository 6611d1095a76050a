"""Each of K seeds' randomness drawn in one call (issue 44): noise for a rollout step.

Seed i of a K-seed learner must draw exactly what it draws alone. Two sources keep that:

- **generators**: one torch.Generator per seed (common.Rngs.torch), one draw per seed. A Python loop over the
  seeds, but at K = 1 one torch.rand, as the learner always drew; on a CPU the cheaper for the few seeds of the
  common case.
- **counter**: `CounterStreams`, a counter-based generator: number j of seed i's draw number c is a hash
  (splitmix64's mixer) of (seed i's key, c, j), computed for every seed in a few int64 tensor ops, on any device
  the same bits. No loop over seeds; on a CPU about 20 times one torch.rand at K = 1 (2026-11-28, bench figures
  in bench/README.md, issue 44), so a CPU learner keeps the generators and a GPU one takes this.

`noise_source` picks between them by device, in one place. It never looks at K: K = 1 and K = n on one device
draw from the same source, so independence holds for both.

A seed's counter is part of its checkpoint (next to the generators' states): SeedLearnerBase saves it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

GENERATORS, COUNTER = "generators", "counter"

# splitmix64's increment and multipliers (Steele, Lea, Flood 2014), as int64 values: torch's int64 product wraps
GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
MUL1 = 0xBF58476D1CE4E5B9 - (1 << 64)
MUL2 = 0x94D049BB133111EB - (1 << 64)
KEY_DOMAIN = 0x5EED_57EA_4D00_0044  # sets these keys apart from other hashes of the same seeds (torch_envs')
TOP24 = 2.0 ** -24


def noise_source(device: torch.device) -> str:
    """Where K seeds' rollout noise on `device` comes from: their torch generators on a CPU, the counter streams
    elsewhere (a GPU, where K Python calls would leave it waiting). The one place this is chosen."""
    return GENERATORS if device.type == "cpu" else COUNTER


def _lsr(z: torch.Tensor, shift: int) -> torch.Tensor:
    """Logical right shift of int64 values (torch's >> is arithmetic: the mask drops the copied sign bits)."""
    return (z >> shift) & ((1 << (64 - shift)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's output mixer on int64 values (a bijection of 64-bit words)."""
    return _mix64_(z.clone())


def _mix64_(z: torch.Tensor) -> torch.Tensor:
    """mix64 in place (one temporary per round, not four)."""
    z ^= (z >> 30).bitwise_and_((1 << 34) - 1)
    z *= MUL1
    z ^= (z >> 27).bitwise_and_((1 << 37) - 1)
    z *= MUL2
    z ^= (z >> 31).bitwise_and_((1 << 33) - 1)
    return z


def stream_keys(seeds: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """[K] int64 keys, key i a hash of seeds[i] alone."""
    words = [int(s) & ((1 << 64) - 1) for s in seeds]
    signed = torch.tensor([w - (1 << 64) if w >> 63 else w for w in words], dtype=torch.int64, device=device)
    return mix64(mix64(signed ^ KEY_DOMAIN) + GOLDEN)


class CounterStreams:
    """K seeds' counter-based random streams on one device: `keys` and `counters`, [K] int64 each.

    Each call draws from every seed (or, for a plan, every seed with rows) and advances those seeds' counters by
    one; number j of seed i's draw is mix64(base_i + (j + 1) * GOLDEN) with base_i = mix64(key_i + counter_i *
    GOLDEN): splitmix64's sequence from a start that is a hash of (seed, draw). A row's numbers depend on its
    seed, its counter and j alone, never on K or on the other rows.
    """

    def __init__(self, seeds: Sequence[int], device: torch.device | str = "cpu") -> None:
        self.keys = stream_keys(seeds, device)
        self.counters = torch.zeros(len(seeds), dtype=torch.int64, device=self.keys.device)
        self._lanes: dict[int, torch.Tensor] = {}

    def counter(self, seed: int) -> int:
        """Draws seed `seed` has made (its state)."""
        return int(self.counters[seed])

    def set_counter(self, seed: int, value: int) -> None:
        """Continue seed `seed` from `counter`'s value."""
        self.counters[seed] = int(value)

    def bits(self, lanes: torch.Tensor, drawing: torch.Tensor | None = None) -> torch.Tensor:
        """[K, *lanes.shape] random int64 words: lane l of each seed's next draw; advances the counters of
        `drawing` ([K] bool; every seed when None)."""
        base = _mix64_(self.keys + self.counters * GOLDEN)
        self.counters += 1 if drawing is None else drawing.to(torch.int64)
        return _mix64_(base.view(-1, *([1] * lanes.dim())) + (lanes + 1) * GOLDEN)

    def _flat_lanes(self, count: int) -> torch.Tensor:
        lanes = self._lanes.get(count)
        if lanes is None:
            lanes = self._lanes[count] = torch.arange(count, dtype=torch.int64, device=self.keys.device)
        return lanes

    def uniform(self, shape: Sequence[int]) -> torch.Tensor:
        """float32 uniforms in [0, 1) of `shape` = [K, ...], 24 random bits each (torch.rand's resolution)."""
        z = self.bits(self._flat_lanes(int(np.prod(shape[1:], dtype=np.int64))))
        return _lsr(z, 40).float().mul_(TOP24).view(tuple(shape))

    def normal(self, shape: Sequence[int]) -> torch.Tensor:
        """float32 standard normals of `shape` = [K, ...]: Box-Muller on pairs of 24-bit uniforms (so none beyond
        5.8 standard deviations)."""
        size = int(np.prod(shape[1:], dtype=np.int64))
        half = (size + 1) // 2
        z = _lsr(self.bits(self._flat_lanes(2 * half)), 40).float().mul_(TOP24)
        radius = (1.0 - z[:, :half]).log_().mul_(-2.0).sqrt_()  # 1 - u in (0, 1]: no log(0)
        angle = z[:, half:].mul(2 * np.pi)
        pairs = torch.cat([radius * angle.cos(), radius * angle.sin()], dim=1)
        return pairs[:, :size].reshape(tuple(shape))


class SeedNoise:
    """K seeds' noise for a rollout step from `noise_source(device)`'s source: `generators` (one per seed) or
    `streams` (their CounterStreams). Each call draws once from every seed; the noise comes on `device`."""

    def __init__(self, generators: Sequence[torch.Generator], streams: CounterStreams, device: torch.device) -> None:
        self.generators, self.streams, self.device = list(generators), streams, device
        self.source = noise_source(device)

    def uniform(self, shape: Sequence[int]) -> torch.Tensor:
        """Uniform [0, 1) noise of `shape` = [K, ...]; row i is seed i's alone."""
        if self.source == COUNTER:
            return self.streams.uniform(shape)
        return _generator_noise(torch.rand, shape, self.generators).to(self.device)

    def normal(self, shape: Sequence[int]) -> torch.Tensor:
        """Standard normal noise of `shape` = [K, ...]; row i is seed i's alone."""
        if self.source == COUNTER:
            return self.streams.normal(shape)
        return _generator_noise(torch.randn, shape, self.generators).to(self.device)


def _generator_noise(draw: Callable[..., torch.Tensor], shape: Sequence[int],
                     generators: Sequence[torch.Generator]) -> torch.Tensor:
    if len(generators) == 1:  # the one-seed learner's own call
        return draw(tuple(shape), generator=generators[0])
    noise = torch.empty(tuple(shape))
    for row, generator in zip(noise, generators, strict=True):
        draw(row.shape, generator=generator, out=row)
    return noise
