"""Each command a finished search or a refusal prints for the user to run parses back, exactly as printed
(shlex.split, then the CLI's own parser), to what it means, with a path holding a space; a password never shows."""

from __future__ import annotations

import io
import shlex
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from tune_runner.cli.main import build_parser

SECRET = "hunter2"


def parsed(line: str):
    words = shlex.split(line.partition("  # ")[0])
    assert words[0] == "tune-rl", line
    return build_parser().parse_args(words[1:])


def test_the_reevaluation_fix_names_the_storage_the_search_used(tmp_path, _isolated_home):
    from tune_runner.results.report import verdict_fix

    folder = tmp_path / "my results" / "exp"
    text = verdict_fix(folder)
    args = parsed(text.partition(": ")[2])
    assert (args.command, args.experiment, args.storage, args.reevaluate) == ("best", "exp", folder.parent, 2)
    default = parsed(verdict_fix(_isolated_home / "results" / "exp").partition(": ")[2])
    assert (default.experiment, default.storage) == ("exp", None)  # the default needs no flag


def test_the_dashboard_hint_quotes_the_store_and_hides_its_password(tmp_path):
    from tune_runner.tuning.console import where_to_look

    spaced = f"sqlite:///{tmp_path / 'my store' / 'mlflow.db'}"
    args = parsed(where_to_look(spaced).removeprefix("see it: "))
    assert (args.command, args.mlflow_uri) == ("dashboard", spaced)
    secret = f"postgresql://tune:{SECRET}@db.example:5432/mlflow"
    hint = where_to_look(secret)
    assert SECRET not in hint and "put the secret back in place of ***" in hint
    assert parsed(hint.removeprefix("see it: ")).mlflow_uri == "postgresql://tune:***@db.example:5432/mlflow"


def test_the_summarys_rerun_and_dashboard_lines_parse_as_printed(tmp_path):
    from tune_runner.spec.experiment import load_spec
    from tune_runner.tuning.console import summary

    exported = tmp_path / "my results" / "exp" / "best.yaml"
    outcome = SimpleNamespace(seconds=61, counts=Counter(done=2), errors=Counter(), best=None, audit=None,
                              verdict=None, experiment_path=exported.parent, export_path=exported)
    uri = f"postgresql://tune:{SECRET}@db.example/mlflow"
    out = io.StringIO()
    summary(load_spec("oracle"), outcome, SimpleNamespace(storage=exported.parent.parent, mlflow_uri=uri),
            mlflow_run="abc", model=SimpleNamespace(note="none"), out=out)
    assert SECRET not in out.getvalue()
    lines = {line.split()[0]: line for line in out.getvalue().splitlines() if line.strip()}
    rerun = parsed(lines["exported"].partition("(re-run: ")[2].removesuffix(")"))
    assert (rerun.command, rerun.config) == ("train", str(exported))
    dashboard = parsed(lines["mlflow"].partition("see it: ")[2].removesuffix(")"))
    assert dashboard.mlflow_uri == "postgresql://tune:***@db.example/mlflow"


def test_the_folder_hint_of_a_search_read_from_mlflow_quotes_its_path(tmp_path):
    from tune_runner.results.tracked import _folder_hint

    folder = tmp_path / "it's my results" / "exp"
    run = SimpleNamespace(data=SimpleNamespace(tags={"tune_rl.experiment_path": str(folder)}))
    args = parsed(_folder_hint(run))
    assert (args.command, Path(args.experiment)) == ("best", folder)
