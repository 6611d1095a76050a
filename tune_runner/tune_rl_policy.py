"""The loader of a tune-rl policy logged as an MLflow pyfunc model: observations in, actions out.

MLflow copies this one file into the logged model (`code/`) and imports it as `tune_rl_policy`
to load the model, so it imports only torch and numpy: a caller needs mlflow, not tune-rl.

The model's data folder holds `policy.json` (layer sizes and activation) and `policy.pt` (the
weights): a plain MLP whose argmax is the greedy action of the trial's PPO policy or DQN
Q-network (a dueling head is folded into one linear layer when it is exported). For PPO on a
Box action space the spec also holds `action_low`, `action_high` and `action_shape`: the MLP's
output is the Gaussian's mean, clipped to those bounds as the env got it in training; with `action_squash`
(SAC's tanh-squashed Gaussian) it is the mean's tanh scaled to the bounds. On a MultiDiscrete
(or MultiBinary) action space it holds `action_nvec`, `action_shape` and `action_dtype`: the MLP's output is
one segment of logits per number, and each number is its segment's argmax. A policy
trained with `observation_filter: MeanStdFilter` holds `obs_mean` and `obs_var`, and each
observation is first scaled as in training: (obs - mean) / sqrt(var + 1e-8), clipped to +-10.

A policy for image observations (our CNN) holds `cnn`: the image's `obs_shape`, `channels_last`, `input_scale`
and its convolutions as [in, out, kernel, stride] (each followed by a ReLU); observations still come in flat,
are viewed as images and scaled, and the convolutions' flattened output feeds the MLP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

NETWORK_FILE, WEIGHTS_FILE = "policy.json", "policy.pt"  # the network's layout, its weights


def numpy_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh of a CPU tensor by NumPy, into a new tensor in torch's own (64-byte aligned) memory: a view of a NumPy
    array could round differently in later kernels (see algos.common.to_tensor)."""
    output = torch.empty(x.shape, dtype=x.dtype)
    np.tanh(x.detach().numpy(), out=output.numpy())
    return output


class _NumpyTanh(torch.autograd.Function):
    """tanh by NumPy's vectorized kernel, its gradient by torch's own tanh_backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        output = numpy_tanh(x)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, output)


# torch.func's transforms (vmap over K registered models) take torch.tanh: a NumPy call cannot see their tensors.
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)


# The autograd Function's own Python costs about 30 µs a call: below this many elements torch.tanh with its gradient
# is faster (one thread, 2026-11-27: 8,192 elements 44 against 63 µs forward and backward, 12,288 86 against 72 µs).
NUMPY_GRAD_MIN = 10_000


class Tanh(nn.Module):
    """nn.Tanh, computed by NumPy on the CPU: torch's CPU tanh runs at about 0.3 G elements/s on one thread where
    NumPy's runs at 2 (2026-11-27, torch 2.13.0 CPU build, AVX-512), and it was a fifth of a PPO update's time.
    Without a gradient (acting, evaluating, this loader) it is always NumPy's, so a logged policy computes what the
    learner's actions did, to the bit; with one, from NUMPY_GRAD_MIN elements up. On a GPU, in half precision or
    under torch.func's transforms it is torch.tanh (equal to about 1e-7)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or _transforms_active():
            return torch.tanh(x)
        if x.requires_grad and torch.is_grad_enabled():
            return _NumpyTanh.apply(x) if x.numel() >= NUMPY_GRAD_MIN else torch.tanh(x)
        return numpy_tanh(x)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def build_mlp(sizes: list[int], activation: str) -> nn.Sequential:
    """Linear layers `sizes[i] -> sizes[i + 1]`, `activation` between them (not after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class ImageNet(nn.Module):
    """Convolutions (each then a ReLU) over flat observations viewed as images, then an MLP: the state-dict
    keys of tune-rl's CNN (`conv.0.weight`, ..., `head.0.weight`, ...)."""

    def __init__(self, cnn: dict[str, Any], sizes: list[int], activation: str) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for channels_in, channels_out, kernel, stride in cnn["convs"]:
            layers += [nn.Conv2d(channels_in, channels_out, kernel, stride=stride), nn.ReLU()]
        self.conv, self.head = nn.Sequential(*layers), build_mlp(sizes, activation)
        self.shape, self.scale = tuple(cnn["obs_shape"]), float(cnn["input_scale"])
        self.channels_last = bool(cnn["channels_last"])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        images = obs.reshape(-1, *self.shape) * self.scale
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)
        return self.head(self.conv(images).flatten(1))


