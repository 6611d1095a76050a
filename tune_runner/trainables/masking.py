"""Action masking for RLlib's new API stack: envs whose observations are {'observations', 'action_mask'}.

Our own learners read the mask themselves (tune_runner.algos.learner_envs.split_obs). RLlib's default
modules cannot take a Dict observation, so `install` swaps in one of the small modules below.
Each builds RLlib's default networks for the 'observations' part only, and forbids what the
mask forbids in every forward pass, training included, so the loss sees the same masked
distribution the env runners sampled from. The value function sees only the observations.
This module imports RLlib: import it only on the RLlib path.

A row whose mask forbids every action is left alone: a finished episode's final observation
often carries an all-zero mask, and its action is never used (our learners' rule too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from tune_runner.algos.records import ours
from tune_runner.algos.spaces import inner_space, is_masked
from tune_runner.errors import UserError

MASKABLE = ("PPO", "DQN")  # algorithms whose default torch module we subclass


def env_observation_space(env_id: str, env_config: Mapping[str, Any] | None = None) -> gym.Space | None:
    """The env's observation space with this env_config (one instance per distinct config, shared with the
    pre-launch check); None for an env we cannot make (RLlib's own forms, a class path: left to RLlib)."""
    from tune_runner.trainables.trial import env_spaces

    spaces = env_spaces(env_id, env_config)
    return None if spaces is None else spaces.observation


def install(algo_config: Any, *, algo: str, observation_space: gym.Space | None) -> bool:
    """Give a masked env our masking module for `algo`; True when installed, False for an unmasked env."""
    if not is_masked(observation_space):
        return False
    if algo not in MASKABLE:
        raise UserError(f"rllib/{algo} cannot mask actions (the env's observations carry an action_mask); "
                        f"use one of {', '.join('rllib/' + a for a in MASKABLE)}, or {' / '.join(ours())}")
    module_class = MaskedPPOTorchModule if algo == "PPO" else MaskedDQNTorchModule
    algo_config.rl_module(rl_module_spec=RLModuleSpec(module_class=module_class))
    return True


def split_batch(batch: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """(the batch with plain observations, the bool mask or None) for a batch whose obs may be a Dict."""
    obs = batch[Columns.OBS]
    if not isinstance(obs, Mapping):
        return dict(batch), None
    return {**batch, Columns.OBS: obs["observations"]}, obs["action_mask"] != 0


def apply_mask(values: torch.Tensor, mask: torch.Tensor | None, *, fill: float) -> torch.Tensor:
    """`values` (logits or Q-values) with forbidden actions set to `fill`; all-forbidden rows untouched."""
    if mask is None:
        return values
    keep = mask | ~mask.any(dim=-1, keepdim=True)
    return torch.where(keep, values, torch.full_like(values, fill))


class _MaskedObservations:
    """Builds the parent's networks for the 'observations' space, then keeps the whole Dict space
    (checkpoints and `RLModuleSpec.from_module` rebuild the module from it)."""

    def __init__(self, *, observation_space: gym.Space | None = None, **kwargs: Any) -> None:
        super().__init__(observation_space=inner_space(observation_space), **kwargs)
        self.observation_space = observation_space


class MaskedPPOTorchModule(_MaskedObservations, DefaultPPOTorchRLModule):
    """RLlib's default PPO module; forbidden actions get the lowest finite logit (probability 0)."""

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._masked(super()._forward, batch, **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._masked(super()._forward_train, batch, **kwargs)

    def _masked(self, forward: Callable[..., dict[str, Any]], batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        plain, mask = split_batch(batch)
        out = forward(plain, **kwargs)
        logits = out[Columns.ACTION_DIST_INPUTS]
        # Finite, not -inf: RLlib's entropy and KL terms then stay finite (0 * min is 0).
        out[Columns.ACTION_DIST_INPUTS] = apply_mask(logits, mask, fill=torch.finfo(logits.dtype).min)
        return out

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return super().compute_values(split_batch(batch)[0], embeddings=embeddings)


class MaskedDQNTorchModule(_MaskedObservations, DefaultDQNTorchRLModule):
    """RLlib's default DQN module with -inf Q-values for forbidden actions. RLlib's DQN is written for
    exactly that: its epsilon-random actions skip -inf entries and its loss maps -inf to 0."""

    def compute_q_values(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self._masked(super().compute_q_values, batch)

    def forward_target(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self._masked(super().forward_target, batch)

    def _masked(self, forward: Callable[[dict[str, Any]], dict[str, Any]], batch: dict[str, Any]) -> dict[str, Any]:
        plain, mask = split_batch(batch)
        out = forward(plain)
        out[QF_PREDS] = apply_mask(out[QF_PREDS], mask, fill=-torch.inf)
        return out
