"""The best trial's policy logged as an MLflow model of the search's parent run (and registered, when asked).

What the model holds, and how it is built from a checkpoint, is tune_runner.results.pyfunc_model's; this module
only writes it to the store.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_runner.results.analysis import last_checkpoint
from tune_runner.tracking import uri as mlflow_uri

if TYPE_CHECKING:
    from tune_runner.trainables.backends import Backend


@dataclass(frozen=True)
class Logged:
    """What became of the best trial's policy: a model URI, or why there is none."""

    uri: str | None
    note: str
    version: str | None = None


NOT_LOGGED = Logged(None, "not logged (no best trial)")


def log_policy(*, uri: str, experiment_id: str, run_id: str, record: Backend, best: Any,
               register_as: str | None = None) -> Logged:
    """Log the best trial's policy as a model of run `run_id` (and register it as `register_as`); `record` is the
    search's trainable, as preflight resolved it."""
    refused = _not_ours(record, best)
    if refused is not None:
        return refused
    # torch: imported only for a policy we log (an oracle search saves ~4 s)
    from tune_runner.results import pyfunc_model

    if not best.trial_path:  # a population trial's member: its trial's checkpoint holds the whole batch
        return Logged(None, "not logged (the best is a member of a population trial: no checkpoint of its own)")
    checkpoint = last_checkpoint(best.trial_path)
    if checkpoint is None:
        return Logged(None, f"not logged (no checkpoint in {best.trial_path})")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*An input example was not provided")  # we give a signature
        data = pyfunc_model.save_policy(checkpoint, learner=record.name, config=best.config,
                                        folder=Path(tmp) / "policy", member=best.trial_id)
        # Created here, so that it belongs to the run's experiment (Model.log would use the active one).
        logged = mlflow_uri.client(uri).create_logged_model(
            experiment_id, name=pyfunc_model.MODEL_NAME, source_run_id=run_id, model_type="policy",
            params=mlflow_uri.flat_params({k: v for k, v in best.config.items() if k not in ("env_config",)}),
            tags={"tune_rl.trial_id": best.trial_id, "tune_rl.checkpoint": checkpoint.name})
        info = _log_model(uri=uri, run_id=run_id, model_id=logged.model_id, data=data, register_as=register_as)
    version = str(info.registered_model_version) if register_as and info.registered_model_version else None
    shown = f"models:/{register_as}/{version}" if version else f"models:/{logged.model_id}"
    return Logged(shown, f"{shown}  (from {checkpoint.name} of {best.trial_id})", version)


def _not_ours(record: Backend, best: Any) -> Logged | None:
    """Why the best trial's policy is not one we log (not our ppo or dqn, or not our mlp); None when it is."""
    from tune_runner.algos.records import ours, spoken

    if not record.exports_policy:
        why = "the oracle has no policy" if record.kind == "oracle" else \
            f"only our {spoken(ours())} are exported, not {record.name}"
        return Logged(None, f"not logged ({why})")
    if best.config.get("model", "mlp") != "mlp":
        return Logged(None, f"not logged (the model is a registered {best.config['model']!r}, the logged "
                            f"policy is our mlp; use tune-rl evaluate or load_policy on the checkpoint)")
    return None


def _log_model(*, uri: str, run_id: str, model_id: str, data: Path, register_as: str | None) -> Any:
    """Model.log of the saved policy `data` into logged model `model_id` (and the registry): its ModelInfo."""
    import mlflow
    from mlflow.models import Model

    from tune_runner import tune_rl_policy
    from tune_runner.results import pyfunc_model

    previous, chatter = mlflow.get_tracking_uri(), io.StringIO()
    mlflow.set_tracking_uri(uri)  # Model.log and the registry resolve their client from the global URI
    try:
        with contextlib.redirect_stderr(chatter):  # "Successfully registered model": our summary says so
            return Model.log(artifact_path=None, name=pyfunc_model.MODEL_NAME, flavor=mlflow.pyfunc, run_id=run_id,
                             model_id=model_id, loader_module="tune_rl_policy", data_path=str(data),
                             code_paths=[tune_rl_policy.__file__], pip_requirements=pyfunc_model.requirements(),
                             signature=pyfunc_model.signature(tune_rl_policy.Policy(data).spec),
                             registered_model_name=register_as, await_registration_for=0)
    finally:
        mlflow.set_tracking_uri(previous)
        rest = [line for line in chatter.getvalue().splitlines(keepends=True)
                if not line.startswith("Successfully registered model")]
        sys.stderr.write("".join(rest))
