"""Networks by name: a user's `@register_model("name")` classes beside our built-in `mlp`.

A registered model is a torch module built as `cls(num_inputs, num_outputs, args)`: flat
observations in, one output per action (or 1 for a value function) out. `args` holds the
options its `add_args(parser)` declares, with the values a space file gives under
`model_config` (each option is a searchable `model_config.<name>`). Subclass `Model` for
`get_weights`/`set_weights` as numpy arrays and an empty `add_args`.

    @register_model("wide")
    class Wide(Model):
        @staticmethod
        def add_args(parser):
            parser.add_argument("--width", type=int, default=128)

        def __init__(self, num_inputs, num_outputs, args):
            super().__init__(num_inputs, num_outputs, args)
            self.net = nn.Sequential(nn.Linear(num_inputs, args.width), nn.ReLU(), nn.Linear(args.width, num_outputs))

        def forward(self, obs):
            return self.net(obs)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from tune_runner.errors import unknown_name
from tune_runner.plugins import BUILT_IN_MODEL, MODELS, register_model  # noqa: F401 - plug-in files import it from here too
from tune_runner.plugins.add_args import options, options_parser, parse_options  # noqa: F401 - their old home

BUILT_IN = BUILT_IN_MODEL  # our learners' own MLP, sized by their fcnet_hiddens / fcnet_activation settings
# MODELS holds it as "tune_runner.algos.networks:MLP" from the start (tune_runner.plugins), so that the
# name is known before torch is imported.


class Model(nn.Module):
    """Base for registered networks: an `add_args` that adds nothing and numpy weights.

    K seeds of a model (seeds_per_trial) run as one through torch.func.vmap; a model whose batched ops are
    slower than one call per seed (convolutions on a CPU) sets `seeds_in_a_loop = True` and its K copies run
    one after the other on a CPU, each on its own parameters (tune_runner.algos.batched.StackedModule).
    """

    seeds_in_a_loop = False

    def __init__(self, num_inputs: int, num_outputs: int, args: argparse.Namespace) -> None:
        super().__init__()
        self.num_inputs, self.num_outputs, self.args = num_inputs, num_outputs, args

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        """Declare this model's own options on `parser` (flags of `tune-rl train`, keys of model_config)."""

    def get_weights(self) -> dict[str, np.ndarray]:
        """Parameters and buffers as numpy arrays (copies)."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.state_dict().items()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load what `get_weights` returned."""
        self.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})


