"""Building blocks for K independent seeds trained as one batched model (issue 16).

Our networks are small, so on a CPU an update costs mostly per-op overhead: K seeds' networks
evaluated as one batched model, and K optimizer states stepped as one tensor, cost far less than K
separate ones. Nothing here mixes seeds: seed i's outputs depend only on seed i's parameters and
inputs, its gradient only on its own loss.

- `BatchedMLP`: K Linear/activation stacks as weights [K, out, in] (one `baddbmm` per layer).
- `StackedModule`: K copies of any module (a registered model) through `torch.func.vmap`, or one after the
  other for a module that says vmap is slower for it (`seeds_in_a_loop`: our CNN).
- `SeedVector`: one learned vector (or matrix) per seed (PPO's Gaussian log-std, gSDE's matrix of them).

K seeds' optimizer (`SeedAdam`) is in tune_runner.algos.optim, their envs stepped as one (`SeedEnvs`) in
tune_runner.algos.learner_envs; their random draws and minibatch plans in tune_runner.algos.seed_streams; per-seed
bookkeeping without torch (seed derivation, episode windows, metrics) in tune_runner.algos.seeds.

Every module takes inputs shaped [K, batch, ...] and gives outputs [K, batch, ...]; parameters carry
the seed as their first axis. With K = 1 each does what the one-seed code did, op for op where it
matters for speed. `seed_state(i)` / `load_seed_state(i, ...)` read and write one seed in the format
of a one-seed learner, so a K-seed checkpoint is K one-seed checkpoints.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tune_runner.tune_rl_policy import NUMPY_GRAD_MIN, Tanh
from tune_runner.tune_rl_policy import _transforms_active as transforms_active


class BatchedMLP(nn.Module):
    """K `nn.Sequential`s of Linear layers and stateless activations, as one module.

    The parameters are, in the order the sequentials list theirs, each Linear's weight [K, out, in]
    and bias [K, out], so the optimizer's flat layout per seed is that of one sequential. One seed's
    have no seed axis: nn.Linear's shapes and op, without a select per parameter in every pass.
    """

    def __init__(self, nets: Sequence[nn.Sequential], stacked: Sequence[torch.Tensor] | None = None, *,
                 seed_axis: bool = False) -> None:
        """K sequentials; or, with `stacked`, one sequential for the layout and each of its parameters for all K
        seeds, [K, ...] in its order (`orthogonal_mlps`: no K modules to build). `seed_axis`: one seed's parameters
        keep the seed axis and run baddbmm as K seeds' do, so a seed computes the same bits alone as beside others
        (SAC's policy: the actions it stores and the env's path follow them)."""
        super().__init__()
        self.num_seeds = len(nets) if stacked is None else len(stacked[0])
        self.stacked = self.num_seeds > 1 or seed_axis
        ops: list[int | nn.Module] = []  # an int: the Linear layer with that number; else applied as is
        self.keys: list[str] = []  # the one-seed state-dict key of each parameter
        params = []
        for index, module in enumerate(nets[0]):
            if isinstance(module, nn.Linear):
                ops.append(len(params) // 2)
                for name in ("weight", "bias"):
                    if stacked is None:
                        tensors = [getattr(net[index], name).detach() for net in nets]
                        value = torch.stack(tensors) if self.stacked else tensors[0].clone()
                    else:
                        value = stacked[len(params)] if self.stacked else stacked[len(params)][0].clone()
                    params.append(nn.Parameter(value))
                    self.keys.append(f"{index}.{name}")
            elif any(True for _ in module.parameters()):
                raise ValueError(f"BatchedMLP takes Linear layers and parameter-free modules, got {module}")
            else:
                ops.append(module)
        self.params = nn.ParameterList(params)
        # Each step of the forward pass as one callable, built once: at K = 1 the per-layer Python (ParameterList
        # indexing, isinstance) costs as much as the layer. The Parameter objects stay the same when SeedAdam
        # re-homes their data.
        self._steps = [self._linear(*params[2 * op:2 * op + 2]) if isinstance(op, int) else op for op in ops]
        # Linear, tanh, ..., Linear with K > 1: `forward` may run it as one TanhMLP (see there); its narrowest
        # hidden layer, or 0 for any other stack
        tanh_mlp = self.num_seeds > 1 and len(ops) >= 3 and len(ops) % 2 == 1 and all(
            isinstance(op, Tanh) for op in ops[1::2]) and all(isinstance(op, int) for op in ops[::2])
        self._tanh_width = min(p.shape[-1] for p in params[1:-2:2]) if tanh_mlp else 0

    def _linear(self, weight: nn.Parameter, bias: nn.Parameter) -> Callable[[torch.Tensor], torch.Tensor]:
        if not self.stacked:  # nn.Linear's own op on 2-D tensors, as the one-seed learner always ran
            return lambda x: F.linear(x, weight, bias)
        return lambda x: torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[K, batch, in] -> [K, batch, out]; one seed also takes [batch, in] -> [batch, out]."""
        if self._tanh_width and tanh_mlp_fits(x, self._tanh_width):
            return TanhMLP.apply(x, *self.params)
        if self.stacked:
            x = x if x.dim() == 3 else x.unsqueeze(0)  # one seed's [batch, in] (stacked: with the seed axis)
            for step in self._steps:
                x = step(x)
            return x
        with_axis = x.dim() == 3
        if with_axis:
            x = x[0]
        for step in self._steps:
            x = step(x)
        return x.unsqueeze(0) if with_axis else x

    def forward_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what the last layer gets, the output), each shaped as `forward`'s output: gSDE's features and the mean."""
        with_axis = self.stacked or x.dim() == 3
        if not self.stacked and with_axis:
            x = x[0]
        for step in self._steps[:-1]:
            x = step(x)
        out = self._steps[-1](x)
        return (x.unsqueeze(0), out.unsqueeze(0)) if not self.stacked and with_axis else (x, out)

    def seed_state(self, seed: int) -> dict[str, torch.Tensor]:
        """Seed `seed`'s weights as the state dict of one sequential (CPU copies)."""
        return {key: (p[seed] if self.stacked else p).detach().cpu().clone()
                for key, p in zip(self.keys, self.params, strict=True)}

    def load_seed_state(self, seed: int, state: Mapping[str, Any]) -> None:
        """Write `seed_state`'s format into seed `seed`, in place (the optimizer's views stay)."""
        rows = {key: p[seed] if self.stacked else p for key, p in zip(self.keys, self.params, strict=True)}
        load_into(rows, 0, state, num_seeds=1)


