"""Population searches on a real local Ray (issue 43): the searcher fills each trial with configs, the board
refills ended members' slots until num_samples configs have started, and best, the export, the re-evaluation and
the report read members as configs. The oracle trains in seconds; our PPO on Acrobot (not an env we tuned for)
shows members of a real learner."""

from __future__ import annotations

import json

import pytest
import yaml

from tune_runner.spec import reserved

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("ray")]


def member_ids(trial_dir) -> set[str]:
    ids = set()
    for line in (trial_dir / "result.json").read_text().splitlines():
        ids.update(v for k, v in json.loads(line).items() if k.endswith("/id"))
    return ids


def oracle_space(path, *, budget: int, seed: int, grace: int, samples: int, size: int, **top):
    """An oracle population search over lr and x, written to `path`."""
    fixed = {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "steps_per_iteration": 1000,
             **top.pop("fixed", {})}
    path.write_text(yaml.safe_dump({
        "trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": budget},
        "searcher": {"name": "random", "seed": seed}, "scheduler": {"name": "asha", "grace_period": grace},
        "num_samples": samples, reserved.MEMBERS_KEY: size, "fixed": fixed,
        "space": {"lr": {"loguniform": [1e-5, 1e-1]}, "x": {"uniform": [0.0, 1.0]}}, **top}))
    return path


def test_an_oracle_population_search_refills_and_exports_its_best_member(ray_session, cli, _isolated_home, tmp_path):
    space = tmp_path / "pop.yaml"
    oracle_space(space, budget=8000, seed=2, grace=2000, samples=12, size=4, max_concurrent=1)
    result = cli("search", "--space", str(space), "--name", "pop", "--reevaluate", "2", "--seeds", "2")
    assert result.status == 0, result.err
    exp = _isolated_home / "results" / "pop"
    trials = [p for p in exp.iterdir() if p.is_dir() and (p / "result.json").is_file()]
    # one trial at a time: the first trial's slots were refilled until all 12 configs had started
    search_trials = [t for t in trials if "reevaluation" not in str(t)]
    assert len(search_trials) == 1, [t.name for t in trials]
    assert len(member_ids(search_trials[0])) == 12
    assert "trials     12:" in result.out and "stopped early" in result.out
    best = cli("best", str(exp))
    assert best.status == 0 and "-" in best.out.split()[1]  # a member id, <trial>-<n>
    bundle = yaml.safe_load((exp / "best.yaml").read_text())
    assert {"lr", "x", "seed"} <= set(bundle["config"])  # the member's own values and seed
    assert not any(k.startswith("tune_rl_") or k == reserved.MEMBERS_KEY for k in bundle["config"])
    again = cli("train", "--config", str(exp / "best.yaml"))
    assert again.status == 0, again.err
    verified = cli("verify", str(exp / "best.yaml"))
    # the member's config re-trained on seeds the bundle has not seen, judged against its claim (holds or not)
    assert verified.status in (0, 1) and "verify     " in verified.out, verified.out + verified.err
    report = cli("report", str(exp))
    assert report.status == 0, report.err
    table = (exp / "report" / "trials.csv").read_text().splitlines()
    assert len(table) == 1 + 12  # a row per member, not per trial
    scores = json.loads((exp / "report" / "importances.json").read_text())["importances"]
    assert set(scores) == {"lr", "x"}  # fANOVA over the 12 members' values


