"""A new searcher and a new learner are one registration each (docs: STYLE.md, "Records, not name checks").

A dummy searcher (a record of this module, registered in SEARCHERS) and a dummy learner (through the public
`register_agent`, and through a plug-in file) are found in the command line's help, in the completion's
candidates and by the preflight, which builds a search of them; a misspelled name of either is still refused
with the closest choice. Nothing but the registration names them: no list of names is kept by hand.
"""

from __future__ import annotations

import argparse
import re

import pytest

from tests.cli_process import run_entry_point
from tune_runner.cli import completion
from tune_runner.cli.parser import _command_parser, build_parser
from tune_runner.errors import UserError
from tune_runner.plugins import AGENTS, register_agent
from tune_runner.searchers import SEARCHERS
from tune_runner.searchers.record import Request, SearcherType

SEARCHER, LEARNER = "dummysearch", "dummylearner"
BUILT: list[Request] = []  # what the dummy searcher was built from


def _build(request: Request) -> object:
    from ray.tune.search import BasicVariantGenerator

    BUILT.append(request)
    return BasicVariantGenerator(random_state=request.seed)


DUMMY_SEARCHER = SearcherType(name=SEARCHER, build=_build, model_based=False, settings=("flavour",))


class DummyLearner:
    """A user's agent as register_agent takes it: its options by add_args, the metrics it reports."""

    reports = ("episode_return_mean", "env_steps")

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--lr", type=float, default=0.1, help="step size")

    def __init__(self, args: argparse.Namespace) -> None: ...
    def train_iteration(self) -> dict: ...
    def compute_actions(self, obs: object, explore: bool = False) -> object: ...


@pytest.fixture
def registered(monkeypatch):
    """Both dummies registered; the registries' entries as they were once the test ends (the suite runs shuffled)."""
    monkeypatch.setattr(SEARCHERS, "_entries", dict(SEARCHERS._entries))
    monkeypatch.setattr(AGENTS, "_entries", dict(AGENTS._entries))
    SEARCHERS.register(SEARCHER, DUMMY_SEARCHER)
    register_agent(LEARNER)(DummyLearner)
    BUILT.clear()


def help_of(command: str) -> str:
    """`tune-rl COMMAND --help` as printed, built in this process (where the dummies are registered)."""
    text = _command_parser(build_parser([command, "--help"]), command).format_help()
    return re.sub(r"\s+", " ", text)  # argparse wraps lines


def test_the_registries_hold_nothing_of_the_dummies_outside_the_test():
    assert SEARCHER not in SEARCHERS and LEARNER not in AGENTS
    assert SEARCHER not in help_of("search") and LEARNER not in help_of("train")


def test_the_help_lists_a_registered_searcher_and_learner(registered):
    searcher_help = help_of("search")
    assert f"search algorithm: {', '.join(SEARCHERS.names())} (default" in searcher_help
    assert SEARCHER in searcher_help and "smac" in searcher_help and "nevergrad" in searcher_help
    assert f"the learning rule: {', '.join(AGENTS.names())}, rllib/PPO" in help_of("train")
    assert LEARNER in help_of("train")


PLUGIN = f'''
from tune_runner.plugins import register_agent


@register_agent("{LEARNER}")
class DummyLearner:
    def __init__(self, args): ...
'''


def test_a_learner_from_a_plugin_file_is_in_trains_help(tmp_path):
    """The real command line: the agent is registered by the file --plugins names, in a fresh process."""
    plugin = tmp_path / "dummy_learner.py"
    plugin.write_text(PLUGIN)
    ran = run_entry_point(["train", "--plugins", str(plugin), "--help"], tmp_path, cwd=tmp_path)
    assert LEARNER in re.sub(r"\s+", " ", ran["out"]).split("the learning rule: ")[1].split("(default")[0], ran["err"]
    assert ran["heavy"] == []


def completer(command: str, flag: str):
    """The completer the shell's Tab reaches for `tune-rl COMMAND FLAG` (completion.attach on the real parser)."""
    parser = build_parser([command])
    completion.attach(parser)
    return _command_parser(parser, command)._option_string_actions[flag].completer