def orthogonal_mlps(seeds: Sequence[int], nets: Sequence[tuple[nn.Sequential, float]], *,
                    device: torch.device) -> list[BatchedMLP]:
    """K seeds' copies of each of `nets` (an MLP of ours, common.mlp, and the gain of its last layer), with the
    weights each seed's nets get from, in turn for each net, nn.Linear's own init and then orthogonal_ (gain
    sqrt(2), the last layer's `gain`; zero biases) under torch.manual_seed(seed): ppo.init_layers one seed and
    net at a time, for all seeds in a few ops per layer. Each seed's draws come from its own generator, in the
    order the one-seed build makes them (Linear's init is overwritten but moves the stream); the QR decompositions
    run batched over the seeds, matrix by matrix the same LAPACK calls. Building 1024 seeds' modules one by one
    took 1.6 s of a 2.8 s learner build (2026-11-28)."""
    generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
    k, shapes = len(seeds), [[m.weight.shape for m in net if isinstance(m, nn.Linear)] for net, _ in nets]
    normals = [[torch.empty(k, *shape) for shape in layers] for layers in shapes]
    scratch = {size: torch.empty(size) for layers in shapes for shape in layers for size in (shape.numel(), shape[0])}
    for i, generator in enumerate(generators):
        for layers, draws in zip(shapes, normals, strict=True):
            for shape in layers:  # nn.Linear's init: weight, then bias
                scratch[shape.numel()].uniform_(generator=generator)
                scratch[shape[0]].uniform_(generator=generator)
            for draw in draws:
                draw[i].normal_(generator=generator)
    out = []
    for (net, gain), draws in zip(nets, normals, strict=True):
        stacked = []
        for n, flat in enumerate(draws):  # orthogonal_, on [K, rows, cols]
            wide = flat.shape[1] < flat.shape[2]
            q, r = torch.linalg.qr(flat.transpose(1, 2) if wide else flat)
            q *= torch.diagonal(r, dim1=-2, dim2=-1).sign().unsqueeze(-2)
            weight = (q.transpose(1, 2) if wide else q).contiguous()
            weight.mul_(gain if n == len(draws) - 1 else math.sqrt(2))
            stacked += [weight.to(device), torch.zeros(k, flat.shape[1], device=device)]
        out.append(BatchedMLP([net], stacked))
    return out


