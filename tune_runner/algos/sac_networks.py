"""SAC's networks: the squashed Gaussian policy's sample, K seeds' twin Q networks as one batched model, the three
Adams read and written per seed as one optimizer, and `SACActing` (the greedy policy rebuilt for evaluate,
load_policy and the MLflow model from a one-seed state's `pi`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tune_runner.algos import batched
from tune_runner.algos.acting import Acting, Layers, linears
from tune_runner.algos.common import mlp
from tune_runner.algos.optim import SeedAdam

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's clamp of the policy's log std
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def squashed_sample(out: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tanh(mean + std * noise), its log-probability) from the policy's output [..., 2A] (mean, log std): the
    Gaussian's log density less the tanh's log |Jacobian|, log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))
    (the stable form)."""
    mean, log_std = out.chunk(2, dim=-1)
    log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
    u = mean + log_std.exp() * noise
    log_jacobian = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    log_prob = -0.5 * noise.square() - log_std - HALF_LOG_2PI - log_jacobian
    return torch.tanh(u), log_prob.sum(-1)


class TwinQ(nn.Module):
    """K seeds' two Q networks as one BatchedMLP of 2K: Q(obs, action) of both, [K, 2, batch]. A seed's weights are
    one state dict with keys q1.* and q2.* (what `SACActing` would read if Q networks were ever exported)."""

    def __init__(self, nets: Sequence[nn.Sequential]) -> None:
        super().__init__()
        self.num_seeds = len(nets) // 2
        self.net = batched.BatchedMLP(nets)
        self.activation = next((m for m in nets[0] if not isinstance(m, nn.Linear)), None)  # parameter-free

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[K, batch, obs], [K, batch, A] -> [K, 2, batch]."""
        k, n = obs.shape[:2]
        x = torch.cat([obs, actions], -1).unsqueeze(1).expand(k, 2, n, -1).reshape(2 * k, n, -1)
        return self.net(x).view(k, 2, n)

    def detached(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """`forward` through the weights detached: a gradient reaches the inputs (the policy's actions), never the
        Q networks; BatchedMLP's ops, so the numbers are forward's."""
        k, n = obs.shape[:2]
        x = torch.cat([obs, actions], -1).unsqueeze(1).expand(k, 2, n, -1).reshape(2 * k, n, -1)
        params = [p.detach() for p in self.net.params]
        for i in range(0, len(params), 2):
            x = torch.baddbmm(params[i + 1].unsqueeze(1), x, params[i].transpose(1, 2))
            if i + 2 < len(params):
                x = self.activation(x)
        return x.view(k, 2, n)

    def seed_state(self, seed: int) -> dict[str, torch.Tensor]:
        return {f"q{j + 1}.{key}": value for j in range(2) for key, value in self.net.seed_state(2 * seed + j).items()}

    def load_seed_state(self, seed: int, state: Mapping[str, Any]) -> None:
        for j in range(2):
            self.net.load_seed_state(2 * seed + j, {key[3:]: value for key, value in state.items()
                                                     if key.startswith(f"q{j + 1}.")})


def rehomed(params: Sequence[nn.Parameter], rows: int) -> torch.Tensor:
    """Make `params` (the seed, or twin, as their first axis of `rows`) views of one [rows, P] tensor; that tensor
    (the target networks' polyak update is then one lerp)."""
    sizes = [p.numel() // rows for p in params]
    flat = torch.empty(rows, sum(sizes), dtype=params[0].dtype, device=params[0].device)
    offset = 0
    with torch.no_grad():
        for p, n in zip(params, sizes, strict=True):
            flat[:, offset:offset + n].copy_(p.reshape(rows, n))
            p.data = flat[:, offset:offset + n].view(p.shape)
            offset += n
    return flat


class SACOptimizers:
    """The policy's, the Q networks' and the temperatures' SeedAdams, read and written per seed as one optimizer
    (SeedLearnerBase's `optimizer`); `lr` sets the policy's and the Q networks', alpha_lr stays the temperatures'."""

    def __init__(self, pi: SeedAdam, q: SeedAdam, alpha: SeedAdam) -> None:
        self.parts = {"pi": pi, "q": q, "alpha": alpha}
        self.num_seeds = pi.num_seeds

    @property
    def lr(self) -> Any:
        return self.parts["pi"].lr

    @lr.setter
    def lr(self, value: float | Sequence[float]) -> None:
        self.parts["pi"].lr = value
        self.parts["q"].lr = value if isinstance(value, (int, float)) else [lr for lr in value for _ in range(2)]

    @property
    def steps(self) -> list[int]:
        return self.parts["pi"].steps

    def seed_state_dict(self, seed: int) -> dict[str, Any]:
        q = [self.parts["q"].seed_state_dict(2 * seed + j) for j in range(2)]
        return {"pi": self.parts["pi"].seed_state_dict(seed), "alpha": self.parts["alpha"].seed_state_dict(seed),
                "q": {"steps": q[0]["steps"], **{key: torch.stack([q[0][key], q[1][key]])
                                                 for key in ("exp_avg", "exp_avg_sq")}}}

    def load_seed_state_dict(self, seed: int, state: Mapping[str, Any]) -> None:
        self.parts["pi"].load_seed_state_dict(seed, state["pi"])
        self.parts["alpha"].load_seed_state_dict(seed, state["alpha"])
        for j in range(2):
            self.parts["q"].load_seed_state_dict(2 * seed + j, {"steps": state["q"]["steps"],
                                                                **{key: state["q"][key][j]
                                                                   for key in ("exp_avg", "exp_avg_sq")}})


class MeanHead(nn.Sequential):
    """SAC's policy network for acting: its MLP (mean and log std out), giving the mean alone."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # The last layer's mean rows alone: the exported policy's layers (SACActing.layers), so both compute alike
        *hidden, last = self
        for layer in hidden:
            obs = layer(obs)
        rows = len(last.weight) // 2
        return nn.functional.linear(obs, last.weight[:rows], last.bias[:rows])


class SACActing(Acting):
    """SAC's acting network: the policy's mean, whose tanh scaled to the Box's bounds is the greedy action."""

    def sizes(self, weights: Mapping[str, Any], settings: Any) -> tuple[int, int]:
        last = 2 * len(settings.fcnet_hiddens)  # Linear layers sit at even indices
        return weights["0.weight"].shape[1], weights[f"{last}.weight"].shape[0] // 2

    def network(self, settings: Any, *, obs_dim: int, actions: int) -> nn.Module:
        return MeanHead(*mlp([obs_dim, *settings.fcnet_hiddens, 2 * actions], settings.fcnet_activation))

    def layers(self, weights: Mapping[str, torch.Tensor], settings: Any) -> Layers:
        found = linears(weights, prefix="")
        weight, bias = found[-1]
        found[-1] = (weight[:len(weight) // 2], bias[:len(bias) // 2])  # the mean's rows
        return found