def test_a_population_search_stopped_with_ctrl_c_resumes_with_its_members_and_refills(ray_session, cli,
                                                                                      _isolated_home, tmp_path):
    """Ctrl-C while the board refills slots: `tune-rl resume` brings back the members (the trial's checkpoint) and
    the searcher's draws and judgements (its saved state), and starts exactly num_samples configs in all."""
    import signal

    from tests.test_resilience_e2e import start_driver, wait_for

    space = tmp_path / "slowpop.yaml"
    oracle_space(space, budget=12000, seed=4, grace=3000, samples=9, size=3, max_concurrent=1, reevaluate=False,
                 fixed={"sleep_s": 0.3})
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "popcc", "--num-cpus", "2")
    wait_for(proc, " refilled")  # a trial's row counts its refills
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    exp = _isolated_home / "results" / "popcc"
    before = {i for t in exp.iterdir() if (t / "result.json").is_file() for i in member_ids(t)}
    assert 3 < len(before) < 9, before  # interrupted after a refill, before the last config started

    result = cli("resume", "popcc")
    assert result.status == 0, result.out + result.err
    assert "resuming:" in result.out
    after = {i for t in exp.iterdir() if (t / "result.json").is_file() for i in member_ids(t)}
    assert before <= after and len(after) == 9, (before, after)  # every config once: none redrawn, none lost
    assert "trials     9:" in result.out and "errored" not in result.out, result.out
    best = cli("best", str(exp))
    assert best.status == 0 and best.out.split()[1] in after
    # MLflow: one run per config, every one ended, none left RUNNING by the interruption
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(space.stem).experiment_id], max_results=1000)
    members = [r for r in runs if "tune_rl.member_id" in r.data.tags]
    assert sorted(r.data.tags["tune_rl.member_id"] for r in members) == sorted(after)
    assert {r.info.status for r in runs} == {"FINISHED"}, sorted((r.info.run_name, r.info.status) for r in runs)


