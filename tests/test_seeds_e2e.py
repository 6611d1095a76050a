"""seeds_per_trial on a real local Ray: a short ppo search with ASHA judges each trial by the aggregate of its
seeds, MLflow holds one curve per seed beside it, and the re-evaluation trains each config's fresh seeds in one
trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
SEEDS = 3


def seeded_space(path: Path) -> Path:
    """ppo on CartPole, 3 seeds a trial, ASHA, two configs re-evaluated on 3 fresh seeds."""
    path.write_text(yaml.safe_dump({
        "trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 6000}, "num_samples": 2,
        "seeds_per_trial": SEEDS, "scheduler": {"name": "asha", "grace_period": 1500, "reduction_factor": 2},
        "reevaluate": {"top": 2, "seeds": SEEDS},
        "fixed": {"num_envs_per_env_runner": 4, "train_batch_size": 500, "minibatch_size": 125, "num_epochs": 4,
                  "metrics_num_episodes_for_smoothing": 10},
        "space": {"lr": {"loguniform": [1.0e-4, 3.0e-3]}},
    }, sort_keys=False))
    return path


def results(trial: Path) -> list[dict]:
    return [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]


def test_a_seeded_search_reports_per_seed_and_aggregate_and_reevaluates_in_one_trial_per_config(
        ray_session, cli, _isolated_home, tmp_path):
    from mlflow.tracking import MlflowClient

    from tune_runner.algos.seeds import aggregate
    from tune_runner.spec.seed_keys import per_seed

    result = cli("search", "--space", str(seeded_space(tmp_path / "seeded.yaml")), "--name", "seeded")
    assert result.status == 0, result.out + result.err
    assert "seeds batched: one trial per config" in result.out
    folder = _isolated_home / "results" / "seeded"
    trials = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "result.json").is_file())
    assert len(trials) == 2
    for trial in trials:
        for row in results(trial):
            returns = per_seed(row, "episode_return_mean")
            assert len(returns) == SEEDS
            assert row["episode_return_mean"] == pytest.approx(aggregate(returns, "iqm"), nan_ok=True)
            assert row["env_steps"] == min(per_seed(row, "env_steps"))
    again = [p for p in (folder / "reevaluation").iterdir() if p.is_dir() and (p / "result.json").is_file()]
    assert len(again) == 2  # one trial per config, not 2 x 3
    verdict = json.loads((folder / "reevaluation.json").read_text())
    assert [len(row["seeds"]) for row in verdict["ranking"]] == [SEEDS, SEEDS]
    assert len(set(verdict["ranking"][0]["seeds"])) == SEEDS  # three distinct fresh seeds
    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("seeded")
    child = next(r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags)
    logged = set(child.data.metrics)
    assert {"episode_return_mean", *(f"seed_{i}/episode_return_mean" for i in range(SEEDS))} <= logged
    assert not any(key.endswith("/env_steps") for key in logged)  # the step axis, not a curve
    bundle = yaml.safe_load((folder / "best.yaml").read_text())
    assert "seeds_per_trial" not in bundle["config"] and "num_seeds" not in bundle.get("resolved", {})


def test_a_population_search_reevaluates_and_exports_each_trials_best_seed(ray_session, cli, _isolated_home, tmp_path):
    """Three gamma members in every trial (PPOConfig.population), lr searched: the re-evaluation trains each top
    trial's best member on 4 fresh seeds (the population's lists fit 3), and best.yaml holds one member's config."""
    space = yaml.safe_load(seeded_space(tmp_path / "seeded.yaml").read_text())
    space["fixed"]["population"] = {"gamma": [0.99, 0.9, 0.95]}
    space["reevaluate"] = {"top": 2, "seeds": 4}
    (tmp_path / "population.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    result = cli("search", "--space", str(tmp_path / "population.yaml"), "--name", "population")
    assert result.status == 0, result.out + result.err
    assert "2 trial(s) of 3 seeds (iqm) x 6,000 env steps" in result.out
    folder = _isolated_home / "results" / "population"
    verdict = json.loads((folder / "reevaluation.json").read_text())
    assert [len(row["seeds"]) for row in verdict["ranking"]] == [4, 4]
    bundle = yaml.safe_load((folder / "best.yaml").read_text())
    member = int(bundle["description"].rsplit(" ", 1)[1])
    assert bundle["config"]["gamma"] == [0.99, 0.9, 0.95][member] and bundle["config"]["seed"] % 1_000_000 == 0
    assert not any(key.startswith("population") for key in bundle["config"])
