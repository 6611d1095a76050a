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


def test_an_oracle_population_search_refills_and_exports_its_best_member(ray_session, cli, _isolated_home, tmp_path):
    space = tmp_path / "pop.yaml"
    space.write_text(yaml.safe_dump({
        "trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 8000},
        "searcher": {"name": "random", "seed": 2}, "scheduler": {"name": "asha", "grace_period": 2000},
        "num_samples": 12, reserved.MEMBERS_KEY: 4, "max_concurrent": 1,
        "fixed": {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "steps_per_iteration": 1000},
        "space": {"lr": {"loguniform": [1e-5, 1e-1]}, "x": {"uniform": [0.0, 1.0]}}}))
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
    space.write_text(yaml.safe_dump({
        "trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 12000},
        "searcher": {"name": "random", "seed": 4}, "scheduler": {"name": "asha", "grace_period": 3000},
        "num_samples": 9, reserved.MEMBERS_KEY: 3, "max_concurrent": 1, "reevaluate": False,
        "fixed": {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "steps_per_iteration": 1000,
                  "sleep_s": 0.3},
        "space": {"lr": {"loguniform": [1e-5, 1e-1]}, "x": {"uniform": [0.0, 1.0]}}}))
    proc = start_driver(_isolated_home, "search", "--space", str(space), "--name", "popcc", "--num-cpus", "2")
    wait_for(proc, "50%")
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
