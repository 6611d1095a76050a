"""Our policies' action distributions, as functions of their network outputs: categoricals over logits
(masked, or one per number of a MultiDiscrete action), sampled by Gumbel-max; diagonal Gaussians over Box actions,
with gSDE's state-dependent standard deviation."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from tune_runner.algos.seed_streams import SeedNoise


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


def sample_actions(logits: torch.Tensor, *, generator: torch.Generator, nvec: Sequence[int] = ()) -> torch.Tensor:
    """One action per row, drawn from softmax(logits); a -inf logit is never drawn. With `nvec` (MultiDiscrete)
    one choice per segment of nvec[i] logits, each drawn from its own softmax: [rows, len(nvec)].

    Gumbel-max (argmax of logits minus log(-log(u)), u uniform in [0, 1)): exact, and about
    three times faster than torch.multinomial on the small batches of a rollout step.
    """
    gumbel = torch.rand(logits.shape, generator=generator).log_().neg_().log_()
    return segments_argmax(logits.cpu() - gumbel, nvec)


def sample_seed_actions(logits: torch.Tensor, *, noise: SeedNoise, nvec: Sequence[int] = ()) -> torch.Tensor:
    """`sample_actions` for K seeds' logits [K, n, logits], on their device: seed i's noise its own alone."""
    gumbel = noise.uniform(logits.shape).log_().neg_().log_()
    return segments_argmax(logits - gumbel, nvec)


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_logp(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log N(actions; mean, diag(exp(log_std))^2), summed over the last axis (the action's numbers)."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian, summed over the last axis: sum(log_std) + size * (1 + log 2 pi) / 2."""
    return (log_std + 0.5 + LOG_SQRT_2PI).sum(-1)


SDE_EPSILON = 1e-6  # Stable-Baselines3's: added to gSDE's variance, so a zero feature vector still has a density


def sde_log_std(features: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """gSDE's log std of each action number at each observation: 0.5 * log(features^2 @ exp(log_std)^2 + eps).

    `features` [..., batch, F] (gradients stopped: the noise does not train the features, SB3's learn_features
    off), `log_std` [..., F, A] with matching leading axes; [..., batch, A]. The action's noise is
    features @ E with E ~ N(0, exp(log_std)^2) elementwise, whose variance per action number this is."""
    variance = torch.matmul(features.detach().pow(2), torch.exp(2 * log_std))
    return 0.5 * torch.log(variance + SDE_EPSILON)
