"""Every searcher and scheduler end to end on a real local Ray, with the oracle trainable (known optimum),
plus PBT with its audit on our PPO and on RLlib's PPO."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

OPTIMUM = {"lr": 1.0e-3, "x": 0.7, "activation": "tanh"}
SPACE = {"lr": {"loguniform": [1.0e-5, 1.0e-1]}, "x": {"uniform": [0.0, 1.0]},
         "activation": {"choice": ["tanh", "relu", "elu"]}}


def oracle_space(path: Path, *, searcher, scheduler, num_samples=12, noise=0.0, budget=6000,
                 trainable="oracle", space=None) -> Path:
    raw = {"trainable": trainable, "env": "CartPole-v1", "budget": {"env_steps": budget},
           "searcher": searcher, "scheduler": scheduler, "num_samples": num_samples, "reevaluate": False,
           "fixed": {"optimum": OPTIMUM, "log_scale": ["lr"], "noise": noise, "steps_per_iteration": 1000,
                     "rate": 0.3},
           "space": space or SPACE}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def trials_of(home: Path, name: str) -> list:
    from ray.tune import ExperimentAnalysis

    return ExperimentAnalysis(str(home / "results" / name)).trials


def ended_steps(result, trials, *, paused_ok: bool) -> list[int]:
    """Every trial's env steps, once each has ended: TERMINATED, or under a HyperBand-style scheduler PAUSED in a
    bracket that never filled, which the summary counts as stopped early, not paused."""
    ended = ("TERMINATED", "PAUSED") if paused_ok else ("TERMINATED",)
    assert all(t.status in ended for t in trials), [t.status for t in trials]
    assert "paused" not in result.out.split("\ntrials", 1)[1].splitlines()[0]
    return [t.last_result["env_steps"] for t in trials]


def peak(config: dict) -> float:
    from tune_runner.trainables.oracle import peak as oracle_peak

    return oracle_peak(config)


SEARCHERS = [
    ("random", {"name": "random", "seed": 1}, "fifo"),
    ("optuna-tpe", {"name": "optuna", "seed": 1, "n_startup_trials": 4}, "fifo"),
    ("optuna-cmaes", {"name": "optuna", "sampler": "cmaes", "seed": 1, "n_startup_trials": 4}, "fifo"),
    ("hyperopt", {"name": "hyperopt", "seed": 1, "n_initial_points": 4}, "fifo"),
    ("bohb", {"name": "bohb", "seed": 1}, "bohb"),
    ("smac", {"name": "smac", "seed": 1}, "fifo"),
    ("nevergrad", {"name": "nevergrad", "seed": 1}, "fifo"),
]


@pytest.mark.parametrize(("label", "searcher", "scheduler"), SEARCHERS, ids=[s[0] for s in SEARCHERS])
def test_each_searcher_heads_for_the_oracle_optimum(label, searcher, scheduler, ray_session, cli, _isolated_home,
                                                    tmp_path):
    space = oracle_space(tmp_path / "o.yaml", searcher=searcher, scheduler=scheduler, num_samples=16,
                         space={"lr": SPACE["lr"], "x": SPACE["x"]})
    result = cli("search", "--space", str(space), "--name", label)
    assert result.status == 0, result.err
    trials = sorted(trials_of(_isolated_home, label), key=lambda t: t.trial_id)
    assert len(trials) == 16
    peaks = [peak({**t.config}) for t in trials]
    # The summary's best is the trial with the best config (noise 0, so return order = peak order).
    best_line = next(line for line in result.out.splitlines() if line.startswith("best"))
    best = max(trials, key=lambda t: t.last_result["episode_return_mean"])
    assert best.trial_id in best_line
    # Every searcher gets near the optimum (500 at it, 389 half a unit away) ...
    assert max(peaks) > 400, sorted(peaks)
    # ... under its scheduler: FIFO runs every trial to the budget; BOHB's HyperBand stops some at rungs counted
    # in env steps and may leave one paused in a bracket that never filled.
    steps = ended_steps(result, trials, paused_ok=scheduler == "bohb")
    if scheduler == "bohb":
        assert min(steps) < 6000 <= max(steps), steps
    elif label != "smac":
        assert all(s == 6000 for s in steps), steps
    if label == "smac":  # SMAC's Hyperband gave the trials budgets of their own, up to the space's 6000 env steps
        budgets = sorted({t.config["tune_rl_budget"] for t in trials})
        assert len(budgets) >= 2 and budgets[-1] == 6000, budgets
        assert all(t.last_result["env_steps"] == -(-t.config["tune_rl_budget"] // 1000) * 1000 for t in trials)
        assert "16 done" in result.out  # ended at their own budgets: done, not stopped early
        exported = yaml.safe_load((_isolated_home / "results" / label / "best.yaml").read_text())
        assert "tune_rl_budget" not in exported["config"], exported["config"]
    if label == "random":
        return
    # ... and a model-based one, once past its 4 random startup points, suggests good configs
    # more than once: a searcher told to minimize heads for the corners, where the peak is under 100.
    assert sum(p > 300 for p in peaks[4:]) >= 2, peaks


# FIFO and BOHB run under the searchers above (random + FIFO, BOHB + its HyperBand), ASHA in tests/test_e2e.py's
# tiny search, which replays its stopping rule: a search each the less.
SCHEDULERS = ["hyperband", "median", "pbt", "pb2"]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_each_scheduler_runs_on_the_oracle_counting_env_steps(scheduler, ray_session, cli, _isolated_home,
                                                              tmp_path):
    space = {"lr": SPACE["lr"], "x": SPACE["x"]} if scheduler == "pb2" else SPACE
    settings = {"name": scheduler}
    if scheduler in ("pbt", "pb2"):  # PB2 fits a Gaussian process per exploit: two rounds, not four
        settings.update(perturbation_interval=2000 if scheduler == "pbt" else 4000, quantile_fraction=0.5)
    searcher = {"name": "random", "seed": 3}
    path = oracle_space(tmp_path / "o.yaml", searcher=searcher, scheduler=settings,
                        num_samples=8 if scheduler not in ("pbt", "pb2") else 4, noise=2.0, budget=10000,
                        space=space)
    result = cli("search", "--space", str(path), "--name", scheduler)
    assert result.status == 0, result.err
    trials = trials_of(_isolated_home, scheduler)
    steps = ended_steps(result, trials, paused_ok=scheduler == "hyperband")
    if scheduler in ("pbt", "pb2"):
        assert all(s == 10000 for s in steps), steps
    else:  # early stopping, at rungs counted in env steps
        assert min(steps) < 10000 <= max(steps), steps
    if scheduler in ("pbt", "pb2"):
        line = next(line for line in result.out.splitlines() if line.startswith("pbt"))
        exploits = int(line.split()[1])
        assert exploits >= 1 and "every applied value matched" in line, line
        bounds = {"lr": (1.0e-5, 1.0e-1), "x": (0.0, 1.0)}
        for trial in trials:  # what the trainable used is what the trial's final config says, inside the space
            for key, (low, high) in bounds.items():
                assert math.isclose(trial.last_result[f"applied/{key}"], trial.config[key], rel_tol=1e-9)
                assert low <= trial.config[key] <= high


def test_pbt_audit_fails_a_trial_that_restores_stale_hyperparameters(ray_session, cli, _isolated_home, tmp_path):
    path = oracle_space(tmp_path / "o.yaml", searcher={"name": "random", "seed": 3},
                        scheduler={"name": "pbt", "perturbation_interval": 2000, "quantile_fraction": 0.5,
                                   "resample_probability": 1.0},
                        num_samples=4, noise=0.0, budget=10000, trainable="oracle/stale-restore",
                        space={"x": SPACE["x"]})
    result = cli("search", "--space", str(path), "--name", "stale", "--max-failures", "0")  # no retries: no new actors
    trials = trials_of(_isolated_home, "stale")
    errored = [t for t in trials if t.status == "ERROR"]
    assert errored, [t.status for t in trials]
    assert "PBT audit failed: x: config says" in result.out
    assert "errored" in result.out


def test_warm_start_from_a_previous_experiment_tries_its_best_configs_first(ray_session, cli, _isolated_home,
                                                                           tmp_path):
    first = oracle_space(tmp_path / "a.yaml", searcher={"name": "random", "seed": 5}, scheduler="fifo",
                         num_samples=6, budget=2000)
    assert cli("search", "--space", str(first), "--name", "first").status == 0
    ranked = sorted(trials_of(_isolated_home, "first"), key=lambda t: -t.last_result["episode_return_mean"])
    second = oracle_space(tmp_path / "b.yaml", scheduler="fifo", num_samples=3, budget=2000, searcher={
        "name": "optuna", "seed": 5, "warm_start": "first", "warm_start_top": 2,
        "points_to_evaluate": [{"lr": 1.0e-3, "x": 0.7, "activation": "tanh"}]})
    assert cli("search", "--space", str(second), "--name", "second").status == 0
    trials = sorted(trials_of(_isolated_home, "second"), key=lambda t: t.trial_id)
    keys = ("lr", "x", "activation")
    tried = [{k: t.config[k] for k in keys} for t in trials]
    expected = [{k: t.config[k] for k in keys} for t in ranked[:2]] + [OPTIMUM]
    # the first three trials are exactly these points (Tune may start them in another order)
    assert sorted(tried, key=lambda c: c["x"]) == sorted(expected, key=lambda c: c["x"]), (tried, expected)


def pbt_space(path: Path, *, trainable: str, fixed: dict, budget: int, interval: int, num_samples: int) -> Path:
    raw = {"trainable": trainable, "env": "CartPole-v1", "budget": {"env_steps": budget},
           "searcher": {"name": "random", "seed": 2},
           "scheduler": {"name": "pbt", "perturbation_interval": interval, "quantile_fraction": 0.5,
                         "resample_probability": 0.5},
           "num_samples": num_samples, "fixed": fixed, "reevaluate": False,
           "space": {"lr": {"loguniform": [1.0e-4, 1.0e-2]}, "clip_param": {"uniform": [0.1, 0.3]}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def assert_exploited_and_audited(result, trials) -> None:
    assert result.status == 0, result.err
    line = next(line for line in result.out.splitlines() if line.startswith("pbt"))
    assert int(line.split()[1]) >= 1 and "every applied value matched" in line, line
    for trial in trials:
        for key in ("lr", "clip_param"):  # the values in use at the end are the trial's final config
            assert math.isclose(trial.last_result[f"applied/{key}"], trial.config[key], rel_tol=1e-6), key
            assert trial.last_result[f"requested/{key}"] == pytest.approx(trial.config[key])


def test_pbt_on_our_ppo_exploits_and_the_audit_passes(ray_session, cli, _isolated_home, tmp_path):
    fixed = {"num_envs_per_env_runner": 8, "train_batch_size": 512, "minibatch_size": 256, "num_epochs": 2,
             "fcnet_hiddens": [16, 16]}
    path = pbt_space(tmp_path / "p.yaml", trainable="ppo", fixed=fixed, budget=6144, interval=1024, num_samples=4)
    result = cli("search", "--space", str(path), "--name", "pbt-ppo")
    assert_exploited_and_audited(result, trials_of(_isolated_home, "pbt-ppo"))


def test_pbt_on_rllib_ppo_exploits_and_the_audit_passes(ray_session, cli, _isolated_home, tmp_path):
    # RLlib restores a checkpoint's optimizer lr with its weights; without our re-apply the audit fails.
    fixed = {"num_env_runners": 0, "num_envs_per_env_runner": 4, "train_batch_size_per_learner": 400,
             "minibatch_size": 200, "num_epochs": 2, "seed": 0}
    # Many perturbation points: under load the second trial can start late, and PBT needs both scored.
    path = pbt_space(tmp_path / "p.yaml", trainable="rllib/PPO", fixed=fixed, budget=4000, interval=800,
                     num_samples=2)
    result = cli("search", "--space", str(path), "--name", "pbt-rllib")
    assert_exploited_and_audited(result, trials_of(_isolated_home, "pbt-rllib"))


def test_a_trial_bigger_than_the_cluster_is_refused_before_launch(ray_session, cli, _isolated_home, tmp_path):
    # RLlib PPO's default: 2 env runners + its driver = 3 CPUs per trial on a 2-CPU Ray (Ray would wait forever)
    path = pbt_space(tmp_path / "p.yaml", trainable="rllib/PPO", fixed={"num_env_runners": 2}, budget=800,
                     interval=400, num_samples=1)
    result = cli("search", "--space", str(path), "--name", "too-big")
    assert result.status == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "one trial of rllib/PPO asks for 3 CPU (3 bundle(s)), the Ray cluster has 2 CPU" in result.err
    assert not (_isolated_home / "results" / "too-big").exists()


def test_gpus_asked_on_a_cluster_without_gpus_are_refused_before_launch(ray_session, cli, _isolated_home, tmp_path):
    path = pbt_space(tmp_path / "g.yaml", trainable="rllib/PPO", budget=800, interval=400, num_samples=1,
                     fixed={"num_env_runners": 0, "num_gpus_per_learner": 1})
    result = cli("search", "--space", str(path), "--name", "gpu")
    assert result.status == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "1 GPU" in result.err and "the Ray cluster has" in result.err and "0 GPU" in result.err
    assert not (_isolated_home / "results" / "gpu").exists()
