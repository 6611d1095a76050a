"""The Python API in-process, without Ray: `tr.best` and `tr.report`'s reading of a finished search
(tests/mlflow_helpers.py writes one), the same selection and bundle as `tune-rl best`; bad input raised as
the typed UserError whose text the CLI prints; a search that ends without a result; `import tune_runner`
staying light. The API's search on a real Ray is in tests/test_api_e2e.py (the README's example)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
import yaml

import tune_runner as tr
from tests.mlflow_helpers import hand_spec, write_search_folder
from tune_runner.api.searching import set_items
from tune_runner.spec.experiment import parse_override
from tune_runner.tuning import resume, runner


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api") / "results" / "hand-search"
    folder.mkdir(parents=True)
    write_search_folder(folder, hand_spec())
    return folder


@pytest.mark.parametrize("scope, trial", [("last", "h_00003"), ("max", "h_00001"), ("avg-last-3", "h_00000")])
def test_best_selects_what_the_cli_selects(finished, cli, scope, trial):
    best = tr.best("hand-search", storage=finished.parent, scope=scope)
    assert isinstance(best, tr.BestResult) and best.trial_id == trial
    printed = cli("best", str(finished), "--scope", scope, "--json")
    assert printed.status == 0, printed.err
    assert json.loads(printed.out) == best.config and "env" not in best.config
    assert best.path == finished and best.metric == "episode_return_mean" and best.mlflow_run is None


def test_best_exports_the_clis_bundle(finished, cli, tmp_path):
    written = tr.best(str(finished)).export(tmp_path / "api.yaml")
    assert cli("best", str(finished), "--export", str(tmp_path / "cli.yaml")).status == 0
    ours, theirs = (yaml.safe_load(p.read_text()) for p in (written, tmp_path / "cli.yaml"))
    assert ours == theirs and ours["source"]["trial_id"] == "h_00003"


def test_best_gives_the_searchs_reevaluated_winner_unless_asked_for_a_scope(finished, cli, tmp_path):
    """A search that re-evaluated exported its verdict's winner; `best` on its folder says the same (it said the
    best last result, another trial, once), and --scope, --metric or --mode still pick as asked."""
    import shutil

    from tune_runner.results import report, robust

    folder = tmp_path / "results" / "hand-search"
    shutil.copytree(finished, folder)
    runs = {"h_00001": (480.0, 490.0, 500.0), "h_00003": (300.0, 310.0, 320.0)}
    verdict = robust.rank([robust.summarise(robust.Candidate(trial, {}, 1.0),
                                            [robust.SeedRun(1000 + i, v, None) for i, v in enumerate(values)],
                                            target=None) for trial, values in runs.items()], mode="max")
    report.save_verdict(verdict, folder, metric="episode_return_mean")
    best = tr.best(str(folder))
    assert best.trial_id == "h_00001" and best.value == pytest.approx(490.0) and best.scope == "reevaluated IQM"
    assert best.verdict is not None and best.verdict.winner.iqm == pytest.approx(490.0)
    assert tr.best(str(folder), scope="last").trial_id == "h_00003" == tr.best(str(finished)).trial_id
    printed = cli("best", str(folder))
    assert printed.status == 0 and printed.out.startswith("best       h_00001  episode_return_mean 490")
    assert cli("best", str(folder), "--scope", "last").out.startswith("best       h_00003")
    (folder / "reevaluation.json").write_text('{"ranking": [{"trial_id": "h_00001"}]}')
    with pytest.raises(tr.UserError, match=r"reevaluation.json: not a saved re-evaluation \(KeyError: 'seeds'\); "
                                           r"delete it, or re-evaluate the top configs again: tune-rl best hand-search "
                                           r"--reevaluate 2 --storage "):
        tr.best(str(folder))


def test_bad_input_raises_the_clis_line_as_a_typed_error(cli, finished):
    cases = [
        (tr.NotFound, lambda: tr.search("ppo_smal"), ["search", "--space", "ppo_smal"]),
        (tr.SpecError, lambda: tr.search("ppo_small", overrides={"budget": "lots"}),
         ["search", "--space", "ppo_small", "--set", "budget=lots"]),
        (tr.UserError, lambda: tr.search("ppo_small", num_samples=0), ["search", "--space", "ppo_small",
                                                                       "--num-samples", "0"]),
        (tr.UserError, lambda: tr.search("ppo_small", storage="ftp://host/x"), ["search", "--space", "ppo_small",
                                                                                 "--storage", "ftp://host/x"]),
        (tr.NotFound, lambda: tr.best("hand-serch", storage=finished.parent),
         ["best", "hand-serch", "--storage", str(finished.parent)]),
        (tr.UserError, lambda: tr.best(str(finished), scope="avg-last-0"), ["best", str(finished), "--scope",
                                                                             "avg-last-0"]),
        (tr.NotFound, lambda: tr.resume("gone", storage=finished.parent), ["resume", "gone", "--storage",
                                                                           str(finished.parent)]),
    ]
    for kind, call, argv in cases:
        with pytest.raises(tr.UserError) as raised:
            call()
        printed = cli(*argv)
        assert type(raised.value) is kind, (argv, type(raised.value))
        assert printed.err == f"tune-rl: {raised.value}\n" and printed.status == raised.value.exit_status == 2


def test_a_mapping_of_overrides_reads_back_as_written():
    overrides = {"lr": 3.0e-4, "budget": 50_000, "tag": "4", "flag": True, "env_config.sizes": [1, 2],
                 "model_config": {"a": 1.0e-5}}
    assert dict(parse_override(item) for item in set_items(overrides)) == overrides
    assert set_items(["lr=1e-3"]) == ["lr=1e-3"] and set_items(None) == []


def ended(monkeypatch, counts, **outcome):
    """runner.run replaced: the search's folder saved, then the given outcome, as a search that ran."""
    def run(spec, options, **_):
        folder = runner.local_folder(options.storage, runner.experiment_name(spec, options))
        resume.save(folder, spec=spec, options=options)
        return runner.Outcome(folder, None, None, Counter(counts), 1.0, **outcome)

    monkeypatch.setattr(runner, "run", run)


