"""The best trial's policy as an MLflow pyfunc model (observations in, greedy actions out).

For our `ppo` and `dqn` the policy network comes from the trial's last checkpoint; the model
holds a plain MLP (tune_runner/tune_rl_policy.py is its loader, copied into the model), so

    mlflow.pyfunc.load_model("models:/NAME/1").predict(obs)

needs mlflow, torch and numpy, not tune-rl. RLlib's trainables and the oracle are not exported.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tune_runner import tune_rl_policy
from tune_runner.results.analysis import last_checkpoint
from tune_runner.trainables import checkpoints
from tune_runner.trainables.catalog import backend
from tune_runner.trainables.own import learner_classes
from tune_runner.trainables.trial import learner_settings

MODEL_NAME = "policy"  # the logged model's name, under the parent run


@dataclass(frozen=True)
class Logged:
    """What became of the best trial's policy: a model URI, or why there is none."""

    uri: str | None
    note: str
    version: str | None = None


def policy_layers(learner: str, state: dict[str, Any], config: dict[str, Any]) -> tuple[list[int], dict, str]:
    """(sizes, state dict for tune_rl_policy.build_mlp, activation) of a learner's greedy policy."""
    _, config_cls = learner_classes(learner)
    settings = config_cls.from_dict(learner_settings(config))
    if learner == "ppo":
        linears = _linears(state["pi"], prefix="")
    else:
        q = state["q"]
        linears = _linears(q, prefix="trunk.")
        if settings.dueling:  # Q = V + A - mean(A) is linear in the trunk's features: one layer
            w_a, b_a = q["advantage.weight"], q["advantage.bias"]
            linears.append((q["value.weight"] + w_a - w_a.mean(0, keepdim=True),
                            q["value.bias"] + b_a - b_a.mean()))
    sizes = [linears[0][0].shape[1], *(w.shape[0] for w, _ in linears)]
    layers = {}
    for i, (weight, bias) in enumerate(linears):
        layers[f"{2 * i}.weight"], layers[f"{2 * i}.bias"] = weight, bias
    return sizes, layers, settings.fcnet_activation


def _linears(state: dict[str, torch.Tensor], *, prefix: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (weight, bias) pairs of an nn.Sequential's Linear layers, in order."""
    indices = sorted(int(k[len(prefix):].split(".")[0]) for k in state
                     if k.startswith(prefix) and k.endswith(".weight") and k[len(prefix):].count(".") == 1)
    return [(state[f"{prefix}{i}.weight"], state[f"{prefix}{i}.bias"]) for i in indices]


def save_policy(checkpoint: Path, *, learner: str, config: dict[str, Any], folder: Path) -> Path:
    """The checkpoint's policy as tune_rl_policy data (spec + weights) in `folder`."""
    state = checkpoints.read(checkpoint)["learner"]
    sizes, layers, activation = policy_layers(learner, state, config)
    return tune_rl_policy.save(folder, sizes=sizes, activation=activation, state=layers,
                               about={"learner": learner, "env": config.get("env"),
                                      "env_steps": int(state.get("env_steps", 0))})


def requirements() -> list[str]:
    """Pinned to what is installed: MLflow then infers nothing (that pip resolution takes seconds)."""
    import mlflow

    return [f"mlflow=={mlflow.__version__}", f"torch=={torch.__version__.split('+')[0]}",
            f"numpy=={np.__version__}"]


def log_policy(*, uri: str, experiment_id: str, run_id: str, trainable: str, best: Any,
               register_as: str | None = None) -> Logged:
    """Log the best trial's policy as a model of run `run_id` (and register it as `register_as`)."""
    record = backend(trainable)
    if not record.exports_policy:
        why = "the oracle has no policy" if record.kind == "oracle" else \
            f"only our ppo and dqn are exported, not {trainable}"
        return Logged(None, f"not logged ({why})")
    if best.config.get("model", "mlp") != "mlp":
        return Logged(None, f"not logged (the model is a registered {best.config['model']!r}, the logged "
                            f"policy is our mlp; use tune-rl evaluate or load_policy on the checkpoint)")
    checkpoint = last_checkpoint(best.trial_path)
    if checkpoint is None:
        return Logged(None, f"not logged (no checkpoint in {best.trial_path})")
    import mlflow
    from mlflow.models import Model

    from tune_runner.tracking.callback import client, flat_params

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*An input example was not provided")  # we give a signature
        data = save_policy(checkpoint, learner=trainable, config=best.config, folder=Path(tmp) / "policy")
        # Created here, so that it belongs to the run's experiment (Model.log would use the active one).
        logged = client(uri).create_logged_model(
            experiment_id, name=MODEL_NAME, source_run_id=run_id, model_type="policy",
            params=flat_params({k: v for k, v in best.config.items() if k not in ("env_config",)}),
            tags={"tune_rl.trial_id": best.trial_id, "tune_rl.checkpoint": checkpoint.name})
        previous, chatter = mlflow.get_tracking_uri(), io.StringIO()
        mlflow.set_tracking_uri(uri)  # Model.log and the registry resolve their client from the global URI
        try:
            with contextlib.redirect_stderr(chatter):  # "Successfully registered model": our summary says so
                info = Model.log(artifact_path=None, name=MODEL_NAME, flavor=mlflow.pyfunc, run_id=run_id,
                                 model_id=logged.model_id, loader_module="tune_rl_policy", data_path=str(data),
                                 code_paths=[tune_rl_policy.__file__], pip_requirements=requirements(),
                                 signature=signature(tune_rl_policy.Policy(data).spec["sizes"][0]),
                                 registered_model_name=register_as, await_registration_for=0)
        finally:
            mlflow.set_tracking_uri(previous)
            rest = [line for line in chatter.getvalue().splitlines(keepends=True)
                    if not line.startswith("Successfully registered model")]
            sys.stderr.write("".join(rest))
    version = str(info.registered_model_version) if register_as and info.registered_model_version else None
    shown = f"models:/{register_as}/{version}" if version else f"models:/{logged.model_id}"
    return Logged(shown, f"{shown}  (from {checkpoint.name} of {best.trial_id})", version)


def signature(obs_dim: int) -> Any:
    """float32 observations [batch, obs_dim] in, int64 actions [batch] out (MLflow enforces it)."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    return ModelSignature(inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, obs_dim))]),
                          outputs=Schema([TensorSpec(np.dtype(np.int64), (-1,))]))
