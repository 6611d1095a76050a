"""A conditional space (`when:`) in a real search: Optuna holds the space (define-by-run), the re-evaluation
trains the candidates again, and no trial config, trainable or MLflow run ever holds an inactive parameter."""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = pytest.mark.e2e

# The oracle's optimum has the target network off, so the best configs, and the re-evaluated ones, are those
# without `freq`: a trainable that got freq=None from a candidate without it would fail on it.
SPACE = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 4000}, "searcher": {
    "name": "optuna", "seed": 2, "n_startup_trials": 3}, "scheduler": "fifo", "num_samples": 8,
         "reevaluate": {"top": 2, "seeds": 2},
         "fixed": {"optimum": {"x": 0.5, "use_target_network": False, "freq": 50}},
         "space": {"x": {"uniform": [0.0, 1.0]}, "use_target_network": {"choice": [True, False]},
                   "freq": {"randint": [1, 100], "when": {"use_target_network": True}}}}


def test_an_inactive_parameter_reaches_no_trial_no_trainable_and_no_mlflow_run(ray_session, cli, _isolated_home,
                                                                               tmp_path):
    from mlflow.tracking import MlflowClient
    from ray.tune import ExperimentAnalysis

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    result = cli("search", "--space", str(path), "--name", "cond")
    assert result.status == 0, result.out[-2000:] + result.err
    assert "freq~randint(1, 100) when use_target_network=True" in result.out  # the header says the condition

    exp = _isolated_home / "results" / "cond"
    trials = ExperimentAnalysis(str(exp)).trials
    assert len(trials) == 8 and {t.status for t in trials} == {"TERMINATED"}
    assert {t.config["use_target_network"] for t in trials} == {True, False}  # both branches searched
    for trial in trials:
        on = trial.config["use_target_network"]
        assert ("freq" in trial.config) == on, trial.config
        assert ("applied/freq" in trial.last_result) == on  # what the oracle used: the trainable's own view

    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("c").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 8
    for child in children:
        assert ("freq" in child.data.params) == (child.data.params["use_target_network"] == "True"), child.data.params

    bundle = yaml.safe_load((exp / "best.yaml").read_text())
    assert bundle["config"]["use_target_network"] is False and "freq" not in bundle["config"]
    assert len(bundle["evaluation"]["returns"]) == 2  # re-evaluated on fresh seeds, without freq
    again = cli("best", "cond", "--json")
    assert again.status == 0 and "freq" not in json.loads(again.out)  # (the oracle's own optimum names it)
