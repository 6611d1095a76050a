"""A learner's greedy policy rebuilt from the weights of its acting network, without the learner.

evaluate, load_policy and the MLflow model act with our built-in mlp's policy from one seed's checkpointed
state: they rebuild the acting network alone (no envs, optimizer or buffer), or fold it into the layers of one
plain MLP that the exported policy file (tune_runner/tune_rl_policy.py) runs without tune-rl. Each learner's
record (tune_runner.algos.records) names its `Acting`; the weights are the state's `policy_key` entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tune_runner.algos.common import mlp

Layers = list[tuple[torch.Tensor, torch.Tensor]]


class Acting:
    """How one learner's acting network is rebuilt from its weights (a one-seed state dict) and its config."""

    def sizes(self, weights: Mapping[str, Any], settings: Any) -> tuple[int, int]:
        """(observation size, action outputs) of the weights; KeyError, TypeError, AttributeError or IndexError when
        they are not this network's tensors (the caller names the checkpoint)."""
        raise NotImplementedError

    def network(self, settings: Any, *, obs_dim: int, actions: int) -> torch.nn.Module:
        """The acting network, built as the learner builds it; its weights are loaded by the caller."""
        raise NotImplementedError

    def layers(self, weights: Mapping[str, torch.Tensor], settings: Any) -> Layers:
        """The greedy policy as the (weight, bias) pairs of one plain MLP, in order (the exported policy's)."""
        raise NotImplementedError


class PolicyMLP(Acting):
    """PPO's policy network: one MLP whose outputs are the logits (or a Box's Gaussian mean)."""

    def sizes(self, weights: Mapping[str, Any], settings: Any) -> tuple[int, int]:
        last = 2 * len(settings.fcnet_hiddens)  # Linear layers sit at even indices
        return weights["0.weight"].shape[1], weights[f"{last}.weight"].shape[0]

    def network(self, settings: Any, *, obs_dim: int, actions: int) -> torch.nn.Module:
        return mlp([obs_dim, *settings.fcnet_hiddens, actions], settings.fcnet_activation)

    def layers(self, weights: Mapping[str, torch.Tensor], settings: Any) -> Layers:
        return linears(weights, prefix="")


def linears(state: Mapping[str, torch.Tensor], *, prefix: str) -> Layers:
    """The (weight, bias) pairs of an nn.Sequential's Linear layers, in order."""
    indices = sorted(int(k[len(prefix):].split(".")[0]) for k in state
                     if k.startswith(prefix) and k.endswith(".weight") and k[len(prefix):].count(".") == 1)
    return [(state[f"{prefix}{i}.weight"], state[f"{prefix}{i}.bias"]) for i in indices]
