"""PPO's minibatch losses (`ppo_losses`, RLlib's new API stack): the clipped surrogate, the clipped squared value
error, the entropy bonus and the KL estimate, for one seed or K at once."""

from __future__ import annotations

import torch

LOSSES = ("policy_loss", "vf_loss", "entropy", "kl")


def ppo_losses(*, new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor,
               value_targets: torch.Tensor, entropy: torch.Tensor, clip_param: float | torch.Tensor,
               vf_clip_param: float | None, vf_loss_coeff: float | torch.Tensor, entropy_coeff: float | torch.Tensor,
               mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """PPO's minibatch losses from per-sample tensors: each output is a mean over the last axis, a
    scalar for [batch] inputs and one value per seed for [K, batch]. With `mask` (1 on real samples, 0
    on padding) each mean is over the real samples only. For [K, batch] inputs, `clip_param` may be a
    [K, 1] tensor and the coefficients [K] tensors: one value per seed (a population, PPOConfig.population).

    policy_loss: -mean(min(A * r, A * clip(r, 1 - clip_param, 1 + clip_param))), r = exp(new - old logp).
    vf_loss: mean((V - target)^2), each squared error first capped at `vf_clip_param` (RLlib's
    meaning) unless it is None. total_loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff
    * entropy. kl is the low-variance estimator of KL(old || new) (Schulman's k3): mean((r - 1) - log r).
    """
    def mean(x: torch.Tensor) -> torch.Tensor:
        return x.mean(-1) if mask is None else (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)

    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    policy_loss = -mean(torch.min(advantages * ratio, advantages * ratio.clamp(1 - clip_param, 1 + clip_param)))
    vf_loss = (values - value_targets).pow(2)
    if vf_clip_param is not None:
        vf_loss = vf_loss.clamp(max=vf_clip_param)
    vf_loss = mean(vf_loss)
    entropy = mean(entropy)
    total_loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
    kl = mean((ratio - 1) - log_ratio)
    return {"policy_loss": policy_loss, "vf_loss": vf_loss, "entropy": entropy, "kl": kl, "total_loss": total_loss}
