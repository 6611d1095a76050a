"""The slow tier (issue 45): a slow space has its as-shipped row in bench/SHIPPED.md, at a commit of the history no
older than its space file's last change; a space file's tier, smoke and reference are checked like any key."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tune_runner.errors import UserError
from tune_runner.spec.experiment import build_spec, load_spec, shipped_spaces

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import shipped as bench_shipped  # noqa: E402 - bench/shipped.py, the writer of the rows read here

SLOW = sorted(name for name, path in shipped_spaces().items() if load_spec(name).tier.name == "slow")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def recorded(name: str, rows: dict[str, str]) -> str | None:
    """Why the row of slow space `name` does not stand for its file as it is now; None when it does."""
    line = rows.get(name)
    if line is None:
        return f"{name}: no row in bench/SHIPPED.md; run make shipped SPACE={name} and commit the row"
    commit = line.split("|")[3].strip()
    path = shipped_spaces()[name].relative_to(ROOT)
    changed = git("log", "-1", "--format=%H", "--", str(path))
    if not changed:  # the file is not committed yet: no row can be at a commit after it
        return f"{name}: {path} is not committed; commit it, then run make shipped SPACE={name}"
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        return f"{name}: its row's commit {commit} is not in the history"
    ancestor = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", changed, commit])
    if ancestor.returncode != 0:
        return (f"{name}: its row ran at {commit}, before {path} last changed ({changed[:12]}); run make shipped "
                f"SPACE={name} again")
    return None


needs_git = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                               reason="the rows are checked against the git history")


@needs_git
@pytest.mark.parametrize("name", SLOW)
def test_every_slow_space_has_its_as_shipped_row_at_or_after_its_last_change(name):
    rows = bench_shipped.read_rows((ROOT / "bench" / "SHIPPED.md").read_text())
    assert recorded(name, rows) is None, recorded(name, rows)


@needs_git
def test_a_missing_row_or_one_older_than_the_space_files_last_change_is_refused():
    """The check above, against rows made up from the history: none, one at the commit before the space file's
    last change, one at that change."""
    name = SLOW[0] if SLOW else "ppo_small"
    path = shipped_spaces()[name].relative_to(ROOT)
    changed = git("log", "-1", "--format=%H", "--", str(path))
    row = "| {name} | slow | {commit} | 2026-11-28 | 2 | 1.0 min | x | x | x | x |"
    assert "no row" in recorded(name, {})
    assert "before" in recorded(name, {name: row.format(name=name, commit=git("rev-parse", f"{changed}^")[:12])})
    assert recorded(name, {name: row.format(name=name, commit=changed[:12])}) is None
    assert "not in the history" in recorded(name, {name: row.format(name=name, commit="0123456789ab")})


def test_a_rows_table_round_trips_and_a_new_row_replaces_the_old(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_shipped, "TABLE", tmp_path / "SHIPPED.md")
    bench_shipped.write_rows({"b": "| b | slow | 1 |", "a": "| a | quick | 2 |"})
    rows = bench_shipped.read_rows(bench_shipped.TABLE.read_text())
    assert list(rows) == ["a", "b"] and rows["b"] == "| b | slow | 1 |"
    bench_shipped.write_rows({**rows, "b": "| b | slow | 3 |"})
    assert bench_shipped.read_rows(bench_shipped.TABLE.read_text())["b"] == "| b | slow | 3 |"


BASE = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000}}
REFERENCE = {"algo": "DQN", "env": "Acrobot-v1", "env_steps": 100000, "mean_reward": -76.6,
             "source": "rl-baselines3-zoo benchmark.md"}


def test_tier_smoke_and_reference_are_read_and_saved():
    spec = build_spec({**BASE, "tier": "slow", "smoke": {"budget": 2000, "num_samples": 2}, "reference": REFERENCE},
                      name="s", source="s.yaml")
    assert spec.tier.name == "slow" and spec.tier.smoke == {"budget": 2000, "num_samples": 2}
    saved = spec.as_dict()
    assert saved["tier"] == "slow" and saved["reference"] == REFERENCE
    assert "tier" not in build_spec(BASE, name="q", source="q.yaml").as_dict()  # a quick space saves as before


@pytest.mark.parametrize(("extra", "message"), [
    ({"tier": "medium"}, "s.yaml: tier: expected quick or slow, got 'medium'"),
    ({"tier": "slow"}, "s.yaml: smoke: missing; a slow space names the budget CI runs it at"),
    ({"smoke": {"budget": 2000, "num_samples": 2}}, "s.yaml: smoke: only a slow space has a smoke budget"),
    ({"tier": "slow", "smoke": {"budget": 0, "num_samples": 2}}, "s.yaml: smoke: expected {budget: ENV_STEPS"),
    ({"tier": "slow", "smoke": {"budget": 2000}}, "s.yaml: smoke: expected {budget: ENV_STEPS"),
    ({"reference": {**REFERENCE, "env_steps": "100k"}}, "s.yaml: reference.env_steps: expected a whole number, "
                                                        "got '100k'"),
    ({"reference": {**REFERENCE, "reward": 1}}, "s.yaml: reference.reward: unknown key"),
    ({"reference": "zoo"}, "s.yaml: reference: expected a mapping"),
])
def test_a_bad_tier_smoke_or_reference_is_one_line_naming_the_key(extra, message):
    with pytest.raises(UserError) as caught:
        build_spec({**BASE, **extra}, name="s", source="s.yaml")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)


def test_every_shipped_slow_space_states_its_target_and_reference():
    for name in SLOW:
        raw = yaml.safe_load(shipped_spaces()[name].read_text())
        assert raw.get("reference") and raw.get("stop_at") is not None, name
        assert "target:" in shipped_spaces()[name].read_text(), f"{name}: say its target in a comment"
