"""Re-evaluation, the standalone bundle, `verify`: on a real local Ray with the oracle (known noise) and our PPO."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tune_runner.results.robust import iqm
from tune_runner.trainables.oracle import peak, seed_offset

HERE_ARTIFACTS = Path(__file__).parent / "artifacts"

pytestmark = pytest.mark.e2e

OPTIMUM = {"lr": 1.0e-3, "x": 0.7}
TRUE_BEST, DECOY = 0.7, 0.23  # peaks 500 and about 401


def _config(x: float, seed: int, seed_noise: float) -> dict:
    return {"lr": 1.0e-3, "x": x, "seed": seed, "seed_noise": seed_noise, "optimum": OPTIMUM, "log_scale": ["lr"]}


def lucky_seed(seed_noise: float) -> int:
    """A seed on which the decoy's luck beats the optimum's by a wide margin (offsets are deterministic)."""
    for seed in range(2000):
        single = {x: peak(_config(x, seed, seed_noise)) + seed_offset(_config(x, seed, seed_noise))
                  for x in (TRUE_BEST, DECOY)}
        if single[DECOY] > single[TRUE_BEST] + 30:
            return seed
    raise AssertionError("no lucky seed")


def _final(config: dict, *, budget: int) -> float:
    """The oracle's last return after `budget` env steps, from its published rule (rate 0.5, 1,000 steps each)."""
    level = 0.0
    for _ in range(budget // 1000):
        level += 0.5 * (peak(config) - level)
    return level + seed_offset(config)


def oracle_file(path: Path, *, seed: int, seed_noise: float, reevaluate) -> Path:
    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 10000}, "searcher": "random",
           "scheduler": "fifo", "num_samples": 1, "reevaluate": reevaluate,
           "fixed": {"optimum": OPTIMUM, "log_scale": ["lr"], "lr": 1.0e-3, "seed": seed, "seed_noise": seed_noise,
                     "rate": 0.5},
           "space": {"x": {"grid": [TRUE_BEST, DECOY]}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_reevaluation_picks_the_true_optimum_over_a_lucky_decoy(ray_session, cli, _isolated_home, tmp_path):
    from ray.tune import ExperimentAnalysis

    seed = lucky_seed(40.0)
    path = oracle_file(tmp_path / "o.yaml", seed=seed, seed_noise=40.0, reevaluate={"top": 2, "seeds": 8})
    result = cli("search", "--space", str(path), "--name", "decoy")
    assert result.status == 0, result.err
    exp = _isolated_home / "results" / "decoy"
    trials = ExperimentAnalysis(str(exp)).trials
    single_pick = max(trials, key=lambda t: t.last_result["episode_return_mean"])
    assert single_pick.config["x"] == DECOY  # one seed: the decoy looks best
    bundle = yaml.safe_load((exp / "best.yaml").read_text())
    assert bundle["config"]["x"] == TRUE_BEST  # eight fresh seeds: the optimum wins
    evaluation = bundle["evaluation"]
    assert evaluation["ci"][0] <= evaluation["iqm"] <= evaluation["ci"][1] and len(evaluation["returns"]) == 8
    assert bundle["seeds"] == {"search": seed, "reevaluation": list(range(1000, 1008))}
    assert [r["trial_id"] for r in evaluation["ranking"]][0] != single_pick.trial_id
    # The oracle is deterministic: on seeds 1000-1007 the optimum's IQM is 505.1 [480.3, 534.1] and the decoy's
    # 413.8 [381.1, 439.5], computed from its known peak and seed offsets. The intervals are apart: a clear winner.
    expected = {x: [_final(_config(x, s, 40.0), budget=10000) for s in range(1000, 1008)] for x in (TRUE_BEST, DECOY)}
    assert evaluation["returns"] == pytest.approx(expected[TRUE_BEST])
    assert [r["iqm"] for r in evaluation["ranking"]] == pytest.approx([iqm(expected[TRUE_BEST]), iqm(expected[DECOY])])
    assert evaluation["iqm"] == pytest.approx(505.1, abs=0.05) and evaluation["clear_winner"] is True
    assert "clear winner: its confidence interval does not overlap the runner-up's" in result.out
    assert "no clear winner" not in result.out


SOON, SLOW = 0.7, 0.3  # peaks 500 and about 426: both reach stop_at 400, the optimum in about half the steps
STOP_AT, STEPS_BUDGET = 400.0, 30000


def reached_at(x: float, seed: int) -> int | None:
    """Env steps at which the oracle (rate 0.15, seed_noise 20) first reports >= STOP_AT; None within the budget."""
    config = {**_config(x, seed, 20.0), "rate": 0.15}
    level = 0.0
    for steps in range(1000, STEPS_BUDGET + 1, 1000):
        level += 0.15 * (peak(config) - level)
        if level + seed_offset(config) >= STOP_AT:
            return steps
    return None


def test_with_stop_at_the_config_that_solves_reliably_and_soonest_wins_and_verify_checks_it(
        ray_session, cli, _isolated_home, tmp_path):
    from tune_runner.results.robust import CONFIDENCE, bootstrap_ci, fmt_steps

    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": STEPS_BUDGET}, "stop_at": STOP_AT,
           "searcher": "random", "scheduler": "fifo", "num_samples": 1, "reevaluate": {"top": 2, "seeds": 6},
           "fixed": {"optimum": OPTIMUM, "log_scale": ["lr"], "lr": 1.0e-3, "seed": 0, "seed_noise": 20.0,
                     "rate": 0.15},
           "space": {"x": {"grid": [SLOW, SOON]}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = cli("search", "--space", str(path), "--name", "soonest")
    assert result.status == 0, result.err
    steps = {x: [reached_at(x, s) for s in range(1000, 1006)] for x in (SOON, SLOW)}
    assert steps[SLOW].count(None) == 1 and None not in steps[SOON]  # the slow config misses one seed

    def line(x: float) -> str:
        counted = [s if s is not None else STEPS_BUDGET for s in steps[x]]
        low, high = bootstrap_ci(counted)
        return (f"solved {6 - steps[x].count(None)}/6 seeds, IQM {fmt_steps(iqm(counted))} env steps to 400 "
                f"[{CONFIDENCE:.0%} CI {fmt_steps(low)}, {fmt_steps(high)}]")

    assert line(SOON) == "solved 6/6 seeds, IQM 10.5k env steps to 400 [95% CI 10k, 11.5k]"
    bundle_path = _isolated_home / "results" / "soonest" / "best.yaml"
    bundle = yaml.safe_load(bundle_path.read_text())
    evaluation = bundle["evaluation"]
    assert bundle["config"]["x"] == SOON and evaluation["summary"] == line(SOON)
    assert evaluation["steps"] == steps[SOON] and evaluation["solved"] == [True] * 6
    assert [(r["summary"], r["solved"]) for r in evaluation["ranking"]] == [(line(SOON), 6), (line(SLOW), 5)]
    assert evaluation["ranked_by"].startswith("the share of seeds that reached episode_return_mean >= 400")
    assert f"best       {bundle['source']['trial_id']}  {line(SOON)} on fresh seeds" in result.out
    assert f"robust     #1 {bundle['source']['trial_id']}  {line(SOON)}  over seeds 1000-1005" in result.out
    assert "clear winner: its CI of env steps to 400 lies below the runner-up's" in result.out

    # Seeds 1006-1012 solve at 9k, 9k, 13k, 11k, 9k, 11k, 11k: IQM 10.3k. The first three alone (IQM 9.67k, as
    # (a + 4b + c) / 6) fall below the 6 seeds' CI: too few seeds to judge by.
    held = cli("verify", str(bundle_path), "--seeds", "7")
    assert held.status == 0, held.out + held.err
    assert "verify     solved 7/7 seeds, IQM 10.3k env steps to 400" in held.out
    assert f"the bundle's: {line(SOON)}: as large a share solved and the IQM inside the CI" in held.out
    bundle["evaluation"]["steps_ci"] = [20000, 25000]
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text(yaml.safe_dump(bundle, sort_keys=False))
    failed = cli("verify", str(tampered), "--seeds", "3")
    assert failed.status == 1 and "the IQM is OUTSIDE the CI, the config does not reproduce" in failed.out


def test_bundle_stands_alone_and_train_config_feeds_the_same_resolved_config(ray_session, cli, _isolated_home,
                                                                           tmp_path):
    from ray.tune import ExperimentAnalysis

    from tune_runner.trainables.catalog import backend

    result = cli("search", "--space", "ppo_small", "--name", "one", "--no-reevaluate", "--num-samples", "1",
                 "--scheduler", "fifo", "--set", "budget=1024", "--set", "train_batch_size_per_learner=512",
                 "--set", "num_envs_per_env_runner=8", "--set", "minibatch_size=512")
    assert result.status == 0, result.err
    exported = tmp_path / "best.yaml"
    assert cli("best", "one", "--export", str(exported)).status == 0
    bundle = yaml.safe_load(exported.read_text())
    for key in ("resolved", "seeds", "evaluation", "versions", "source", "budget", "env_config"):
        assert key in bundle, key
    assert bundle["resolved"]["clip_param"] == 0.2 and bundle["resolved"]["lambda_"] == bundle["config"]["lambda_"]
    assert set(bundle["versions"]) >= {"tune-rl", "ray", "torch", "gymnasium", "git_commit"}
    assert len(bundle["source"]["space_sha256"]) == 64
    trained = cli("train", "--config", str(exported), "--name", "again")
    assert trained.status == 0, trained.err
    (trial,) = ExperimentAnalysis(str(_isolated_home / "results" / "again")).trials
    assert yaml.safe_load(yaml.safe_dump(backend("ppo").resolved_config(trial.config))) == bundle["resolved"]


def test_verify_exits_0_when_the_ci_holds_and_1_when_it_was_tampered(ray_session, cli, _isolated_home, tmp_path):
    path = oracle_file(tmp_path / "o.yaml", seed=0, seed_noise=0.0, reevaluate={"top": 2, "seeds": 2})
    assert cli("search", "--space", str(path), "--name", "holds").status == 0
    bundle = _isolated_home / "results" / "holds" / "best.yaml"
    held = cli("verify", str(bundle), "--seeds", "2")
    assert held.status == 0, held.out + held.err
    assert "inside, the config holds" in held.out
    raw = yaml.safe_load(bundle.read_text())
    raw["evaluation"]["ci"] = [0.0, 1.0]
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text(yaml.safe_dump(raw, sort_keys=False))
    failed = cli("verify", str(tampered), "--seeds", "2")
    assert failed.status == 1 and "OUTSIDE" in failed.out and "[0.0, 1.0]" in failed.out


def test_report_renders_every_plot_and_reads_in_a_real_browser(ray_session, cli, _isolated_home, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 4000},
           "searcher": {"name": "random", "seed": 4}, "scheduler": {"name": "asha", "grace_period": 1000},
           "num_samples": 6, "reevaluate": {"top": 2, "seeds": 2},
           "fixed": {"optimum": {"lr": 1.0e-3, "x": 0.7, "act": "tanh"}, "log_scale": ["lr"], "noise": 3.0},
           "space": {"lr": {"loguniform": [1.0e-5, 1.0e-1]}, "x": {"uniform": [0.0, 1.0]},
                     "act": {"choice": ["tanh", "relu"]}}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert cli("search", "--space", str(path), "--name", "rep").status == 0
    result = cli("report", "rep")
    assert result.status == 0, result.err
    folder = _isolated_home / "results" / "rep" / "report"
    for name in ("index.html", "learning_curves.png", "parallel_coordinates.png", "importances.png", "trials.csv",
                 "reevaluation.json"):
        assert (folder / name).stat().st_size > 100, name
    assert "logged to parent run" in result.out
    shots = HERE_ARTIFACTS / "report"
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nreport screenshot: {shots / 'report.png'}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((folder / "index.html").as_uri())  # a file: no server
        expect(page.get_by_role("heading", name="rep", exact=True)).to_be_visible()
        expect(page.get_by_text("Top configs, re-evaluated on fresh seeds")).to_be_visible()
        expect(page.locator("table").first).to_contain_text("IQM")
        for alt in ("Learning curves", "Hyperparameters", "Hyperparameter importances"):
            image = page.get_by_alt_text(alt)
            expect(image).to_be_visible()
            assert image.evaluate("img => img.naturalWidth") > 300, alt  # the PNG decoded
        # Each trial's ending as the report's CSV has it (ASHA stops some or none, as the results arrive).
        import csv

        with (folder / "trials.csv").open(newline="") as table:
            endings = {row["status"] for row in csv.DictReader(table)}
        assert endings and endings <= {"done", "solved", "stopped_early"}, endings
        for ending in endings:
            expect(page.locator("table").last).to_contain_text(ending)
        page.screenshot(path=shots / "report.png", full_page=True)
        browser.close()
    assert (shots / "report.png").stat().st_size > 20_000


FAILS_ON_FRESH_SEEDS = '''
import gymnasium as gym
import numpy as np

from tune_runner.plugins import register_env


@register_env("fails_on_fresh_seeds")
class FailsOnFreshSeeds(gym.Env):
    """A one-step env that works for the search's seeds and raises for the re-evaluation's (1000 and up)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None):
        pass

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed >= 1000:
            raise RuntimeError(f"no env for seed {seed}")
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), float(action), True, False, {}
'''


def test_a_reevaluation_whose_trials_all_fail_names_their_errors_and_keeps_the_searchs_best(
        ray_session, cli, _isolated_home, tmp_path):
    """Every re-evaluation trial failed (curriculum.yaml's did, on 2 seeds in one trial): each is named with its
    error, there is no verdict (a NaN interval read as a clear winner), and the search's best is exported."""
    (tmp_path / "fails.py").write_text(FAILS_ON_FRESH_SEEDS)
    raw = {"trainable": "ppo", "env": "fails_on_fresh_seeds", "budget": {"env_steps": 512}, "searcher": "random",
           "scheduler": "fifo", "num_samples": 4, "reevaluate": {"top": 2, "seeds": 2}, "plugins": ["fails.py"],
           "fixed": {"num_envs_per_env_runner": 2, "train_batch_size_per_learner": 256, "minibatch_size": 128,
                     "fcnet_hiddens": [8]},
           "space": {"lr": {"loguniform": [1.0e-4, 1.0e-2]}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    result = cli("search", "--space", str(tmp_path / "s.yaml"), "--name", "fails")
    assert result.status == 0, result.err + result.out[-2000:]
    errored = [line for line in result.out.splitlines() if " errored: " in line]
    assert len(errored) == 2 and all("RuntimeError: no env for seed 1000" in line for line in errored), result.out
    assert "no verdict: no re-evaluation seed finished" in result.out and "clear winner" not in result.out
    bundle = yaml.safe_load((_isolated_home / "results" / "fails" / "best.yaml").read_text())
    assert bundle["result"]["scope"] == "last" and bundle["result"]["episode_return_mean"] > 0, bundle["result"]