class MLP(Model):
    """Fully connected layers; inside our learners its sizes are their fcnet_hiddens / fcnet_activation."""

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--fcnet_hiddens", type=int, nargs="+", default=[64, 64], help="hidden layer sizes")
        parser.add_argument("--fcnet_activation", default="tanh", choices=("tanh", "relu", "elu", "silu"),
                            help="activation between layers")

    def __init__(self, num_inputs: int, num_outputs: int, args: argparse.Namespace) -> None:
        from tune_runner.algos.common import mlp

        super().__init__(num_inputs, num_outputs, args)
        self.net = mlp([num_inputs, *args.fcnet_hiddens, num_outputs], args.fcnet_activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class CNN(Model):
    """A small convolutional encoder for image observations, then a hidden layer and the outputs.

    Flat observations come in (our learners keep every observation flat) and are viewed as `obs_shape`,
    channels last (H, W, C) when the last dimension is the smaller end, else channels first (C, H, W).
    Inputs under 36 pixels a side get MinAtar's network (one 3x3 convolution of 16 channels, a hidden layer
    of 128: Young and Tian 2019); larger ones the Nature DQN's (8x8/4 32, 4x4/2 64, 3x3/1 64, hidden 512).
    Our PPO and DQN build it themselves for image-shaped Box observations (`image_model`), filling in
    `obs_shape` and `input_scale` (1/255 for uint8 pixels); `model: cnn` with its options picks it by name.
    K seeds run one after the other on a CPU: 4 of its convolutions under vmap took 1.4x the time of 4 calls on
    one core (bench/README.md, minatar_speed.py).
    """

    seeds_in_a_loop = True

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--obs_shape", type=int, nargs="+", default=None,
                            help="the observation's shape, (H, W, C) or (C, H, W); our learners fill it in")
        parser.add_argument("--input_scale", type=float, default=1.0, help="observations are multiplied by it")
        parser.add_argument("--hidden", type=int, default=0, help="hidden layer size (0: 128 small, 512 large)")

    def __init__(self, num_inputs: int, num_outputs: int, args: argparse.Namespace) -> None:
        super().__init__(num_inputs, num_outputs, args)
        shape = tuple(args.obs_shape or ())
        if len(shape) != 3 or int(np.prod(shape)) != num_inputs:
            raise ValueError(f"model cnn needs obs_shape of 3 numbers whose product is the observation size "
                             f"{num_inputs}, got obs_shape={list(shape)}")
        self.channels_last = shape[-1] < shape[0]
        channels, height, width = (shape[2], shape[0], shape[1]) if self.channels_last else shape
        self.shape, self.scale = shape, float(args.input_scale)
        if min(height, width) < 36:  # MinAtar
            conv = nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU())
            hidden = args.hidden or 128
        else:  # Nature DQN
            conv = nn.Sequential(nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2),
                                 nn.ReLU(), nn.Conv2d(64, 64, 3, stride=1), nn.ReLU())
            hidden = args.hidden or 512
        with torch.no_grad():
            features = conv(torch.zeros(1, channels, height, width)).numel()
        self.conv = conv
        self.head = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, num_outputs))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-1]
        images = obs.reshape(-1, *self.shape) * self.scale
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)
        out = self.head(self.conv(images).flatten(1))
        return out.reshape(*lead, out.shape[-1])


def is_image(shape: tuple[int, ...]) -> bool:
    """A 3-D observation with a channel axis (at most 16) at one end and sides of at least 4: an image."""
    return len(shape) == 3 and min(shape[0], shape[-1]) <= 16 and sorted(shape)[1] >= 4


def image_model(name: str, model_config: Mapping[str, Any], *, obs_shape: tuple[int, ...],
                obs_dtype: Any) -> tuple[str, dict[str, Any]]:
    """The network our learners build: the built-in mlp becomes `cnn` for image observations, and `cnn` gets
    the observation's shape and scale (uint8 pixels: 1/255) unless its model_config gives them."""
    if name == BUILT_IN and is_image(tuple(obs_shape)):
        name = "cnn"
    if name != "cnn":
        return name, dict(model_config)
    scale = 1 / 255 if np.dtype(obs_dtype) == np.uint8 else 1.0
    return name, {"obs_shape": list(obs_shape), "input_scale": scale, **model_config}


def check_model(name: str, model_config: Mapping[str, Any]) -> None:
    """ValueError naming the problem when `name` is not a registered model or `model_config` does not fit it."""
    if name not in MODELS:
        raise ValueError(unknown_name("model", name, list(MODELS)))
    if name == BUILT_IN and model_config:
        raise ValueError(f"model_config {dict(model_config)!r}: the built-in mlp is sized by the agent's own "
                         f"fcnet_hiddens and fcnet_activation; set those instead")
    cls = MODELS.get(name)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"model {name!r} ({cls!r}) is not a torch.nn.Module subclass")
    parse_options(cls, model_config, prog=f"model {name}")


def build_model(name: str, *, num_inputs: int, num_outputs: int, model_config: Mapping[str, Any]) -> nn.Module:
    """An instance of the registered model `name` for `num_inputs` features and `num_outputs` outputs."""
    check_model(name, model_config)
    cls = MODELS.get(name)
    return cls(num_inputs, num_outputs, parse_options(cls, model_config, prog=f"model {name}"))
