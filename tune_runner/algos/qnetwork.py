"""DQN's Q-values: the network of one seed, K seeds' networks as one batched model, TD targets and losses.

Every batched network takes [K, batch, obs] and gives [K, batch, actions], seed i's outputs from seed i's
parameters alone (tune_runner.algos.batched), and reads and writes each seed's weights in the state-dict
format of the one-seed `QNetwork` (or of the registered model), so a K-seed checkpoint holds K one-seed ones.
`QActing` rebuilds the one-seed network from those weights for evaluate, load_policy and the MLflow model.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tune_runner.algos import batched
from tune_runner.algos.acting import Acting, Layers, linears
from tune_runner.algos.common import mlp
from tune_runner.algos.networks import BUILT_IN, build_model, image_model


def q_values(net: QNetwork | BatchedQNetwork, obs: torch.Tensor) -> torch.Tensor:
    """The Q-values of a QNetwork, or of K as one: the trunk's output, or with `dueling` V(s) + A(s, a) -
    mean_a A(s, a) from the heads on the trunk's features. One function for both, so a seed of the batched
    network computes its Q-values with the one-seed network's ops."""
    if not net.dueling:
        return net.trunk(obs)
    features = net.trunk(obs)
    advantage = net.advantage(features)
    return net.value(features) + advantage - advantage.mean(-1, keepdim=True)


class QNetwork(nn.Module):
    """Q-values from an MLP; with `dueling`, V(s) + A(s, a) - mean_a A(s, a)."""

    def __init__(self, *, obs_dim: int, num_actions: int, hiddens: tuple[int, ...], activation: str,
                 dueling: bool) -> None:
        super().__init__()
        self.dueling = dueling
        if dueling:
            self.trunk = mlp([obs_dim, *hiddens], activation, activate_last=True)
            self.value, self.advantage = nn.Linear(hiddens[-1], 1), nn.Linear(hiddens[-1], num_actions)
        else:
            self.trunk = mlp([obs_dim, *hiddens, num_actions], activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return q_values(self, obs)


class BatchedQNetwork(nn.Module):
    """K QNetworks as one: a BatchedMLP per part (trunk, and the dueling heads), parameters in QNetwork's order."""

    def __init__(self, nets: Sequence[QNetwork]) -> None:
        super().__init__()
        self.num_seeds, self.dueling = len(nets), nets[0].dueling
        self.trunk = batched.BatchedMLP([net.trunk for net in nets])
        self.parts: dict[str, batched.BatchedMLP] = {"trunk": self.trunk}
        if self.dueling:  # a head is one Linear: a BatchedMLP of a one-layer Sequential
            self.value = batched.BatchedMLP([nn.Sequential(net.value) for net in nets])
            self.advantage = batched.BatchedMLP([nn.Sequential(net.advantage) for net in nets])
            self.parts.update(value=self.value, advantage=self.advantage)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """[K, batch, obs] -> [K, batch, actions]."""
        return q_values(self, obs)

    @staticmethod
    def _key(part: str, key: str) -> str:
        """QNetwork's key of a part's parameter: trunk.0.weight, or value.weight (the head's Sequential dropped)."""
        return f"{part}.{key}" if part == "trunk" else f"{part}.{key.split('.', 1)[1]}"

    def seed_state(self, seed: int) -> dict[str, torch.Tensor]:
        """Seed `seed`'s weights as a QNetwork's state dict (CPU copies)."""
        return {self._key(part, key): value for part, net in self.parts.items()
                for key, value in net.seed_state(seed).items()}

    def load_seed_state(self, seed: int, state: Mapping[str, Any]) -> None:
        """Write a QNetwork state dict into seed `seed`, in place."""
        expected = {self._key(part, key) for part, net in self.parts.items() for key in net.keys}
        if set(state) != expected:
            raise ValueError(f"weights with keys {sorted(state)} do not fit a Q network with {sorted(expected)}")
        for part, net in self.parts.items():
            net.load_seed_state(seed, {key: state[self._key(part, key)] for key in net.keys})


def q_networks(config: Any, *, obs_dim: int, num_actions: int, seeds: Sequence[int], device: torch.device,
               obs_shape: tuple[int, ...] | None = None, obs_dtype: Any = None) -> tuple[nn.Module, nn.Module]:
    """(Q, target) networks: each seed's, initialised as a one-seed learner with its seed does, as one batched
    model each; the target starts as a copy of Q and takes no gradient. Image observations (`obs_shape`) get
    our CNN in place of the built-in mlp (networks.image_model)."""
    model, model_config = image_model(config.model, config.model_config, obs_shape=obs_shape or (obs_dim,),
                                      obs_dtype=obs_dtype or "float32")
    nets = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):  # seeded init without moving the global torch stream
            torch.manual_seed(seed)
            if model == BUILT_IN:
                net = QNetwork(obs_dim=obs_dim, num_actions=num_actions, hiddens=config.fcnet_hiddens,
                               activation=config.fcnet_activation, dueling=config.dueling)
            else:
                net = build_model(model, num_inputs=obs_dim, num_outputs=num_actions, model_config=model_config)
        nets.append(net.to(device))
    # Copies of the one-seed nets, not of the batched model: a BatchedMLP's forward steps hold its own
    # parameters, so a deep copy of it would still compute with the original's.
    copies = [copy.deepcopy(net) for net in nets]
    if model == BUILT_IN:
        return BatchedQNetwork(nets), BatchedQNetwork(copies).requires_grad_(False)
    return (batched.StackedModule(nets, num_inputs=obs_dim, name=model),
            batched.StackedModule(copies, num_inputs=obs_dim, name=model).requires_grad_(False))