def test_the_completion_offers_a_registered_searcher_and_learner(registered):
    none = argparse.Namespace(space=None, overrides=[])
    assert SEARCHER in completer("search", "--searcher")(prefix="", parsed_args=none)
    offered = completer("search", "--set")
    assert f"searcher={SEARCHER}" in offered(prefix="searcher=", parsed_args=none)
    assert f"trainable={LEARNER}" in offered(prefix="trainable=", parsed_args=none)
    assert LEARNER in completer("train", "--agent_name")(prefix="", parsed_args=none)


def spec_of(tmp_path, *, trainable: str, searcher: str, setting: str = "flavour"):
    from tune_runner.spec.experiment import load_spec

    path = tmp_path / "dummies.yaml"
    path.write_text(f"trainable: {trainable}\nenv: CartPole-v1\nbudget: {{env_steps: 1000}}\nnum_samples: 2\n"
                    f"searcher: {{name: {searcher}, seed: 3, {setting}: plain}}\n"
                    f"space:\n  lr: {{choice: [0.1, 0.2]}}\n")
    return load_spec(str(path))


def test_the_preflight_accepts_a_registered_searcher_and_learner(registered, tmp_path):
    from ray.tune.search import BasicVariantGenerator

    from tune_runner.tuning.preflight import prepare

    prepared = prepare(spec_of(tmp_path, trainable=LEARNER, searcher=SEARCHER))
    assert prepared.backend.name == LEARNER and prepared.backend.kind == "agent"
    assert isinstance(prepared.searcher, BasicVariantGenerator) and not prepared.owns_space
    (request,) = BUILT  # built once, by the record, from the spec's settings and space
    assert request.settings == {"seed": 3, "flavour": "plain"} and [p.name for p in request.params] == ["lr"]


@pytest.mark.parametrize("trainable, searcher, says", [
    (LEARNER, "dummysearc", f"searcher: unknown searcher 'dummysearc'; did you mean '{SEARCHER}'?"),
    (LEARNER[:-1], SEARCHER, f"trainable: unknown trainable '{LEARNER[:-1]}'; did you mean '{LEARNER}'?"),
])
def test_the_preflight_still_refuses_a_misspelled_name_with_the_choices(registered, tmp_path, trainable, searcher,
                                                                         says):
    from tune_runner.tuning.preflight import prepare

    with pytest.raises(UserError) as caught:
        prepare(spec_of(tmp_path, trainable=trainable, searcher=searcher))
    assert says in str(caught.value) and "choices: " in str(caught.value), str(caught.value)
    if "searcher" in says:
        assert all(name in str(caught.value) for name in (SEARCHER, "random", "smac", "nevergrad"))


def test_a_registered_searchers_own_settings_are_checked_by_its_record(registered, tmp_path):
    from tune_runner.tuning.preflight import prepare

    with pytest.raises(UserError, match=f"searcher.flavor: unknown setting of {SEARCHER}; did you mean 'flavour'"):
        prepare(spec_of(tmp_path, trainable=LEARNER, searcher=SEARCHER, setting="flavor"))


def test_a_registered_grid_searcher_gets_its_choices_as_grid_axes(registered, tmp_path):
    """What the preflight does for `grid` it does for any record that says grid_axes, by the record."""
    from dataclasses import replace

    from tune_runner.tuning.preflight import prepare

    SEARCHERS.register(SEARCHER, replace(DUMMY_SEARCHER, grid_axes=True))
    prepared = prepare(spec_of(tmp_path, trainable=LEARNER, searcher=SEARCHER))
    assert [p.dist for p in prepared.spec.space] == ["grid"] and [p.dist for p in BUILT[0].params] == ["grid"]


def test_each_shipped_searcher_is_one_record_under_its_own_name():
    for name in SEARCHERS.names():
        record = SEARCHERS.get(name)
        assert isinstance(record, SearcherType) and record.name == name and SEARCHERS.get(name) is record