def tanh_mlp_fits(x: torch.Tensor, width: int) -> bool:
    """Whether TanhMLP computes what the layers one by one compute for `x` ([K, batch, in]) and hidden layers at
    least `width` wide: on a CPU in float32 or float64, outside torch.func's transforms, and where Tanh would take
    NumPy's tanh (with a gradient only from NUMPY_GRAD_MIN elements up)."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or transforms_active():
        return False
    return not torch.is_grad_enabled() or x.shape[0] * x.shape[1] * width >= NUMPY_GRAD_MIN


class TanhMLP(torch.autograd.Function):
    """K seeds' Linear, tanh, ..., Linear stack as one autograd node: the ops `BatchedMLP`'s layers run one by one
    (baddbmm, NumPy's tanh) and the ones autograd runs for their gradients, each seed's numbers as they were, with
    half the fresh [K, batch, width] tensors per pass.

    At K = 8 on ppo_small's minibatch of 512 a hidden activation is 1 MB, more than a core's L2 cache holds beside
    its inputs: an update's time went mostly to writing fresh activations and gradients, not to the matmuls. Here
    tanh writes over the matmul's output and its gradient over the incoming gradient (both this node's own), so a
    hidden layer makes one such tensor forward and one backward instead of two each.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        inputs, h = [x], x
        for i in range(0, len(params), 2):
            weight, bias = params[i], params[i + 1]
            h = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
            if i + 2 < len(params):
                np.tanh(h.numpy(), out=h.numpy())  # in place: h is this node's own, nobody else holds it
                inputs.append(h)
        ctx.save_for_backward(*inputs, *params[::2])
        return h

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        layers = len(saved) // 2
        inputs, weights = saved[:layers], saved[layers:]
        grads: list[torch.Tensor | None] = [None] * (1 + 2 * layers)
        for i in reversed(range(layers)):
            # BaddbmmBackward0's and the bias broadcast's ops, so each gradient rounds as autograd's did
            grads[1 + 2 * i] = torch.bmm(inputs[i].transpose(1, 2), grad).transpose(1, 2)
            grads[2 + 2 * i] = grad.sum(1)
            if i == 0:
                if ctx.needs_input_grad[0]:
                    grads[0] = torch.bmm(grad, weights[0])
                break
            grad_in = torch.bmm(grad, weights[i])  # fresh: the tanh gradient may overwrite it
            grad = torch.ops.aten.tanh_backward.grad_input(grad_in, inputs[i], grad_input=grad_in)
        return tuple(grads)


def seed_row(tensor: torch.Tensor, seed: int, num_seeds: int) -> torch.Tensor:
    """Seed `seed`'s part of a batched tensor: row `seed`, or with one seed (no seed axis) the tensor itself."""
    return tensor if num_seeds == 1 else tensor[seed]


def load_into(tensors: Mapping[str, torch.Tensor], seed: int, state: Mapping[str, Any], *, num_seeds: int) -> None:
    """Copy `state` into seed `seed`'s part of each of `tensors` (same keys, same per-seed shapes), in place."""
    if set(state) != set(tensors):
        raise ValueError(f"weights with keys {sorted(state)} do not fit a network with {sorted(tensors)}")
    with torch.no_grad():
        for key, tensor in tensors.items():
            value = state[key] if isinstance(state[key], torch.Tensor) else torch.as_tensor(np.asarray(state[key]))
            target = seed_row(tensor, seed, num_seeds)
            if value.shape != target.shape:
                raise ValueError(f"weights {key!r} of shape {tuple(value.shape)} do not fit {tuple(target.shape)}")
            target.copy_(value)


