"""The best trial's policy as an MLflow model: from a checkpoint of our learners (written the way
OwnTrainable writes it, no Ray), logged to a real SQLite store, loaded back by MLflow alone in a
process where tune_runner cannot be imported, and acting exactly as the learner does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.mlflow_helpers import LOAD_WITHOUT_TUNE_RL, subprocess_env, trained_checkpoint
from tune_runner import tune_rl_policy
from tune_runner.results import pyfunc_model as model
from tune_runner.tracking import log_model as tracking_model
from tune_runner.trainables.catalog import backend


def observations(n: int = 64) -> np.ndarray:
    return np.random.default_rng(0).normal(scale=[1.0, 1.0, 0.1, 1.0], size=(n, 4)).astype(np.float32)


def test_last_checkpoint_is_the_highest_number(tmp_path):
    assert model.last_checkpoint(tmp_path) is None
    for name in ("checkpoint_000002", "checkpoint_000010", "checkpoint_000009", "checkpoint_tmp"):
        (tmp_path / name).mkdir()
    assert model.last_checkpoint(tmp_path).name == "checkpoint_000010"


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_exported_mlp_gives_the_learners_greedy_actions(name, tmp_path):
    learner, config = trained_checkpoint(name, tmp_path / "trial")
    folder = model.save_policy(tmp_path / "trial" / "checkpoint_000012", learner=name, config=config,
                               folder=tmp_path / "policy")
    policy = tune_rl_policy.Policy(folder)
    obs = observations()
    np.testing.assert_array_equal(policy.predict(obs), learner.compute_actions(obs, explore=False))
    if name == "dqn":  # the dueling head folded into one layer gives the same Q-values, not just the argmax
        with torch.no_grad():
            expected = learner.q(torch.from_numpy(obs)[None])[0].numpy()  # the learner's Q takes [seeds, batch, obs]
            np.testing.assert_allclose(policy.net(torch.from_numpy(obs)).numpy(), expected, rtol=1e-5, atol=1e-5)
    learner.close()


@pytest.mark.e2e  # trains, logs to MLflow and loads in a fresh interpreter: 15-25 s each
@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_logged_policy_loads_with_mlflow_alone_and_acts_like_the_learner(name, tmp_path):
    from tune_runner.tracking.callback import client, experiment_id

    learner, config = trained_checkpoint(name, tmp_path / "trial")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow = client(uri)
    exp = experiment_id(mlflow, "models", uri)
    run = mlflow.create_run(exp, run_name="parent").info.run_id
    best = SimpleNamespace(trial_path=str(tmp_path / "trial"), config=config, trial_id="trial_00000")
    logged = tracking_model.log_policy(uri=uri, experiment_id=exp, run_id=run, record=backend(name), best=best,
                                       register_as=f"cartpole-{name}")
    assert logged.uri == f"models:/cartpole-{name}/1" and logged.version == "1"
    assert "checkpoint_000012 of trial_00000" in logged.note

    # The model belongs to the run and its experiment; its files sit beside the SQLite store.
    (found,) = mlflow.search_logged_models(experiment_ids=[exp])
    assert found.source_run_id == run and found.name == "policy" and found.tags["tune_rl.trial_id"] == "trial_00000"
    assert (tmp_path / "mlartifacts").is_dir() and not Path("mlruns").exists()
    requirements = (Path(found.artifact_location.removeprefix("file://")) / "requirements.txt").read_text()
    assert "torch==" in requirements and "tune" not in requirements

    obs = tmp_path / "obs.npy"
    np.save(obs, observations())
    argv = [sys.executable, "-c", LOAD_WITHOUT_TUNE_RL, uri, str(obs), logged.uri, f"runs:/{run}/policy"]
    done = subprocess.run(argv, cwd=tmp_path, env=subprocess_env(PYTHONPATH=""), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for i in range(2):
        actions = np.load(tmp_path / f"actions{i}.npy")
        assert actions.dtype == np.int64
        np.testing.assert_array_equal(actions, learner.compute_actions(np.load(obs), explore=False))
    learner.close()


def test_no_model_for_the_oracle_rllib_or_a_trial_without_checkpoints(tmp_path):
    best = SimpleNamespace(trial_path=str(tmp_path), config={}, trial_id="t")
    common = {"uri": "sqlite:///unused.db", "experiment_id": "0", "run_id": "r", "best": best}
    assert tracking_model.log_policy(record=backend("oracle"), **common).note == "not logged (the oracle has no policy)"
    assert "not rllib/PPO" in tracking_model.log_policy(record=backend("rllib/PPO"), **common).note
    assert tracking_model.log_policy(record=backend("ppo"), **common).note.startswith("not logged (no checkpoint in")


def test_the_oracles_policy_is_refused_without_importing_torch():
    """An oracle search ends by asking for its policy; refusing it must not import torch, which cost every
    oracle search ~4 s after its last trial (17.5 -> 14.0 s for a one-trial search, 24 -> 20 CPU-s). (An RLlib
    search has imported RLlib, and with it torch, when it resolved its algorithm.)"""
    probe = """
import json, sys
from types import SimpleNamespace
from tune_runner.tracking import log_model as model
from tune_runner.trainables.catalog import backend
best = SimpleNamespace(trial_path=".", config={}, trial_id="t")
note = model.log_policy(uri="sqlite:///unused.db", experiment_id="0", run_id="r", record=backend("oracle"),
                        best=best).note
print(json.dumps([note, "torch" in sys.modules]))
"""
    import json

    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    note, torch_imported = json.loads(ran.stdout.strip().splitlines()[-1])
    assert note == "not logged (the oracle has no policy)" and not torch_imported, ran.stderr
