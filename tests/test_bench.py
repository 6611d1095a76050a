"""The benchmark's counting rules: every seed counts, an unsolved seed is infinitely slow.

The benchmarks themselves are timed only in bench/ (never in a test); these check the arithmetic
that turns their runs into the published verdicts.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from tests.conftest import HERE


def bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE.parent / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def solve():
    return bench_module("solve_cartpole")


def run(seed: int, wall: float | None, steps: int = 100_000) -> dict:
    """One contender run as solve_cartpole records it; wall None = not solved within the caps."""
    return {"seed": seed, "solved": wall is not None, "wall_s": wall or 150.0, "build_s": 0.0,
            "env_steps": steps, "peak_rss_mb": 250.0}


def test_an_unsolved_seed_counts_as_infinitely_slow_in_the_median(solve):
    fast = solve.summary([run(0, 1.0), run(1, 2.0), run(2, None)])
    assert (fast["solved"], fast["runs"], fast["unsolved"], fast["wall"]) == (2, 3, [2], 2.0)
    mostly_unsolved = solve.summary([run(0, 1.0), run(1, None), run(2, None)])
    assert math.isinf(mostly_unsolved["wall"]) and math.isinf(mostly_unsolved["steps"])


def test_the_solved_line_names_every_seed_that_did_not_solve(solve):
    stats = solve.summary([run(0, 1.0), run(1, None), run(2, 3.0), run(3, None)])
    assert solve.solved_line("ours/DQN", stats) == "ours/DQN: solved 2/4 seeds (0-3); not solved: seed 1, 3"


def test_a_target_is_not_met_by_a_contender_that_did_not_solve(solve):
    stats = {"ours/DQN": solve.summary([run(0, None), run(1, None), run(2, 1.0)]),
             "rllib/DQN": solve.summary([run(0, 100.0), run(1, 100.0), run(2, 100.0)])}
    assert "NOT MET" in solve.target_line("ours/DQN", "rllib/DQN", stats, target=1 / 3, cap=150)


def test_ten_seeds_by_default_and_rllib_seeds_within_them(solve, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["solve_cartpole.py"])
    args = solve.parse_args([])
    assert (args.seeds, args.rllib_seeds) == (10, 10)
    with pytest.raises(SystemExit):
        solve.parse_args(["--seeds", "3", "--rllib-seeds", "4"])
    assert "--rllib-seeds must be between 1 and --seeds (3), got 4" in capsys.readouterr().err


def test_the_tuning_sweep_runs_off_the_benchmarks_seeds():
    sweep = bench_module("sweep_own")
    assert sweep.seed_range("3,7,100-102") == [3, 7, 100, 101, 102]
    assert not set(sweep.parse_args(["PPO"]).seeds) & set(range(10))


def probe_record() -> dict:
    """What bench/search_probe.py writes for one search, by hand: stages from the process's first line,
    two trials (one on a new actor, one on a reused one), one actor's gaps between tasks."""
    phases = [("_checked", 1.0, 2.0), ("ensure_ray", 3.0, 4.0), ("_tracking", 7.0, 1.0), ("_fit", 8.0, 30.0),
              ("_finish", 38.5, 25.0), ("reevaluate", 39.0, 20.0), ("write", 59.5, 1.0), ("_log_model", 60.5, 1.5)]
    return {"phases": [{"name": n, "start": s, "seconds": d} for n, s, d in phases],
            "trials": [{"actor": "new", "to_first_iteration_s": 4.5}, {"actor": "reused", "to_first_iteration_s": 0.1},
                       {"actor": "reused", "to_first_iteration_s": 0.3}],
            "actors": [{"gaps": [0.002, 0.004]}, {"gaps": []}], "started_at": 100.5, "forked_at": 100.0,
            "wall_s": 63.0, "outer_wall_s": 65.0, "driver_cpu_s": 20.0, "training_s": 80.0, "env_steps": 1_500_000}


def test_the_search_benchmark_splits_a_run_into_its_stages():
    e2e = bench_module("search_e2e")
    row = e2e.numbers(probe_record(), num_cpus=2)
    assert (row["wall"], row["python start"], row["to Ray start"], row["Ray start"]) == (65.0, 0.5, 3.0, 4.0)
    assert (row["search fit"], row["between the fits"], row["re-evaluation fit"]) == (30.0, 1.0, 20.0)
    assert (row["after the re-evaluation"], row["exit"]) == (4.0, 1.5)  # 63 - (39 + 20); 65 - 0.5 - 63
    assert (row["training"], row["not training"]) == (40.0, 25.0)  # 80 trial-seconds on 2 CPUs
    assert row["new actor to 1st iteration (max)"] == 4.5 and row["reused actor to 1st iteration (max)"] == 0.3
    assert row["gap between iterations (ms)"] == pytest.approx(3.0)
    ours = e2e.numbers({**probe_record(), "outer_wall_s": 32.5}, num_cpus=2)
    table = e2e.table({"base": [row], "ours": [ours]})
    assert "| wall " in table and table.splitlines()[2].rstrip().endswith("|      0.50 |")  # ours / base
