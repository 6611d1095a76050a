"""The best trial's policy as an MLflow pyfunc model (observations in, greedy actions out).

For our learners (tune_runner.algos.records) the policy network comes from the trial's last checkpoint; the model
holds a plain MLP, or for image observations our CNN's convolutions before it (tune_runner/tune_rl_policy.py
is its loader, copied into the model), so

    mlflow.pyfunc.load_model("models:/NAME/1").predict(obs)

needs mlflow, torch and numpy, not tune-rl. RLlib's trainables and the oracle are not exported.
Logging it to a run is tune_runner.tracking.log_model's (every MLflow write is in tracking/).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tune_runner import tune_rl_policy
from tune_runner.algos.acting import linears
from tune_runner.algos.records import LEARNERS, ours
from tune_runner.results.analysis import last_checkpoint  # noqa: F401 - tests and older callers read it here
from tune_runner.trainables import checkpoints
from tune_runner.trainables.agents import config_class
from tune_runner.trainables.trial import learner_settings, one_seed_config

MODEL_NAME = "policy"  # the logged model's name, under the parent run


def uses_cnn(state: Any) -> bool:
    """Whether a learner state's networks are our CNN (image observations), not the built-in mlp."""
    nets = [state.get(LEARNERS.get(name).policy_key) for name in ours()]
    return any(isinstance(net, Mapping) and any(str(key).startswith("conv.") for key in net) for net in nets)


def policy_layers(learner: str, state: dict[str, Any], config: dict[str, Any]) -> tuple[list[int], dict, str]:
    """(sizes, state dict for tune_rl_policy.build_mlp, activation) of a learner's greedy policy."""
    record = LEARNERS.get(learner)
    settings = config_class(learner).from_dict(learner_settings(one_seed_config(config)))
    linears = record.acting_network().layers(state[record.policy_key], settings)
    sizes = [linears[0][0].shape[1], *(w.shape[0] for w, _ in linears)]
    layers = {}
    for i, (weight, bias) in enumerate(linears):
        layers[f"{2 * i}.weight"], layers[f"{2 * i}.bias"] = weight, bias
    return sizes, layers, settings.fcnet_activation


def cnn_layers(learner: str, state: dict[str, Any], config: dict[str, Any]) -> tuple[list[int], dict, str, dict]:
    """(head sizes, state dict for tune_rl_policy.ImageNet, activation, its `cnn` spec) of a learner whose
    network is our CNN: the image's shape and scale and the convolutions' strides are the network's, built
    from the trial's config as the learner builds it (they are not in its weights)."""
    from torch import nn

    from tune_runner.algos.networks import CNN
    from tune_runner.trainables.agents import build_learner

    key = LEARNERS.get(learner).policy_key
    built = build_learner(learner, one_seed_config(config))
    try:
        cnn = next(m for m in getattr(built, key).modules() if isinstance(m, CNN))
    finally:
        built.close()
    weights = state[key]
    head = linears(weights, prefix="head.")
    convs = [[m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0]] for m in cnn.conv
             if isinstance(m, nn.Conv2d)]
    about = {"obs_shape": list(cnn.shape), "channels_last": bool(cnn.channels_last), "input_scale": cnn.scale,
             "convs": convs}
    return [head[0][0].shape[1], *(w.shape[0] for w, _ in head)], dict(weights), "relu", about


def save_policy(checkpoint: Path, *, learner: str, config: dict[str, Any], folder: Path,
                member: str | None = None) -> Path:
    """The checkpoint's policy (`member`'s, in a population trial's checkpoint) as tune_rl_policy data (spec +
    weights) in `folder`."""
    state = checkpoints.learner_state(checkpoint, fix="pass another checkpoint", member=member)
    extra: dict[str, Any] = {}
    if uses_cnn(state):  # image observations: the convolutions, then the MLP head
        sizes, layers, activation, extra["cnn"] = cnn_layers(learner, state, config)
    else:
        sizes, layers, activation = policy_layers(learner, state, config)
    actions = state.get("action_space") or {}  # ppo on Box (the bounds) or MultiDiscrete (nvec); none: Discrete
    if "nvec" in actions:  # MultiDiscrete: one argmax per number's logits
        extra.update(action_nvec=[int(n) for n in actions["nvec"]], action_shape=list(actions["shape"]),
                     action_dtype=str(np.dtype(actions["dtype"])))
    elif actions:
        extra.update(action_low=np.asarray(actions["low"]).tolist(), action_high=np.asarray(actions["high"]).tolist(),
                     action_shape=list(actions["shape"]))
        if actions.get("squashed"):  # sac: tanh of the mean, scaled to the bounds
            extra["action_squash"] = True
    if state.get("obs_filter") is not None:  # observation_filter: MeanStdFilter's statistics, as trained
        extra.update(obs_mean=np.asarray(state["obs_filter"]["mean"]).tolist(),
                       obs_var=np.asarray(state["obs_filter"]["var"]).tolist())
    return tune_rl_policy.save(folder, sizes=sizes, activation=activation, state=layers,
                               about={"learner": learner, "env": config.get("env"),
                                      "env_steps": int(state.get("env_steps", 0)), **extra})


def requirements() -> list[str]:
    """Pinned to what is installed: MLflow then infers nothing (that pip resolution takes seconds)."""
    import mlflow

    return [f"mlflow=={mlflow.__version__}", f"torch=={torch.__version__.split('+')[0]}",
            f"numpy=={np.__version__}"]


def signature(spec: dict[str, Any]) -> Any:
    """float32 observations [batch, obs_dim] in; int64 actions [batch] out, or for Box actions float32
    [batch, *action_shape], for MultiDiscrete ones [batch, *action_shape] of the space's dtype (MLflow enforces
    it). `spec` is the saved policy's (tune_rl_policy.Policy.spec)."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    if "action_nvec" in spec:
        out = TensorSpec(np.dtype(spec["action_dtype"]), (-1, *spec["action_shape"]))
    elif "action_shape" in spec:
        out = TensorSpec(np.dtype(np.float32), (-1, *spec["action_shape"]))
    else:
        out = TensorSpec(np.dtype(np.int64), (-1,))
    return ModelSignature(inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, tune_rl_policy.input_size(spec)))]),
                          outputs=Schema([out]))
