"""The README's Python API example, run as written, in-process on a real local Ray and the default MLflow store:
a search through `tr.search` that ends with the same files and MLflow records `tune-rl search` leaves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    """The first ```python block of the README's "Python API" section."""
    section = README.read_text().split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)[:1]
    return code


def test_the_readmes_example_runs(ray_session, _isolated_home, tmp_path, monkeypatch, capsys):
    import tune_runner as tr
    from tune_runner import paths
    from tune_runner.tracking import uri as mlflow_uri
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(readme_example(), str(README), "exec"), scope)  # noqa: S102 - the README's own code
    result, best = scope["result"], scope["best"]
    assert isinstance(result, tr.SearchResult) and isinstance(best, tr.BestResult)
    assert result.path == tmp_path / "runs" / result.name and sum(result.trials.values()) == 2
    assert "errored" not in result.trials and len(scope["frame"]) == 2
    exported = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert exported == yaml.safe_load(result.export_path.read_text())  # the bundle the search wrote
    assert exported["config"] == dict(result.best_config) and scope["policy"].kind == "ppo"
    assert best.experiment == result.name and best.scope == "avg-last-5"
    parent = mlflow_uri.client(paths.default_mlflow_uri()).get_run(result.mlflow_run)
    assert parent.data.tags["tune_rl.status"] == "finished"
    assert "--space: unknown space 'ppo_smal'; did you mean 'ppo_small'?" in capsys.readouterr().out
