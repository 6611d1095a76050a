"""Every bad input a user can type: one line naming file/key/flag, value and fix; exit 2; nothing written.

The YAML corpus lives in tests/bad_inputs/; each file's first line says what the
error must contain.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HERE

CORPUS = sorted((HERE / "bad_inputs").glob("*.yaml"))


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} lacks its '# expect:' line"
    return first.removeprefix("# expect: ")


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.status == 2, (result.status, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_nothing_written(home: Path) -> None:
    assert not (home / "results").exists() and not (home / "mlflow.db").exists(), list(home.rglob("*"))


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_bad_space_file(path, cli, _isolated_home):
    result = cli("search", "--space", str(path))
    assert_one_line_error(result, str(path), expected(path))
    assert_nothing_written(_isolated_home)


@pytest.mark.parametrize("argv, fragments", [
    (["search", "--space", "ppo_smal"], ["--space: unknown space 'ppo_smal'; did you mean 'ppo_small'?"]),
    (["search", "--space", "missing/space.yaml"], ["--space missing/space.yaml: no such file"]),
    (["search", "--space", "ppo_small", "--set", "lr"], ["--set lr: expected KEY=VALUE"]),
    (["search", "--space", "ppo_small", "--set", "budget=abc"],
     ["budget.env_steps: expected a positive whole number of env steps, got 'abc'"]),
    (["search", "--space", "ppo_small", "--set", "lrr=0.1"],
     ["fixed.lrr: not a setting of ppo; did you mean 'lr'?"]),
    (["search", "--space", "ppo_small", "--num-samples", "0"], ["--num-samples 0: must be a positive integer"]),
    (["search", "--space", "ppo_small", "--num-sample", "3"],
     ["unrecognized arguments: --num-sample 3; did you mean --num-samples?"]),
    (["search", "--space", "ppo_small", "--num-samples", "x"], ["--num-samples: invalid int value: 'x'"]),
    (["search", "--space", "ppo_small", "--scheduler", "hyperbandd"], ["unknown scheduler 'hyperbandd'"]),
    (["search", "--space", "ppo_small", "--searcher", "optuan"], ["did you mean 'optuna'?"]),
    (["search", "--space", "ppo_small", "--mlflow-uri", "http://127.0.0.1:9"],
     ["--mlflow-uri http://127.0.0.1:9: MLflow server unreachable"]),
    (["search", "--space", "ppo_small", "--mlflow-uri", "mlflow.db"], ["--mlflow-uri mlflow.db: not a tracking URI"]),
    (["search"], ["the following arguments are required: --space"]),
    (["serch"], ["invalid choice: 'serch'"]),
    (["best", "no-such-experiment"], ["experiment 'no-such-experiment'"]),
    (["best", "x", "--scope", "avg-last-x"], ["--scope avg-last-x: expected last | max | avg-last-N"]),
    (["train", "--config", "missing.yaml"], ["missing.yaml: cannot read"]),
    (["spaces", "show", "dqn_smal"], ["did you mean 'dqn_small'?"]),
])
def test_bad_flags(argv, fragments, cli, _isolated_home):
    result = cli(*argv)
    assert_one_line_error(result, *fragments)
    assert_nothing_written(_isolated_home)


def test_space_file_is_not_an_export(cli, _isolated_home):
    from tune_runner.spec import shipped_spaces

    result = cli("train", "--config", str(shipped_spaces()["ppo_small"]))
    assert_one_line_error(result, "not a tune-rl best-config export")


def test_traceback_flag_shows_the_stack(cli):
    from tune_runner.errors import UserError

    with pytest.raises(UserError):
        cli("--traceback", "search", "--space", "ppo_smal")
