"""Each of K seeds' randomness drawn in one call (issue 44): noise for a rollout step, and minibatch plans.

Seed i of a K-seed learner must draw exactly what it draws alone. Two sources keep that:

- **generators**: one torch.Generator per seed (common.Rngs.torch), one draw per seed. A Python loop over the
  seeds, but at K = 1 one torch.rand, as the learner always drew; on a CPU the cheaper for the few seeds of the
  common case.
- **counter**: `CounterStreams`, a counter-based generator: number j of seed i's draw number c is a hash
  (splitmix64's mixer) of (seed i's key, c, j), computed for every seed in a few int64 tensor ops, on any device
  the same bits. No loop over seeds; on a CPU about 20 times one torch.rand at K = 1 (2026-11-28, bench figures
  in bench/README.md, issue 44), so a CPU learner keeps the generators and a GPU one takes this.

`noise_source` picks between them by device, in one place. It never looks at K: K = 1 and K = n on one device
draw from the same source, so independence holds for both. Minibatch plans (`minibatch_plan`) always come from
the counter streams: one sort of K seeds' keys on the learner's device instead of K numpy permutations.

A seed's counter is part of its checkpoint (next to the generators' states): SeedLearnerBase saves it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

GENERATORS, COUNTER = "generators", "counter"

# splitmix64's increment and multipliers (Steele, Lea, Flood 2014), as int64 values: torch's int64 product wraps
GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
MUL1 = 0xBF58476D1CE4E5B9 - (1 << 64)
MUL2 = 0x94D049BB133111EB - (1 << 64)
KEY_DOMAIN = 0x5EED_57EA_4D00_0044  # sets these keys apart from other hashes of the same seeds (torch_envs')
TOP24 = 2.0 ** -24
HIGH31 = 0x7FFFFFFF << 32
LANE_EPOCH = 1 << 32  # a plan's lane: epoch * LANE_EPOCH + position, whatever the longest seed's row count


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
    """mix64 in place (a plan hashes millions of words: one temporary per round, not four)."""
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

    def permutations(self, counts: np.ndarray, num_epochs: int) -> torch.Tensor:
        """[K, num_epochs, max(counts)] int64: in row i of each epoch, a permutation of range(counts[i]) first,
        then the rest in order. One draw of the seeds with rows (a seed without rows draws nothing, as it would
        not alone). A sort of 31 random bits above each position, so a tie (rare) keeps the positions' order;
        positions 2m and 2m + 1 take the two halves of lane m's word (half the hashing: it was a plan's most)."""
        width = int(counts.max(initial=0))
        half, device = (width + 1) // 2, self.keys.device
        lanes = torch.arange(num_epochs, dtype=torch.int64, device=device)[:, None] * LANE_EPOCH + \
            torch.arange(half, dtype=torch.int64, device=device)
        own = torch.as_tensor(counts, dtype=torch.int64, device=device)
        words = self.bits(lanes, own > 0)  # [K, E, half]
        pairs = torch.stack([words >> 1, words << 31], dim=-1).view(len(counts), num_epochs, 2 * half)
        keys = pairs[..., :width].bitwise_and(HIGH31)  # bits 33..63 and 1..31 of each word, at 32..62
        positions = torch.arange(width, dtype=torch.int64, device=device)
        keys.masked_fill_((positions >= own[:, None])[:, None], HIGH31)  # the rows a seed lacks: last
        return sort_rows(keys.bitwise_or_(positions)).bitwise_and_(0xFFFFFFFF)


def sort_rows(keys: torch.Tensor) -> torch.Tensor:
    """`keys` sorted along the last axis. On a CPU by NumPy, whose int64 sort ran 7 times faster than torch's on
    [256, 5, 2048] keys (2026-11-28); the same result for keys without ties in a row (a plan's never tie)."""
    if keys.device.type == "cpu":
        return torch.from_numpy(np.sort(keys.numpy(), axis=-1))
    return keys.sort(dim=-1).values


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


class Minibatch(NamedTuple):
    """One gradient step of K seeds: the rows each seed trains on, padded to one width."""

    index: torch.Tensor
    """[K, width] int64 rows of the data (seed-major), on the plan's device; a padded place repeats one of the
    seed's own rows."""
    mask: torch.Tensor | None
    """[K, width] float32 1.0 on real rows, 0.0 on padding; None when no seed is padded (the plain mean applies)."""
    active: np.ndarray
    """[K] bool: the seed has a minibatch at this step (the others must not take an optimizer step)."""


def minibatch_plan(counts: Sequence[int], *, num_epochs: int, minibatch_size: int,
                   streams: CounterStreams) -> list[Minibatch]:
    """K seeds' minibatches over their own rows, as one sequence of steps, made on the streams' device.

    Seed i owns rows offset_i .. offset_i + counts[i] - 1 of the data. As a one-seed learner does, it takes a
    permutation of its rows per epoch from its own stream (`CounterStreams.permutations`; none when it has no
    rows) and cuts it into pieces of `minibatch_size` (the last one shorter). Step u holds each seed's u-th
    piece, so seed i's sequence of minibatches is exactly the one it has alone, whatever the others'. Which seed
    has which piece at which step, and how wide, is arithmetic on `counts` (numpy); the rows, one gather.
    """
    counts = np.asarray(counts, dtype=np.int64)
    k, size, width = len(counts), minibatch_size, int(counts.max(initial=0))
    offsets = np.where(counts > 0, np.cumsum(counts) - counts, 0)  # a seed without rows points at row 0
    order = streams.permutations(counts, num_epochs)  # [K, E, width]
    order += torch.as_tensor(offsets, device=order.device)[:, None, None]
    pieces = -(-counts // size)  # per epoch
    steps = np.arange(int(pieces.max(initial=0)) * num_epochs)[:, None]
    active = steps < pieces * num_epochs  # [U, K]
    epoch, piece = np.divmod(steps, np.maximum(pieces, 1))
    start = piece * size
    sizes = np.where(active, np.minimum(size, counts - start), 0)
    # Where in the flat [K * E * width] permutations each place of each step reads: a padded place repeats the
    # piece's last row; a seed without a piece at that step reads one of its rows (row 0 if it has none)
    own = np.arange(k) * num_epochs * width  # where each seed's permutations begin
    first = np.where(active, own + epoch * width + start, own)
    device = order.device
    place = torch.arange(size, dtype=torch.int64, device=device)
    last = torch.as_tensor(np.maximum(sizes - 1, 0), device=device)[..., None]
    at = torch.minimum(place, last).add_(torch.as_tensor(first, device=device)[..., None])  # [U, K, size]
    rows = order.view(-1).index_select(0, at.view(-1)).view(at.shape)
    widths = sizes.max(axis=1, initial=0)
    padded = (sizes != widths[:, None]).any(axis=1)
    sizes_t = torch.as_tensor(sizes, dtype=torch.int64, device=device)[..., None] if padded.any() else None
    return [Minibatch(rows[u, :, :widths[u]],
                      (place[:widths[u]] < sizes_t[u]).to(torch.float32) if padded[u] else None, active[u])
            for u in range(len(steps))]
