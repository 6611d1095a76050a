"""tune-rl evaluate after a real tiny search (one trial, a budget of seconds), on the best trial's checkpoint
and on the exported bundle, for our ppo and RLlib's PPO; load_policy acts as the restored trainer does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.e2e


def tiny_space(path: Path, trainable: str) -> Path:
    """The shipped ppo_small cut to one trial of about 1000 env steps, checkpointed at its end."""
    from tune_runner.spec.experiment import shipped_spaces

    raw = yaml.safe_load(shipped_spaces()["ppo_small"].read_text())
    raw.pop("backends")
    raw.update(trainable=trainable, stop_at=None, budget={"env_steps": 1000}, searcher="random", num_samples=1,
               scheduler="fifo", space={"lr": {"choice": [0.001]}})
    raw["fixed"].update(num_envs_per_env_runner=4, train_batch_size_per_learner=500, minibatch_size=100,
                        num_epochs=1, seed=0)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def observations() -> np.ndarray:
    return np.random.default_rng(0).normal(scale=[1.0, 1.0, 0.1, 1.0], size=(32, 4)).astype(np.float32)


def search_and_evaluate(cli, home: Path, tmp_path: Path, trainable: str, name: str) -> tuple[Path, object]:
    """Run the tiny search; evaluate its trial's checkpoint and its best.yaml; (checkpoint, loaded policy)."""
    from ray.tune import ExperimentAnalysis

    from tune_runner.results.analysis import last_checkpoint
    from tune_runner.results.policy import load_policy

    result = cli("search", "--space", str(tiny_space(tmp_path / f"{name}.yaml", trainable)), "--name", name,
                 "--no-reevaluate")
    assert result.status == 0, result.err
    exp_path = home / "results" / name
    (trial,) = ExperimentAnalysis(str(exp_path)).trials
    checkpoint = last_checkpoint(trial.path)
    assert checkpoint is not None, list(Path(trial.path).iterdir())
    bundle = yaml.safe_load((exp_path / "best.yaml").read_text())
    assert Path(bundle["checkpoint"]) == checkpoint.resolve()

    for target in (checkpoint, exp_path / "best.yaml"):
        shown = cli("evaluate", str(target), "--episodes", "2", "--seed", "4")
        assert shown.status == 0, shown.err
        policy_line, summary = shown.out.splitlines()
        assert policy_line.endswith(f"{checkpoint.parent.name}/{checkpoint.name}"), policy_line
        assert summary.startswith("evaluate   CartPole-v1  2 episodes (seeds 4-5)  return "), summary
    return checkpoint, load_policy(checkpoint)


def test_evaluate_our_ppo_after_a_search(ray_session, cli, _isolated_home, tmp_path):
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.own import read_checkpoint

    checkpoint, policy = search_and_evaluate(cli, _isolated_home, tmp_path, "ppo", "eval-ppo")
    assert policy.kind == "ppo" and policy.env_id == "CartPole-v1"
    # The trainable's own restore path: a learner built from the trial config, set to the checkpoint's state.
    trial_config = json.loads((checkpoint.parent / "params.json").read_text())
    learner = build_learner("ppo", trial_config)
    learner.set_state(read_checkpoint(checkpoint)["learner"])
    obs = observations()
    np.testing.assert_array_equal(policy.compute_actions(obs), learner.compute_actions(obs, explore=False))
    learner.close()


def test_evaluate_rllib_ppo_after_a_search(ray_session, cli, _isolated_home, tmp_path):
    import torch
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.core import Columns

    checkpoint, policy = search_and_evaluate(cli, _isolated_home, tmp_path, "rllib/PPO", "eval-rllib")
    assert policy.kind.startswith("rllib") and (checkpoint / "learner_group" / "learner" / "rl_module").is_dir()
    # The whole Algorithm restored by RLlib; its env runner's module holds its own copy of the weights.
    algo = Algorithm.from_checkpoint(str(checkpoint))
    try:
        obs = observations()
        out = algo.get_module().forward_inference({Columns.OBS: torch.from_numpy(obs)})
        expected = out[Columns.ACTION_DIST_INPUTS].argmax(-1).numpy()
    finally:
        algo.stop()
    np.testing.assert_array_equal(policy.compute_actions(obs), expected)
    assert [policy.compute_single_action(o) for o in obs[:4]] == expected[:4].tolist()
