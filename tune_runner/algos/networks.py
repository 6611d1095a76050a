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

from tune_runner.add_args import options, options_parser, parse_options  # noqa: F401 - their old home
from tune_runner.errors import unknown_name
from tune_runner.plugins import MODELS, register_model  # noqa: F401 - plug-in files import it from here too

BUILT_IN = "mlp"  # our learners' own MLP, sized by their fcnet_hiddens / fcnet_activation settings
# MODELS holds it as "tune_runner.algos.networks:MLP" from the start (tune_runner.plugins), so that the
# name is known before torch is imported.


class Model(nn.Module):
    """Base for registered networks: an `add_args` that adds nothing and numpy weights."""

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