def build_net(spec: dict[str, Any]) -> nn.Module:
    """The policy network a spec describes: an MLP, or with `cnn` convolutions before it."""
    if "cnn" in spec:
        return ImageNet(spec["cnn"], spec["sizes"], spec["activation"])
    return build_mlp(spec["sizes"], spec["activation"])


def input_size(spec: dict[str, Any]) -> int:
    """The length of one flat observation."""
    return int(np.prod(spec["cnn"]["obs_shape"])) if "cnn" in spec else int(spec["sizes"][0])


def save(folder: Path, *, sizes: list[int], activation: str, state: dict[str, torch.Tensor],
         about: dict[str, Any]) -> Path:
    """Write a policy's spec and weights into `folder` (the model's data)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"sizes": sizes, "activation": activation, **about}
    build_net(spec).load_state_dict(state)  # fails here, not at load time, on a mismatch
    (folder / NETWORK_FILE).write_text(json.dumps(spec, indent=1))
    torch.save({k: v.detach().cpu() for k, v in state.items()}, folder / WEIGHTS_FILE)
    return folder


class Policy:
    """What `mlflow.pyfunc.load_model(...)` wraps: `predict(obs)` gives greedy actions."""

    def __init__(self, folder: Path) -> None:
        self.spec = json.loads((folder / NETWORK_FILE).read_text())
        self.net = build_net(self.spec)
        self.net.load_state_dict(torch.load(folder / WEIGHTS_FILE, weights_only=True))
        self.net.eval()

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> np.ndarray:
        """Actions for a batch of flat observations [batch, obs_dim] (a DataFrame works too): int64 [batch] for
        Discrete actions, float32 [batch, *action_shape] for Box actions, [batch, *action_shape] of the space's
        dtype for MultiDiscrete ones."""
        obs = np.array(getattr(model_input, "values", model_input), dtype=np.float32)  # a copy torch may own
        obs = obs.reshape(-1, input_size(self.spec))
        if "obs_mean" in self.spec:
            mean, var = (np.asarray(self.spec[key], dtype=np.float64) for key in ("obs_mean", "obs_var"))
            obs = np.clip((obs - mean) / np.sqrt(var + 1e-8), -10.0, 10.0).astype(np.float32)
        with torch.no_grad():
            out = self.net(torch.from_numpy(obs)).numpy()
        if "action_nvec" in self.spec:
            bounds = np.cumsum([0, *self.spec["action_nvec"]])
            picks = np.stack([out[:, a:b].argmax(-1) for a, b in zip(bounds[:-1], bounds[1:], strict=True)], axis=-1)
            return picks.astype(self.spec["action_dtype"]).reshape(len(out), *self.spec["action_shape"])
        if "action_low" not in self.spec:
            return out.argmax(-1).astype(np.int64)
        low, high = (np.asarray(self.spec[key], dtype=np.float32) for key in ("action_low", "action_high"))
        if self.spec.get("action_squash"):  # sac: tanh of the mean scaled to the bounds (ActionSpace.from_unit's ops)
            out = low + (np.tanh(out) + 1.0) * 0.5 * (high - low)
        return np.clip(out, low, high).astype(np.float32).reshape(len(out), *self.spec["action_shape"])


def _load_pyfunc(data_path: str) -> Policy:
    """MLflow's hook for `loader_module` models."""
    return Policy(Path(data_path))
