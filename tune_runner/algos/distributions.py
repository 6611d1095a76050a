"""Our policies' action distributions, as functions of their network outputs: categoricals over logits
(masked, or one per number of a MultiDiscrete action)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Logits (or Q-values) with the actions that `mask` forbids set to -inf.

    A row that forbids every action is left alone: final observations of finished episodes
    often carry an all-zero mask, and their action is never used.
    """
    if mask is None:
        return logits
    keep = mask | ~mask.any(dim=-1, keepdim=True)
    return torch.where(keep, logits, torch.tensor(-torch.inf, dtype=logits.dtype, device=logits.device))


def segments_log_softmax(logits: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """log_softmax over the last axis, or, with `nvec`, over each of its segments of nvec[i] logits: each
    number of a MultiDiscrete action is its own categorical. The entropy, -sum(p log p) over the last axis, is
    then the sum of the numbers' entropies."""
    if not nvec:
        return torch.log_softmax(logits, dim=-1)
    return torch.cat([torch.log_softmax(part, dim=-1) for part in logits.split(list(nvec), dim=-1)], dim=-1)


def segments_argmax(scores: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """argmax over the last axis, or, with `nvec`, within each segment: [..., len(nvec)] choices."""
    if not nvec:
        return scores.argmax(-1)
    return torch.stack([part.argmax(-1) for part in scores.split(list(nvec), dim=-1)], dim=-1)


def segments_gather(logp_all: torch.Tensor, actions: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """The log-probability of each action from `segments_log_softmax`'s output: one choice ([...]), or with
    `nvec` the sum over the numbers' choices ([..., len(nvec)] actions)."""
    if not nvec:
        return logp_all.gather(-1, actions[..., None]).squeeze(-1)
    offsets = torch.as_tensor(np.cumsum([0, *nvec[:-1]]), dtype=actions.dtype, device=actions.device)
    return logp_all.gather(-1, actions + offsets).sum(-1)
