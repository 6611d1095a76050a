"""End to end on a real local Ray (one session for all), real gymnasium CartPole, a real SQLite MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.e2e

def tiny_ppo_small(path: Path) -> Path:
    """The shipped ppo_small with a tiny budget, and lr on a grid: two learning trials first,
    then two that cannot learn (lr 0), so ASHA has a non-learner to stop."""
    from tune_runner.spec.experiment import shipped_spaces

    raw = yaml.safe_load(shipped_spaces()["ppo_small"].read_text())
    raw["trainable"] = "rllib/PPO"  # this test is about the RLlib path
    raw.pop("backends")  # the test sets every value itself
    raw["stop_at"] = None
    raw["budget"] = {"env_steps": 3000}
    raw["searcher"] = "random"
    raw["num_samples"] = 1  # the grid alone gives the four trials
    raw["scheduler"] = {"name": "asha", "grace_period": 500, "reduction_factor": 2}
    raw["fixed"].update(num_envs_per_env_runner=4, train_batch_size_per_learner=500, minibatch_size=128,
                        num_epochs=4, seed=0, metrics_num_episodes_for_smoothing=10)
    raw["space"] = {"lr": {"grid": [0.003, 0.002, 0.0, 0.0]}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def mlflow_runs(home: Path, experiment: str) -> tuple[object, list, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


RUNGS = (500, 1000, 2000)  # ASHA's rungs for grace_period 500, reduction_factor 2, below the 3000 budget


def asha_replay(client, children: list) -> dict[str, tuple[int, float, list[float]]]:
    """The trials ASHA should have stopped: every result, in the order the driver handled them (the
    MLflow callback logs each one right after the scheduler decided on it), replayed through ASHA's
    rule. A trial's first result at or past a rung is compared with the results recorded there
    before it, and stopped below their median. Returns run id -> (rung, its value, those before)."""
    events = []
    for child in children:
        for m in client.get_metric_history(child.info.run_id, "episode_return_mean"):
            events.append((m.timestamp, child.info.run_id, m.step, m.value))
    events.sort()
    assert len({e[0] for e in events}) == len(events), "two results logged in one millisecond: order unknown"
    recorded: dict[int, dict[str, float]] = {rung: {} for rung in RUNGS}
    stopped = {}
    for _, run, step, value in events:
        assert run not in stopped, f"{run} reported at {step} env steps after ASHA stopped it"
        if step >= 3000:
            continue  # the budget ends it
        rung = next((r for r in sorted(RUNGS, reverse=True) if step >= r and run not in recorded[r]), None)
        if rung is None:
            continue
        before = list(recorded[rung].values())
        if before and value < np.nanpercentile(before, 50):
            stopped[run] = (rung, value, before)
        recorded[rung][run] = value
    return stopped


def test_tiny_search_asha_mlflow_best_export_and_train(ray_session, cli, _isolated_home, tmp_path):
    from ray.tune import ExperimentAnalysis

    space = tiny_ppo_small(tmp_path / "tiny.yaml")
    result = cli("search", "--space", str(space), "--name", "tiny", "--no-reevaluate")
    assert result.status == 0, result.err
    exp_path = _isolated_home / "results" / "tiny"

    # Every trial ended; ASHA stopped at least one before the budget.
    analysis = ExperimentAnalysis(str(exp_path))
    assert len(analysis.trials) == 4 and {t.status for t in analysis.trials} == {"TERMINATED"}
    steps = sorted(t.last_result["env_steps"] for t in analysis.trials)
    assert steps[0] < 3000 <= steps[-1], steps

    # The live view is compact: no RLlib config dump, one line per event.
    assert "train_batch_size_per_learner" not in result.out.split("trials ")[0]
    assert result.out.count("started") == 4 and "(early, by the scheduler)" in result.out
    assert len(result.out) < 5000

    # MLflow: one parent, four children with metric curves stepped by env steps.
    client, parents, children = mlflow_runs(_isolated_home, "tiny")
    assert len(parents) == 1 and len(children) == 4
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.params["scheduler"] == "asha"
    assert parent.data.params["budget_env_steps"] == "3000"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {c.data.tags["tune_rl.status"] for c in children} == {"terminated", "stopped_early"}
    # ASHA stopped exactly the trials its rule stops, each at a rung and below the median of the
    # results recorded there before it: replayed from every result, in the order ASHA saw them.
    expected = asha_replay(client, children)
    early = {c.info.run_id: c for c in children if c.data.tags["tune_rl.status"] == "stopped_early"}
    assert set(early) == set(expected), (sorted(early), expected)
    for run_id, (rung, value, before) in expected.items():
        last = max(client.get_metric_history(run_id, "episode_return_mean"), key=lambda m: m.step)
        assert rung <= last.step < 3000 and last.value == value < np.median(before), (rung, last, before)
    for child in children:
        assert "lr" in child.data.params and "num_epochs" in child.data.params
        assert len(child.data.params) < 20  # what matters, not RLlib's hundreds of defaults
        history = client.get_metric_history(child.info.run_id, "episode_return_mean")
        assert len(history) >= 1 and all(m.step >= 500 for m in history)
        assert [m.step for m in history] == sorted(m.step for m in history)
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id)]
    assert "best.yaml" in artifacts

    # best: the same trial ExperimentAnalysis picks; --export then train --config re-runs it.
    chosen = analysis.get_best_trial("episode_return_mean", "max", "last")
    as_json = cli("best", "tiny", "--json")
    assert as_json.status == 0 and json.loads(as_json.out)["lr"] == chosen.config["lr"]
    exported = tmp_path / "best.yaml"
    shown = cli("best", str(exp_path), "--scope", "avg-last-3", "--export", str(exported))
    assert shown.status == 0 and exported.is_file() and "best " in shown.out
    bundle = yaml.safe_load(exported.read_text())
    assert bundle["config"]["lr"] > 0 and bundle["trainable"] == "rllib/PPO"

    again = cli("train", "--config", str(exported), "--name", "tiny-train")
    assert again.status == 0, again.err
    retrain = ExperimentAnalysis(str(_isolated_home / "results" / "tiny-train"))
    (trial,) = retrain.trials
    assert trial.status == "TERMINATED" and trial.last_result["env_steps"] >= 3000
    assert {k: v for k, v in trial.config.items() if k not in ("env", "env_config")} == bundle["config"]
    assert {"episode_return_mean", "env_steps", "policy_loss", "entropy"} <= set(trial.last_result)


def test_optuna_on_rllib_dqn(ray_session, cli, _isolated_home):
    result = cli("search", "--space", "dqn_small", "--set", "trainable=rllib/DQN", "--name", "dqn-optuna",
                 "--no-reevaluate",
                 "--searcher", "optuna",
                 "--scheduler", "fifo", "--num-samples", "1", "--set", "budget=500",
                 # RLlib's DQN samples 1000 env steps an iteration by default, at ~40 env steps/s once it learns
                 "--set", "min_sample_timesteps_per_iteration=250",
                 "--set", "num_steps_sampled_before_learning_starts=200")
    assert result.status == 0, result.err
    from ray.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis(str(_isolated_home / "results" / "dqn-optuna"))
    # One trial: that Optuna suggests distinct points is tests/test_search_matrix_e2e.py's (optuna-tpe, -cmaes).
    (trial,) = analysis.trials
    assert trial.status == "TERMINATED" and "qf_loss" in trial.last_result
    assert 3.0e-4 <= trial.config["lr"] <= 1.0e-3  # Optuna's pick from the rllib/DQN backend's own lr range


def _progress(home: Path, name: str) -> list[dict]:
    from ray.tune import ExperimentAnalysis

    (frame,) = ExperimentAnalysis(str(home / "results" / name)).trial_dataframes.values()
    return frame.to_dict("records")


def test_own_ppo_in_process_and_with_rollout_actors_learn_with_the_same_metrics(ray_session, cli, _isolated_home):
    keys = {}
    for name, runners in (("own-ppo", 0), ("own-ppo-actors", 1)):
        result = cli("search", "--space", "ppo_small", "--set", "trainable=ppo", "--name", name, "--no-reevaluate",
                     "--num-samples", "1", "--scheduler", "fifo", "--set", "budget=16000", "--set", "lr=0.002",
                     "--set", "num_epochs=6", "--set", "minibatch_size=256", "--set", "gamma=0.99",
                     "--set", "lambda_=0.95", "--set", f"num_env_runners={runners}")
        assert result.status == 0, result.err
        rows = _progress(_isolated_home, name)
        keys[name] = {k for k in rows[-1] if not k.startswith(("config/", "time", "date", "hostname", "node_ip",
                                                                  "pid", "timestamp", "trial_id"))}
        # Learns: from the random policy's ~22 to well above it within 16k env steps.
        assert rows[0]["episode_return_mean"] < 60 < rows[-1]["episode_return_mean"], name
    assert keys["own-ppo"] == keys["own-ppo-actors"]


def test_own_dqn_with_a_replay_buffer_actor(ray_session, cli, _isolated_home):
    result = cli("search", "--space", "dqn_small", "--set", "trainable=dqn", "--name", "own-dqn-actors",
                 "--no-reevaluate",
                 "--num-samples", "1", "--scheduler", "fifo", "--set", "budget=3000",
                 "--set", "num_env_runners=1", "--configs-per-trial", "1")  # rollout workers act for one config
    assert result.status == 0, result.err
    last = _progress(_isolated_home, "own-dqn-actors")[-1]
    assert last["env_steps"] >= 3000 and np.isfinite(last["qf_loss"]) and last["epsilon"] < 1.0


# ---- best: the Ray-free reader against Ray Tune's ExperimentAnalysis ---------------------------------------


def _oracle_best(ea, *, metric: str, mode: str, scope: str):
    """(trial, value) by Ray Tune alone: get_best_trial where it has the scope, else pandas over the progress
    frames; the value from the frame (last finite value, best of all, mean of the last N finite)."""
    import pandas as pd

    def finite(trial):
        frame = ea.trial_dataframes[trial.trial_id]
        column = pd.to_numeric(frame[metric], errors="coerce") if metric in frame else pd.Series(dtype=float)
        return column[np.isfinite(column)]

    window = None if scope in ("last", "max") else int(scope.removeprefix("avg-last-"))
    if window in (None, 5, 10):
        chosen = ea.get_best_trial(metric, mode, {"last": "last", "max": "all"}.get(scope, f"last-{window}-avg"))
    else:
        means = {t.trial_id: finite(t).tail(window).mean() for t in ea.trials if len(finite(t))}
        pick = max if mode == "max" else min
        chosen = next(t for t in ea.trials if t.trial_id == pick(means, key=means.get))
    values = finite(chosen)
    if scope == "last":
        return chosen, float(values.iloc[-1])
    if scope == "max":
        return chosen, float(values.max() if mode == "max" else values.min())
    return chosen, float(values.tail(window).mean())


def test_best_reads_tune_files_as_experiment_analysis_does(ray_session, cli, _isolated_home, tmp_path):
    """`best` reads Tune's files itself (no Ray); ExperimentAnalysis is the oracle: the same trial, value,
    config, folder and last result under every scope, for both modes and another metric, with and without
    stop_at; the same statuses. Noisy returns and ASHA's cut trials make the scopes disagree."""
    from ray.tune import ExperimentAnalysis

    from tune_runner.results import analysis
    from tune_runner.spec.experiment import load_spec, shipped_spaces

    raw = yaml.safe_load(shipped_spaces()["oracle"].read_text())
    raw.update(num_samples=8, budget={"env_steps": 14000}, stop_at=540,  # a rare noisy high solves
               scheduler={"name": "asha", "grace_period": 4000, "reduction_factor": 2})
    raw["fixed"].update(noise=25.0, rate=0.9)  # every config at its peak at once, near the optimum: noise decides
    raw["space"] = {"lr": {"loguniform": [8.0e-4, 1.2e-3]}, "x": {"uniform": [0.65, 0.75]}}
    space = tmp_path / "noisy.yaml"
    space.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = cli("search", "--space", str(space), "--name", "noisy", "--no-reevaluate")
    assert result.status == 0, result.err
    exp_path = _isolated_home / "results" / "noisy"
    ea, ours = ExperimentAnalysis(str(exp_path)), analysis.read(exp_path)
    assert type(ours).__module__ == "tune_runner.results.trials"  # not a fallback to Ray
    lengths = {len(ea.trial_dataframes[t.trial_id]) for t in ea.trials}
    assert min(lengths) < 10 <= max(lengths), lengths  # some trials cut before the avg-last-10 window fills

    picks, by_scope = set(), {}
    for metric, mode in (("episode_return_mean", "max"), ("episode_return_mean", "min"), ("peak", "min")):
        for scope in ("last", "max", "avg-last-3", "avg-last-5", "avg-last-10", "avg-last-12"):
            best = analysis.best_trial(ours, metric=metric, mode=mode, scope=scope)
            chosen, value = _oracle_best(ea, metric=metric, mode=mode, scope=scope)
            where = f"{metric} {mode} {scope}"
            assert best.trial_id == chosen.trial_id, where
            assert best.value == pytest.approx(value, rel=1e-12), where
            assert best.config == chosen.config and best.trial_path == str(chosen.path), where
            assert best.last_result == chosen.last_result, where
            picks.add(best.trial_id)
            by_scope[metric, mode, scope] = chosen.trial_id
    assert len(picks) >= 3  # the scopes and modes do pick different trials here, and so do Ray's own scopes:
    assert any(len({by_scope[metric, mode, s] for s in ("last", "max", "avg-last-5", "avg-last-10")}) >= 2
               for metric, mode, _ in by_scope)

    spec = load_spec(str(space))
    by_ray = analysis.best_trial(ea, metric=spec.metric, mode=spec.mode, scope="last", reached=spec.reached)
    fast = analysis.best_trial(ours, metric=spec.metric, mode=spec.mode, scope="last", reached=spec.reached)
    assert fast == by_ray
    assert analysis.statuses(ours, ending=spec.ending) == analysis.statuses(ea, ending=spec.ending)
    shown = cli("best", "noisy", "--scope", "avg-last-3", "--json")
    assert shown.status == 0 and json.loads(shown.out)["lr"] == _oracle_best(
        ea, metric=spec.metric, mode=spec.mode, scope="avg-last-3")[0].config["lr"]
