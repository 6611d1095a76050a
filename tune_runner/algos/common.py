"""Pieces shared by our PPO and DQN learners: MLPs, schedules, tensors in torch's own memory, RNG state and
episode stats. Their envs are tune_runner.algos.learner_envs', their optimizers tune_runner.algos.optim's."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from tune_runner import tune_rl_policy
from tune_runner.errors import unknown_name

if TYPE_CHECKING:
    from tune_runner.algos.learner_envs import Step

ACTIVATIONS: dict[str, type[nn.Module]] = tune_rl_policy.ACTIVATIONS  # one tanh for learners and logged policies


def scheduled(value: float | tuple[tuple[int, float], ...], env_steps: int) -> float:
    """A constant, or a schedule's value at `env_steps`: linear between points, flat after the last."""
    if not isinstance(value, tuple):
        return float(value)
    for (t0, v0), (t1, v1) in zip(value, value[1:], strict=False):
        if env_steps < t1:
            return v0 + (v1 - v0) * (max(env_steps, t0) - t0) / (t1 - t0)
    return value[-1][1]


def mlp(sizes: list[int] | tuple[int, ...], activation: str, *, activate_last: bool = False) -> nn.Sequential:
    """Linear layers of `sizes[i] -> sizes[i + 1]` with `activation` between them."""
    if activation not in ACTIVATIONS:
        raise ValueError(unknown_name("activation", activation, ACTIVATIONS))
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or activate_last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def to_tensor(data: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """`data` as a C-contiguous tensor in torch's own memory, never a view of a numpy array.

    CPU kernels pick their path by strides and alignment (numpy aligns to 16 bytes, torch to
    64), so the same numbers laid out differently can round differently in the last bit, and
    exact restore would drift.
    """
    if isinstance(data, torch.Tensor):
        return data.to(device).contiguous()
    return torch.tensor(np.ascontiguousarray(data), device=device)


# glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD; the largest mmap threshold it takes
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX = -1, -3, 32 << 20
_freed_memory_kept = False


def keep_freed_memory(*, trim_threshold: int = 1 << 30) -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the OS; whether it now does.

    A K-seed update allocates and frees [K, minibatch, 64] activations (1 MB each at K = 8, 2 MB at 16) dozens
    of times. glibc returns a freed block at the top of its heap to the OS once more than its trim threshold
    (by default twice the last freed mmapped block) is free there, so the next allocation faults its pages in
    afresh: 47,000 page faults per PPO iteration at K = 16 on ppo_small's settings, about a fifth of its time
    (2026-11-28). Memory the learner freed stays the process's, up to `trim_threshold` bytes at the heap's top;
    what it ever needed at once it needs again in the next update. No-op off glibc (the call is not there).
    """
    global _freed_memory_kept
    if _freed_memory_kept:
        return True
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl without mallopt)
        return False
    # Setting either parameter turns off glibc's dynamic thresholds, so both are set.
    _freed_memory_kept = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and mallopt(M_TRIM_THRESHOLD,
                                                                                          trim_threshold))
    return _freed_memory_kept


def state_dict_copy(module: nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of a module's tensors, so a saved state does not move on with training."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


class Rngs:
    """The random generators a learner owns; none of them is global, so learners never disturb each other."""

    def __init__(self, seed: int) -> None:
        self.torch = torch.Generator().manual_seed(seed)
        self.numpy = np.random.default_rng(seed)
        self.python = random.Random(seed)

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue every stream exactly."""
        return {"torch": self.torch.get_state(), "numpy": self.numpy.bit_generator.state,
                "python": self.python.getstate()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `get_state`'s output."""
        self.torch.set_state(state["torch"])
        self.numpy.bit_generator.state = state["numpy"]
        self.python.setstate(state["python"])


class EpisodeStats:
    """Per-env running returns and lengths, and a window of the last finished episodes."""

    def __init__(self, num_envs: int, *, window: int = 100) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0

    def update(self, step: Step) -> tuple[np.ndarray, np.ndarray]:
        """Add one vector step; returns the (returns, lengths) of the episodes it finished."""
        self.returns += np.where(step.valid, step.rewards, 0.0)
        self.lengths += step.valid
        done = np.flatnonzero((step.terminated | step.truncated) & step.valid)
        finished = self.returns[done].copy(), self.lengths[done].copy()
        self.add_finished(*finished)
        self.returns[done], self.lengths[done] = 0.0, 0
        return finished

    def add_finished(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Count episodes that finished elsewhere (a rollout worker's envs) into the window."""
        self.recent_returns.extend(np.asarray(returns, dtype=np.float64).tolist())
        self.recent_lengths.extend(np.asarray(lengths, dtype=np.int64).tolist())
        self.episodes += len(returns)

    def drop_running(self) -> None:
        """Forget the episodes in progress (after the envs were reset under them)."""
        self.returns[:], self.lengths[:] = 0.0, 0

    def return_mean(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")

    def len_mean(self) -> float:
        return float(np.mean(self.recent_lengths)) if self.recent_lengths else float("nan")

    def get_state(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "lengths": self.lengths.copy(), "episodes": self.episodes,
                "recent_returns": list(self.recent_returns), "recent_lengths": list(self.recent_lengths)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore `get_state`; a different window size keeps the newest episodes."""
        if len(state["returns"]) == len(self.returns):
            self.returns[:], self.lengths[:] = state["returns"], state["lengths"]
        else:
            self.drop_running()
        self.recent_returns.clear()
        self.recent_lengths.clear()
        self.recent_returns.extend(state["recent_returns"])
        self.recent_lengths.extend(state["recent_lengths"])
        self.episodes = int(state["episodes"])