def dqn_targets(*, rewards: torch.Tensor, discount: torch.Tensor, terminated: torch.Tensor,
                next_q_target: torch.Tensor, next_q_online: torch.Tensor | None) -> torch.Tensor:
    """The TD targets `rewards + discount * V(next_obs)` of a batch of (n-step) transitions.

    `rewards` is the discounted n-step reward sum and `discount` gamma ** (steps taken), so the
    1-step case is discount == gamma. V(next) is 0 after a termination; a truncated transition
    (terminated False) bootstraps from its final observation. With `next_q_online` (double Q)
    the online network picks the next action and `next_q_target` values it; without,
    V(next) = max_a next_q_target. Both Q arrays are [..., batch, actions], already masked.
    """
    if next_q_online is not None:
        next_value = next_q_target.gather(-1, next_q_online.argmax(-1, keepdim=True)).squeeze(-1)
    else:
        next_value = next_q_target.max(-1).values
    next_value = torch.where(terminated, 0.0, next_value)
    return rewards + discount * next_value


def td_loss(kind: str, q: torch.Tensor, target: torch.Tensor,
            weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(each seed's mean huber or mse loss, their sum to differentiate) of [K, batch] Q-values against their
    targets; the seeds share no parameter, so the sum's gradient is each seed's own. [batch] inputs (one
    seed without the seed axis) give the loss function's own mean twice, as the one-seed learner had it.
    `weights` (prioritized replay's, like q): each sample's loss times its weight, then the mean."""
    loss_fn = nn.functional.huber_loss if kind == "huber" else nn.functional.mse_loss
    if weights is not None:
        per_seed = (loss_fn(q, target, reduction="none") * weights).mean(-1)
        return per_seed.detach(), per_seed.sum()
    if q.dim() == 1:
        total = loss_fn(q, target)
        return total.detach(), total
    per_seed = loss_fn(q, target, reduction="none").mean(-1)
    return per_seed.detach(), per_seed.sum()


class QActing(Acting):
    """DQN's acting network: the QNetwork, whose greedy action is the argmax of its Q-values."""

    def sizes(self, weights: Mapping[str, Any], settings: Any) -> tuple[int, int]:
        last = 2 * len(settings.fcnet_hiddens)  # Linear layers sit at even indices
        head = "advantage.weight" if settings.dueling else f"trunk.{last}.weight"
        return weights["trunk.0.weight"].shape[1], weights[head].shape[0]

    def network(self, settings: Any, *, obs_dim: int, actions: int) -> nn.Module:
        return QNetwork(obs_dim=obs_dim, num_actions=actions, hiddens=settings.fcnet_hiddens,
                        activation=settings.fcnet_activation, dueling=settings.dueling)

    def layers(self, weights: Mapping[str, torch.Tensor], settings: Any) -> Layers:
        found = linears(weights, prefix="trunk.")
        if settings.dueling:  # Q = V + A - mean(A) is linear in the trunk's features: one layer
            w_a, b_a = weights["advantage.weight"], weights["advantage.bias"]
            found.append((weights["value.weight"] + w_a - w_a.mean(0, keepdim=True),
                          weights["value.bias"] + b_a - b_a.mean()))
        return found
