"""Our learners' optimizers: Adam over parameters re-homed into one flat buffer, for one seed (`FlatAdam`) and for K
seeds' parameters in one [K, P] buffer (`SeedAdam`, issue 16)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

# SeedAdam's parameters are strided views of one [K, P] buffer, and their gradients views with the same
# strides, so backward accumulates in place as intended; torch warns about any parameter with gaps.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")


class FlatAdam:
    """Adam (torch.optim.Adam's update, no weight decay) over parameters re-homed into one flat buffer.

    Every parameter and its gradient becomes a view into one flat tensor, so a step, gradient
    clipping and zeroing are each a few ops on one tensor, where torch.optim's default loops
    over the tensors, about eight small ops each. It also keeps torch.optim out: building the
    first torch.optim optimizer imports torch._dynamo, 1.5-4 s on one CPU thread, which is as
    long as a whole CartPole run of our PPO. Build it after the modules reach their device;
    `load_state_dict` and `.data` copies keep the views, reassigning `.data` would break them.
    """

    def __init__(self, params: Iterable[nn.Parameter], *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        first = self.params[0]
        size = sum(p.numel() for p in self.params)
        self.flat = torch.empty(size, dtype=first.dtype, device=first.device)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                self.flat[offset:offset + n].copy_(p.reshape(-1))
                p.data = self.flat[offset:offset + n].view_as(p)
                p.grad = self.grad[offset:offset + n].view_as(p)  # backward adds into it in place
                offset += n
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.steps = 0

    def zero_grad(self) -> None:
        self.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Scale the gradient down to global 2-norm `max_norm` (torch.nn.utils.clip_grad_norm_'s rule)."""
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        self.exp_avg.lerp_(self.grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.grad, self.grad, value=1 - beta2)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.steps)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1 ** self.steps))

    def state_dict(self) -> dict[str, Any]:
        """Moments and step count (CPU copies); the parameters themselves live in the modules' state."""
        return {"steps": self.steps, "exp_avg": self.exp_avg.detach().cpu().clone(),
                "exp_avg_sq": self.exp_avg_sq.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict`; the learning rate stays this optimizer's own."""
        if state["exp_avg"].shape != self.flat.shape:
            raise ValueError(f"optimizer state for {state['exp_avg'].numel()} parameters, this one has "
                             f"{self.flat.numel()}: the network sizes differ")
        self.steps = int(state["steps"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])


class SeedAdam:
    """Adam (torch.optim.Adam's update, no weight decay) for K seeds' parameters in one [K, P] buffer.

    Each parameter (and its gradient) becomes a view into row-blocks of one flat [K, P] tensor: seed
    i's parameters are row i, laid out as one seed's flat parameter vector (FlatAdam's layout).
    A step, per-seed clipping and zeroing are a few ops on the whole buffer. Each seed has its own step
    count and learning rate; `step(active)` leaves the seeds that had no minibatch exactly as they were
    (a zero gradient would still move Adam's moments). Parameters must have the seed as their first
    axis when K > 1. Build it after the modules reach their device.
    """

    def __init__(self, params: Sequence[nn.Parameter], *, num_seeds: int, lr: float | Sequence[float],
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.num_seeds = list(params), num_seeds
        self.lr, self.betas, self.eps = lr, betas, eps
        self.steps = np.zeros(num_seeds, dtype=np.int64)
        if num_seeds > 1 and any(p.shape[:1] != (num_seeds,) for p in self.params):
            raise ValueError(f"SeedAdam for {num_seeds} seeds needs parameters with the seed as their first axis, "
                             f"got shapes {[tuple(p.shape) for p in self.params]}")
        sizes = [p.numel() // num_seeds for p in self.params]
        first = self.params[0]
        self.flat = torch.empty(num_seeds, sum(sizes), dtype=first.dtype, device=first.device)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        with torch.no_grad():
            for p, n in zip(self.params, sizes, strict=True):
                self.flat[:, offset:offset + n].copy_(p.reshape(num_seeds, n))
                p.data = self.flat[:, offset:offset + n].view(p.shape)
                p.grad = self.grad[:, offset:offset + n].view(p.shape)  # backward adds into it in place
                offset += n
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)

    @property
    def lr(self) -> float | Sequence[float]:
        """One lr for every seed, or one per seed."""
        return self._lr

    @lr.setter
    def lr(self, value: float | Sequence[float]) -> None:
        # Read once here, not in every step (the lr changes once an iteration): each seed's as an array, and the
        # one they share, if they do
        self._lr = value
        self._lrs = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.num_seeds,))
        self._one_lr = float(self._lrs[0]) if (self._lrs == self._lrs[0]).all() else None

    def zero_grad(self) -> None:
        self.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Scale each seed's gradient down to 2-norm `max_norm` (torch.nn.utils.clip_grad_norm_'s rule, per seed)."""
        norms = torch.linalg.vector_norm(self.grad, dim=1, keepdim=True)
        self.grad.mul_(torch.clamp(max_norm / (norms + 1e-6), max=1.0))

    @torch.no_grad()
    def step(self, active: np.ndarray | None = None) -> None:
        """One Adam step of the seeds where `active` (default: all) is True; the others stay untouched."""
        if active is not None and not active.all():
            rows = np.flatnonzero(active)
            self.steps[rows] += 1
            if len(rows):
                self._step_rows(rows)
            return
        self.steps += 1
        if self._one_lr is not None and (self.num_seeds == 1 or (self.steps == self.steps[0]).all()):
            self._step_alike(int(self.steps[0]), self._one_lr)
        else:
            self._step_rows(None)

    def _step_alike(self, step: int, lr: float) -> None:
        """Every seed at the same step count and lr (always so with one seed): FlatAdam's ops, bit for bit."""
        beta1, beta2 = self.betas
        self.exp_avg.lerp_(self.grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.grad, self.grad, value=1 - beta2)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-lr / (1 - beta1 ** step))

    def _step_rows(self, rows: np.ndarray | None) -> None:
        """The step of `rows` (None: all), each with its own step count and lr. Each row gets exactly
        `_step_alike`'s bits (a refilled seed of a population must train as a one-seed learner of its values,
        issue 43, and one rounding apart grows chaotically in DQN): its bias corrections come from the same Python
        float expressions, once per step count the rows have (no loop over the seeds), and its update is addcdiv's
        value * exp_avg / denom, value * exp_avg one tensor here."""
        beta1, beta2 = self.betas
        steps, lrs = (self.steps, self._lrs) if rows is None else (self.steps[rows], self._lrs[rows])
        counts, which = (steps[:1], np.zeros(len(steps), np.int64)) if (steps == steps[0]).all() else \
            np.unique(steps, return_inverse=True)
        corrections = np.array([[math.sqrt(1 - beta2 ** step), 1 - beta1 ** step] for step in counts.tolist()])
        index = None if rows is None else torch.as_tensor(rows, device=self.flat.device)
        grad, exp_avg, exp_avg_sq, flat = ((t if index is None else t[index])
                                           for t in (self.grad, self.exp_avg, self.exp_avg_sq, self.flat))
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        column = {"dtype": flat.dtype, "device": flat.device}
        correction2 = torch.as_tensor(corrections[which, 0], **column)[:, None]
        step_size = torch.as_tensor(-lrs / corrections[which, 1], **column)[:, None]
        flat.addcdiv_(exp_avg * step_size, (exp_avg_sq.sqrt() / correction2).add_(self.eps))
        if index is not None:  # t[index] made copies: write them back
            for target, value in ((self.exp_avg, exp_avg), (self.exp_avg_sq, exp_avg_sq), (self.flat, flat)):
                target.index_copy_(0, index, value)

    def seed_state_dict(self, seed: int) -> dict[str, Any]:
        """Seed `seed`'s moments and step count (CPU copies), in FlatAdam.state_dict's format."""
        return {"steps": int(self.steps[seed]), "exp_avg": self.exp_avg[seed].detach().cpu().clone(),
                "exp_avg_sq": self.exp_avg_sq[seed].detach().cpu().clone()}

    def load_seed_state_dict(self, seed: int, state: Mapping[str, Any]) -> None:
        """Continue seed `seed` from `seed_state_dict` (or a FlatAdam state); the lr stays this optimizer's."""
        if tuple(state["exp_avg"].shape) != tuple(self.flat.shape[1:]):
            raise ValueError(f"optimizer state for {state['exp_avg'].numel()} parameters, this one has "
                             f"{self.flat.shape[1]} per seed: the network sizes differ")
        self.steps[seed] = int(state["steps"])
        self.exp_avg[seed].copy_(state["exp_avg"])
        self.exp_avg_sq[seed].copy_(state["exp_avg_sq"])
