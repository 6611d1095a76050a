"""What a real search leaves in MLflow, read back with the MLflow client: the parent run with the
space, searcher, scheduler, budget, status, best return and best config; a child run per trial
with its searched hyperparameters, metric curves stepped by env steps and its status; on the
parent the exported config, the learning-curve plot, the trials table and (our PPO) the policy
as a model that MLflow alone loads and that acts like the trial's last checkpoint.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.mlflow_helpers import LOAD_WITHOUT_TUNE_RL, subprocess_env

pytestmark = pytest.mark.e2e


def store(home: Path, experiment: str) -> tuple:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, exp, parents, children


def test_oracle_search_parent_children_curves_statuses_and_report(ray_session, cli, _isolated_home, tmp_path):
    from ray.tune import ExperimentAnalysis

    result = cli("search", "--space", "oracle", "--no-reevaluate", "--num-samples", "4", "--set", "budget=4000",
                 "--scheduler", "asha", "--name", "oracle-mlflow")
    assert result.status == 0, result.err
    assert "model      not logged (the oracle has no policy)" in result.out
    assert "see it: tune-rl dashboard" in result.out
    analysis = ExperimentAnalysis(str(_isolated_home / "results" / "oracle-mlflow"))
    trials = {t.trial_id: t for t in analysis.trials}
    chosen = analysis.get_best_trial("episode_return_mean", "max", "last")

    client, exp, parents, children = store(_isolated_home, "oracle")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens it on its runs
    (parent,) = parents
    assert parent.info.run_name == "oracle-mlflow" and parent.info.status == "FINISHED"
    params, tags, metrics = parent.data.params, parent.data.tags, parent.data.metrics
    assert {params["space"], params["searcher"], params["scheduler"], params["budget_env_steps"]} == {
        "oracle", "random", "asha", "4000"}
    assert tags["tune_rl.status"] == "finished" and tags["tune_rl.best_trial"] == chosen.trial_id
    assert metrics["best_episode_return_mean"] == pytest.approx(chosen.last_result["episode_return_mean"])
    assert params["best.lr"] == str(chosen.config["lr"]) and params["best.activation"] == chosen.config["activation"]

    assert sorted(c.info.run_name for c in children) == sorted(trials)
    for child in children:
        trial = trials[child.info.run_name]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert {"lr", "x", "activation", "noise"} <= set(child.data.params)
        assert child.data.params["lr"] == str(trial.config["lr"])
        ended_early = trial.last_result["env_steps"] < 4000
        assert child.data.tags["tune_rl.status"] == ("stopped_early" if ended_early else "terminated")
        history = client.get_metric_history(child.info.run_id, "episode_return_mean")
        progress = analysis.trial_dataframes[trial.trial_id]
        assert sorted(m.step for m in history) == sorted(int(s) for s in progress["env_steps"])
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(
            list(progress.sort_values("env_steps")["episode_return_mean"]))

    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"best.yaml", "learning_curves.png", "trials.csv"} <= artifacts
    folder = Path(client.download_artifacts(parent.info.run_id, "", str(tmp_path / "artifacts")))
    assert (folder / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(folder / "trials.csv")
    assert sorted(table["trial_id"]) == sorted(trials)
    by_tag = {c.info.run_name: c.data.tags["tune_rl.status"] for c in children}
    for row in table.itertuples():
        assert (row.status == "stopped_early") == (by_tag[row.trial_id] == "stopped_early")
    assert not client.search_logged_models(experiment_ids=[exp.experiment_id])


def test_ppo_search_logs_and_registers_a_policy_that_mlflow_alone_loads(ray_session, cli, _isolated_home, tmp_path,
                                                                       capfd):
    import gymnasium as gym
    from ray.tune import ExperimentAnalysis

    from tune_runner.results.pyfunc_model import last_checkpoint
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.own import CHECKPOINT_FILE

    result = cli("search", "--space", "ppo_small", "--no-reevaluate", "--num-samples", "1", "--scheduler", "fifo",
                 "--set", "budget=2048", "--set", "num_envs_per_env_runner=8",
                 "--set", "train_batch_size_per_learner=512", "--set", "minibatch_size=256",
                 "--register-model", "tiny-ppo", "--name", "ppo-model")
    assert result.status == 0, result.err
    assert "model      models:/tiny-ppo/1  (from checkpoint_" in result.out
    assert "Successfully registered" not in result.err + capfd.readouterr().err  # MLflow prints to sys.stderr

    client, exp, (parent,), children = store(_isolated_home, "ppo_small")
    assert len(children) == 1
    assert {"best.yaml", "learning_curves.png", "trials.csv"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id)}
    (logged,) = client.search_logged_models(experiment_ids=[exp.experiment_id])
    assert logged.source_run_id == parent.info.run_id and logged.name == "policy"
    assert client.get_model_version("tiny-ppo", "1").name == "tiny-ppo"

    # Observations CartPole gives, and the actions the trial's last checkpoint takes on them.
    env = gym.make("CartPole-v1")
    obs, rows = env.reset(seed=0)[0], []
    for step in range(64):
        rows.append(obs)
        obs, _, done, truncated, _ = env.step(step % 2)
        if done or truncated:
            obs = env.reset()[0]
    batch = np.asarray(rows, dtype=np.float32)
    (trial,) = ExperimentAnalysis(str(_isolated_home / "results" / "ppo-model")).trials
    learner = build_learner("ppo", trial.config)
    with open(last_checkpoint(trial.path) / CHECKPOINT_FILE, "rb") as f:
        learner.set_state(pickle.load(f)["learner"])
    expected = learner.compute_actions(batch, explore=False)
    learner.close()

    np.save(tmp_path / "obs.npy", batch)
    uri = f"sqlite:///{_isolated_home / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_TUNE_RL, uri, str(tmp_path / "obs.npy"),
                           "models:/tiny-ppo/1"], cwd=tmp_path, env=subprocess_env(PYTHONPATH=""),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "actions0.npy"), expected)