class StackedModule(nn.Module):
    """K copies of any module (a registered model) evaluated as one, through torch.func.vmap.

    With K = 1 the module itself runs, unchanged. With K > 1 its parameters and buffers are stacked
    ([K, ...] each) and `functional_call` runs the module's own forward under `vmap`; a module that
    vmap cannot run (data-dependent Python control flow, in-place buffer updates, .item()) is refused
    at construction with a ValueError. A module with `seeds_in_a_loop` set runs once per seed on that seed's
    slice of the stacked parameters instead, on a CPU (where it was measured; a GPU's batched kernels keep vmap):
    the same ops as one seed's, K times.
    """

    def __init__(self, modules: Sequence[nn.Module], *, num_inputs: int, name: str) -> None:
        super().__init__()
        self.num_seeds = len(modules)
        if self.num_seeds == 1:
            self.module = modules[0]
            return
        params, buffers = torch.func.stack_module_state(list(modules))
        self.names = list(params)
        self.params = nn.ParameterList([nn.Parameter(params[n]) for n in self.names])
        self.buffers_ = buffers
        self.keys = list(modules[0].state_dict())
        self._skeleton = [copy.deepcopy(modules[0]).to("meta")]  # in a list: not a submodule, no parameters
        self.in_a_loop = bool(getattr(modules[0], "seeds_in_a_loop", False))
        try:
            self(torch.zeros(self.num_seeds, 2, num_inputs, device=self.params[0].device)).sum().backward()
        except Exception as exc:  # noqa: BLE001 - the user's module: one line naming it
            raise ValueError(f"model {name!r} does not run under torch.func.vmap ({type(exc).__name__}: {exc}); "
                             f"num_seeds > 1 needs that: use num_seeds=1 or the built-in mlp") from None
        for p in self.params:
            p.grad = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[K, batch, in] -> [K, batch, out]; one seed also takes [batch, in] -> [batch, out]."""
        if self.num_seeds == 1:
            return self.module(x[0]).unsqueeze(0) if x.dim() == 3 else self.module(x)
        skeleton = self._skeleton[0]

        def call(params: dict, buffers: dict, inputs: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(skeleton, (params, buffers), (inputs,))

        params = dict(zip(self.names, self.params, strict=True))
        if self.loops_on(x.device):
            return torch.stack([call({n: p[i] for n, p in params.items()}, {n: b[i] for n, b in self.buffers_.items()},
                                     x[i]) for i in range(self.num_seeds)])
        return torch.func.vmap(call)(params, self.buffers_, x)

    def loops_on(self, device: torch.device) -> bool:
        """Whether K seeds' calls on `device` run one after the other (seeds_in_a_loop, on a CPU) or through vmap."""
        return self.in_a_loop and device.type == "cpu"

    def _tensors(self) -> dict[str, torch.Tensor]:
        tensors = {**dict(zip(self.names, self.params, strict=True)), **self.buffers_}
        return {key: tensors[key] for key in self.keys}

    def seed_state(self, seed: int) -> dict[str, torch.Tensor]:
        """Seed `seed`'s state dict in the module's own format (CPU copies)."""
        if self.num_seeds == 1:
            return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}
        return {key: t[seed].detach().cpu().clone() for key, t in self._tensors().items()}

    def load_seed_state(self, seed: int, state: Mapping[str, Any]) -> None:
        """Write `seed_state`'s format into seed `seed`, in place."""
        if self.num_seeds == 1:
            self.module.load_state_dict({k: torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v
                                         for k, v in state.items()})
        else:
            load_into(self._tensors(), seed, state, num_seeds=self.num_seeds)


class SeedVector(nn.Module):
    """One learned vector per seed that depends on no input (PPO's Gaussian log-std): [K, size], or [size] for
    one seed. Its one-seed state dict is {"weight": [size]}. gSDE keeps a matrix per seed in one ([K, rows, size]
    or [rows, size]) and reads `weight` itself."""

    def __init__(self, values: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.num_seeds = len(values)
        self.weight = nn.Parameter(torch.stack(list(values)) if self.num_seeds > 1 else values[0].clone())

    def forward(self, ndim: int) -> torch.Tensor:
        """The vectors, shaped to broadcast against a [K, batch, size] tensor (ndim 3) or a one-seed [batch, size]."""
        return self.weight.unsqueeze(-2) if self.num_seeds > 1 or ndim == 3 else self.weight

    def seed_state(self, seed: int) -> dict[str, torch.Tensor]:
        return {"weight": seed_row(self.weight, seed, self.num_seeds).detach().cpu().clone()}

    def load_seed_state(self, seed: int, state: Mapping[str, Any]) -> None:
        load_into({"weight": self.weight}, seed, state, num_seeds=self.num_seeds)


def seed_weights(net: BatchedMLP | StackedModule) -> dict[str, np.ndarray]:
    """A batched network's weights as numpy arrays: one seed's state dict, or with K > 1 each array stacked
    with the seed as its first axis."""
    states = [net.seed_state(i) for i in range(net.num_seeds)]
    if net.num_seeds == 1:
        return {key: value.numpy() for key, value in states[0].items()}
    return {key: np.stack([state[key].numpy() for state in states]) for key in states[0]}


def load_seed_weights(net: BatchedMLP | StackedModule, weights: Mapping[str, Any]) -> None:
    """Load `seed_weights`' output into `net`."""
    for i in range(net.num_seeds):
        net.load_seed_state(i, weights if net.num_seeds == 1 else {key: value[i] for key, value in weights.items()})