def test_a_search_whose_every_trial_failed_raises_with_its_result(monkeypatch, tmp_path, cli):
    ended(monkeypatch, {"errored": 2}, errors=Counter({"ValueError: bad lr": 2}))
    with pytest.raises(tr.AllTrialsFailed) as raised:
        tr.search("oracle", name="failing", storage=tmp_path)
    assert raised.value.exit_status == 3 and raised.value.result.trials == {"errored": 2}
    assert raised.value.result.best is None and "most common: ValueError: bad lr" in str(raised.value)
    printed = cli("search", "--space", "oracle", "--storage", str(tmp_path), "--name", "again")
    assert printed.status == 3 and printed.err == ""  # the search's summary said it; no second line


def test_an_interrupted_search_raises_with_its_result(monkeypatch, tmp_path, cli):
    ended(monkeypatch, {}, interrupted=True)
    with pytest.raises(tr.Interrupted) as raised:
        tr.search("oracle", name="stopped", storage=tmp_path)
    assert raised.value.exit_status == 130 and raised.value.result.name == "stopped"
    assert "tune-rl resume stopped" in str(raised.value)
    printed = cli("search", "--space", "oracle", "--storage", str(tmp_path), "--name", "stopped-too")
    assert printed.status == 130 and printed.err == ""


def test_resuming_a_finished_search_returns_it(finished, tmp_path, cli):
    resume.mark_finished(finished, status="finished", counts={"done": 5})
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        result = tr.resume("hand-search", storage=finished.parent, out=stream)
    assert result.trials == {"done": 5} and result.best.trial_id == "h_00003" and result.best_value == 476.0
    assert "hand-search finished already (5 trials: 5 done); nothing to resume" in out.read_text()
    frame = result.dataframe()
    assert sorted(frame["trial_id"]) == [f"h_0000{i}" for i in range(5)] and "config/lr" in frame


def test_load_policy_is_the_clis(tmp_path, cli):
    with pytest.raises(tr.UserError) as raised:
        tr.load_policy(tmp_path / "nothing")
    assert cli("evaluate", str(tmp_path / "nothing")).err == f"tune-rl: {raised.value}\n"
    from tests.test_policy import CONFIGS, write_trial
    from tune_runner.trainables.agents import build_learner

    learner = build_learner("ppo", CONFIGS["ppo"])
    checkpoint = write_trial(tmp_path / "exp" / "OwnPPO_CartPole-v1_00000", learner, CONFIGS["ppo"])
    policy = tr.load_policy(checkpoint.parent)
    assert policy.kind == "ppo" and policy.checkpoint == checkpoint
    learner.close()


def test_the_package_is_the_api_and_stays_light():
    called = ("import sys, types, tune_runner as tr, tune_runner.tuning.resume\n"
              "assert isinstance(tr.search, types.FunctionType) and 'tune_runner.search' not in sys.modules\n"
              "import inspect; assert 'overrides' in inspect.signature(tr.search).parameters\n"
              "tr.search('ppo_smal')")
    ran = subprocess.run([sys.executable, "-c", called], capture_output=True, text=True, check=False)
    assert "tune_runner.errors.NotFound: --space: unknown space 'ppo_smal'" in ran.stderr, ran.stderr
    light = ("import sys, tune_runner as tr\n"
             "names = [tr.search, tr.best, tr.resume, tr.report, tr.load_policy, tr.SearchResult, tr.UserError]\n"
             "print([m for m in ('ray', 'torch', 'mlflow', 'pandas', 'gymnasium') if m in sys.modules])")
    ran = subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", ran.stdout + ran.stderr


@pytest.mark.parametrize("overrides, fragment", [
    ({"gamma": 1.5}, "ppo rejects this config: PPOConfig.gamma must be in (0, 1], got gamma=1.5"),
    ({"lr": "fast"}, "ppo rejects this config: PPOConfig.lr must be a number, got lr='fast' (a str)"),
    ({"lrr": 0.1}, "fixed.lrr: not a setting of ppo; did you mean 'lr'?"),
], ids=["out-of-range", "not-a-number", "unknown-key"])
def test_an_override_the_trainable_refuses_is_a_spec_error_before_ray(overrides, fragment, untouched):
    """The README promises tr.SpecError for an override that does not validate: the space loads, and the
    trainable's own check (preflight) refuses it, before Ray starts and before anything is written."""
    with pytest.raises(tr.SpecError) as raised:
        tr.search("ppo_small", overrides=overrides)
    assert fragment in str(raised.value)
    untouched.check()