def test_mlflow_holds_a_run_per_member_under_its_trial_with_its_values_and_curve(ray_session, cli, _isolated_home,
                                                                                 tmp_path):
    """Each member a run of its own, nested under its trial's run, with the trial's params plus its own values and
    seed, its curve at its own env steps (as the trial's result.json carried it), and how it ended; `best` from
    MLflow picks the member the folder picks, and the live view counts members."""
    from mlflow.tracking import MlflowClient

    space = tmp_path / "pop-mlflow.yaml"
    oracle_space(space, budget=6000, seed=5, grace=2000, samples=8, size=3, max_concurrent=2)
    result = cli("search", "--space", str(space), "--name", "pop-mlflow", "--no-reevaluate")
    assert result.status == 0, result.err
    assert "8 configs, 3 per trial x 6,000 env steps" in result.out
    assert "members 0/3 alive, " in result.out and " refilled" in result.out  # a trial's end row counts them

    exp = _isolated_home / "results" / "pop-mlflow"
    rows: dict[str, list[dict]] = {}  # trial id -> its results, from its folder
    for trial_dir in (p for p in exp.iterdir() if (p / "result.json").is_file()):
        lines = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
        rows[lines[0]["trial_id"]] = lines
    client = MlflowClient(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(space.stem)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parent, = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    trial_runs = {r.data.tags["tune_rl.trial_id"]: r for r in runs
                  if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    members = {r.data.tags["tune_rl.member_id"]: r for r in runs if "tune_rl.member_id" in r.data.tags}
    assert set(trial_runs) == set(rows) and len(runs) == 1 + len(rows) + len(members)
    assert len(members) == 8

    for trial_id, results in rows.items():
        trial_run = trial_runs[trial_id]
        assert not any(k.startswith("member_") for k in trial_run.data.metrics)
        assert "x" in trial_run.data.params and "lr" not in trial_run.data.params  # x is shared, lr a member's
        seen: dict[str, list[tuple[int, float]]] = {}
        for row in results:
            for key, member in ((k, v) for k, v in row.items() if k.endswith("/id")):
                slot = key.removesuffix("/id")
                run = members[member]
                assert run.info.run_name == member and run.data.tags["tune_rl.trial_id"] == trial_id
                assert run.data.tags["mlflow.parentRunId"] == trial_run.info.run_id
                assert run.data.params["lr"] == str(row[f"{slot}/config/lr"])
                assert run.data.params["x"] == trial_run.data.params["x"] and "seed" in run.data.params
                if f"{slot}/episode_return_mean" in row:
                    seen.setdefault(member, []).append((row[f"{slot}/env_steps"], row[f"{slot}/episode_return_mean"]))
        for member, points in seen.items():
            logged = sorted((m.step, m.value) for m in
                            client.get_metric_history(members[member].info.run_id, "episode_return_mean"))
            assert logged == [(step, pytest.approx(value)) for step, value in points], member
    assert {r.info.status for r in members.values()} == {"FINISHED"}
    assert "stopped_early" in {r.data.tags["tune_rl.status"] for r in members.values()}

    from_folder = cli("best", str(exp))
    from_mlflow = cli("best", f"runs:/{parent.info.run_id}")
    assert from_folder.status == 0 and from_mlflow.status == 0, from_mlflow.err
    picked = [next(line for line in shown.out.splitlines() if line.startswith("best ")).split()[1]
              for shown in (from_folder, from_mlflow)]
    assert picked[0] == picked[1] and picked[0] in members


def test_a_population_searchs_re_evaluation_trains_its_top_members_as_one_population_trial(ray_session, cli,
                                                                                            _isolated_home, tmp_path):
    """Our PPO on Acrobot (not an env we tuned for), 4 configs in one trial, one trial at a time: the top 2
    members share their trial-level values, so the re-evaluation trains them as the 2 members of one trial of
    2 x 2 fresh seeds. Each is ranked on its own seeds; the export's policy, the MLflow model and the export
    re-run are the winner's member's, not the best seed of the whole batch."""
    from pathlib import Path

    import numpy as np

    import tune_runner as tr
    from tune_runner.trainables import checkpoints

    space = tmp_path / "ppo-pop.yaml"
    space.write_text(yaml.safe_dump({
        "trainable": "ppo", "env": "Acrobot-v1", "budget": {"env_steps": 6144}, "num_samples": 4,
        reserved.MEMBERS_KEY: 4, "max_concurrent": 1, "searcher": {"name": "random", "seed": 3},
        "reevaluate": {"top": 2, "seeds": 2},
        "fixed": {"num_env_runners": 0, "num_envs_per_env_runner": 8, "train_batch_size_per_learner": 1024,
                  "minibatch_size": 256, "num_epochs": 2, "metrics_num_episodes_for_smoothing": 5,
                  "fcnet_hiddens": [16, 16]},
        "space": {"lr": {"loguniform": [1e-4, 3e-2]}, "gamma": {"uniform": [0.9, 0.99]}}}))
    result = cli("search", "--space", str(space), "--name", "ppo-pop")
    assert result.status == 0, result.out + result.err
    assert "as 1 population trial(s) of 2 configs" in result.out, result.out
    exp = _isolated_home / "results" / "ppo-pop"
    verdict = json.loads((exp / "reevaluation.json").read_text())
    ranking = verdict["ranking"]
    assert len(ranking) == 2 and all(len(row["seeds"]) == 2 for row in ranking)
    assert len({s for row in ranking for s in row["seeds"]}) == 4  # each member on seeds of its own
    paths = {p for row in ranking for p in row["trial_paths"]}
    assert len(paths) == 1, paths  # one trial trained both
    trial_dir = Path(paths.pop())
    trial = json.loads((trial_dir / "params.json").read_text())
    listed = trial[reserved.MEMBER_LIST_KEY]["members"]
    assert sorted(m["id"] for m in listed) == sorted(row["trial_id"] for row in ranking)
    assert {tuple(sorted(m["values"])) for m in listed} == {("gamma", "lr")}
    assert "lr" not in trial and "gamma" not in trial and trial[reserved.MEMBERS_KEY] == 2  # the members hold them

    bundle = yaml.safe_load((exp / "best.yaml").read_text())
    winner = bundle["source"]["trial_id"]
    assert winner == ranking[0]["trial_id"] and Path(bundle["checkpoint"]).parent == trial_dir
    saved = checkpoints.read(Path(bundle["checkpoint"]))
    slot = [owner for owner, _ in saved["members"]["slots"]].index(winner)
    own = checkpoints.member_policy(saved, winner)
    assert any(own is seed for seed in saved["learner"]["seeds"][2 * slot:2 * slot + 2])
    policy = tr.load_policy(exp / "best.yaml")
    observations = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    import mlflow.pyfunc

    mlflow.set_tracking_uri(f"sqlite:///{_isolated_home / 'mlflow.db'}")
    model_uri = next(line.split()[1] for line in result.out.splitlines() if line.strip().startswith("model"))
    logged = mlflow.pyfunc.load_model(model_uri)
    assert np.array_equal(np.asarray(logged.predict(observations)).reshape(-1),
                          np.asarray(policy.compute_actions(observations)).reshape(-1))
    again = cli("train", "--config", str(exp / "best.yaml"))
    assert again.status == 0, again.err
