"""Each kind of trainable resolves once to its record (tune_runner.trainables.backends), and the record's facts
are the ones the checks before launch, the runner and the results read."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tune_runner.algos.records import learner_record
from tune_runner.errors import UserError
from tune_runner.plugins import AGENTS, register_agent
from tune_runner.trainables import catalog, metrics
from tune_runner.trainables.backends import (
    USER_REPORTS,
    AgentBackend,
    OracleBackend,
    OwnBackend,
    RLlibBackend,
    Trains,
)
from tune_runner.trainables.catalog import backend


@pytest.fixture
def _agents_restored():
    saved = dict(AGENTS._entries)
    yield
    AGENTS._entries = saved


def test_our_learners_are_own_records_that_export_their_policy():
    for name in ("ppo", "dqn"):
        record = backend(name)
        assert isinstance(record, OwnBackend) and record.kind == "own" and record.name == name
        assert record.reports == learner_record(name).reports and record.exports_policy and record.can_checkpoint
        assert {"episode_return_mean", "env_steps", "episodes"} < set(record.reports)
        assert ("policy_loss" in record.reports) == (name == "ppo") and ("qf_loss" in record.reports) == (name == "dqn")
        assert record.replay == (name == "dqn")
        actions = ("Discrete", "MultiDiscrete", "MultiBinary", "Box") if name == "ppo" else ("Discrete",)
        assert record.trains == Trains(actions, ("Box", "masked Dict"), masks=("Discrete",), from_zero=True)
        assert "episodes" in record.time_attrs and not record.settings_need_ray
    assert backend("ppo") is backend("ppo")  # one record, registered once


def test_the_oracles_build_no_env_and_only_the_stateless_one_keeps_no_checkpoint():
    for name in ("oracle", "oracle/stateless", "oracle/stale-restore"):
        record = backend(name)
        assert isinstance(record, OracleBackend) and record.kind == "oracle" and record.trains is None
        assert record.reports == ("episode_return_mean", "env_steps", "peak") and not record.exports_policy
        assert record.can_checkpoint is (name != "oracle/stateless")
        assert "episodes" not in record.time_attrs and record.check_settings(["anything"]) == []


def test_an_rllib_name_is_a_record_of_that_algorithm():
    ppo, dqn = backend("rllib/PPO"), backend("rllib/DQN")
    assert isinstance(ppo, RLlibBackend) and (ppo.kind, ppo.algo, ppo.name) == ("rllib", "PPO", "rllib/PPO")
    assert ppo.reports == tuple(metrics.RLLIB_METRICS) and ppo.settings_need_ray and not ppo.exports_policy
    assert "Box" in ppo.trains.actions and dqn.trains == Trains(("Discrete",), float_observations=True)
    # an algorithm outside our table: any action space; every RLlib model takes float observations
    assert RLlibBackend.of("NotInOurTable").trains == Trains(float_observations=True)
    assert ppo.trainable_class().__name__ == "PPO" and ppo.trainable_class().algo_name == "PPO"
    assert ppo.trial_resources(cpus=2, gpus=None) == {"num_cpus_for_main_process": 2}
    assert backend("ppo").trial_resources(cpus=2, gpus=1) == {"cpus_per_trial": 2, "gpus_per_trial": 1}


def test_a_users_agent_is_a_record_of_what_its_class_declares(_agents_restored):
    @register_agent("declares")
    class Declares:
        reports = ("episode_return_mean", "env_steps", "bonus")
        action_spaces = ("Box",)

        def get_state(self): ...
        def set_state(self, state): ...

    @register_agent("bare")
    class Bare:
        pass

    declared, bare = backend("declares"), backend("bare")
    assert isinstance(declared, AgentBackend) and declared.kind == "agent" and not declared.exports_policy
    assert declared.reports == Declares.reports and declared.trains == Trains(("Box",)) and declared.can_checkpoint
    assert bare.reports == USER_REPORTS and bare.trains == Trains() and not bare.can_checkpoint
    assert "declares" in catalog.trainable_names()


def test_the_declared_checkpoint_facts_match_the_tune_classes():
    from ray import tune

    for name in ("ppo", "dqn", "oracle", "oracle/stateless", "oracle/stale-restore", "rllib/PPO"):
        record = backend(name)
        cls = record.trainable_class()
        saves = isinstance(cls, type) and issubclass(cls, tune.Trainable) and \
            cls.save_checkpoint is not tune.Trainable.save_checkpoint
        assert record.can_checkpoint is saves, name


@pytest.mark.parametrize("name, message", [
    ("ppo2", "unknown trainable 'ppo2'; did you mean 'ppo'? (choices: "),
    ("PPO", "unknown trainable 'PPO'; did you mean 'ppo'?"),
    ("Oracle/Stateless", "unknown trainable 'Oracle/Stateless'; did you mean 'oracle/stateless'?"),
    ("rllib/ppo", "unknown trainable 'rllib/ppo'; did you mean 'rllib/PPO'? (names are case-sensitive)"),
    ("rllib/Nope", "unknown trainable 'rllib/Nope'"),
])
def test_an_unknown_name_is_answered_with_the_closest_choice(name, message):
    with pytest.raises(UserError) as caught:
        backend(name)
    assert str(caught.value).startswith(message), str(caught.value)
    if "(choices: " in message:
        assert "dqn, oracle, oracle/stale-restore, oracle/stateless, ppo, rllib/APPO" in str(caught.value)


def test_an_unknown_name_among_many_lists_the_closest_few_and_how_to_see_all():
    from tune_runner.tuning.preflight import unknown_env

    message = unknown_env("Pendulm-v1")
    assert message.startswith("unknown environment 'Pendulm-v1'; did you mean 'Pendulum-v1'? (")
    assert "known, the closest: Pendulum-v1, " in message and "gymnasium.pprint_registry()" in message
    assert "CartPole-v1" not in message and message.count(", ") < 8  # not gymnasium's whole registry
    assert unknown_env("Zzz").endswith("known; list them: python -c 'import gymnasium; gymnasium.pprint_registry()')")


BEFORE_RAY = """
import json, sys
from tune_runner.trainables.catalog import backend_before_ray
found = [getattr(backend_before_ray(n), "name", None) for n in ("ppo", "oracle", "rllib/SAC", "rllib/TD3")]
print(json.dumps([found, sorted({"ray", "torch"} & {m.partition(".")[0] for m in sys.modules})]))
"""


def test_before_ray_a_name_is_resolved_where_no_ray_is_needed():
    """An RLlib algorithm outside our table of action kinds is left to prepare (RLlib's registry imports Ray)."""
    ran = subprocess.run([sys.executable, "-c", BEFORE_RAY], capture_output=True, text=True, timeout=120)
    assert json.loads(ran.stdout) == [["ppo", "oracle", "rllib/SAC", None], []], ran.stderr


def test_prepare_resolves_the_trainable_once_and_carries_the_record(monkeypatch):
    from tune_runner.spec.experiment import load_spec
    from tune_runner.tuning.preflight import prepare

    asked = []
    lookup = catalog.backend
    monkeypatch.setattr(catalog, "backend", lambda name: asked.append(name) or lookup(name))
    prepared = prepare(load_spec("oracle"))
    assert asked == ["oracle"]
    assert prepared.backend is lookup("oracle") and prepared.trainable is prepared.backend.trainable_class()


def test_what_runs_after_preflight_asks_its_record_and_never_resolves_the_name_again(monkeypatch, tmp_path):
    """The register check, the exported bundle and the logged model take the record preflight resolved;
    prepare takes one already resolved (tune-rl train's), and refuses one of another trainable."""
    from types import SimpleNamespace

    from tune_runner.results import export
    from tune_runner.results.analysis import Best
    from tune_runner.spec.experiment import load_spec
    from tune_runner.tracking import log_model
    from tune_runner.tuning.preflight import check_register, prepare

    prepared = prepare(load_spec("oracle"))

    def resolved_again(name: str) -> None:
        raise AssertionError(f"{name} resolved again")

    monkeypatch.setattr(catalog, "backend", resolved_again)
    with pytest.raises(UserError, match="the policy of trainable oracle is not exported"):
        check_register(prepared, "m")
    best = Best(trial_id="t_1", config={**prepared.spec.param_space(), "x": 0.5}, value=1.0, metric="peak",
                mode="max", scope="last", last_result={}, trial_path=str(tmp_path))
    assert export.bundle(prepared.spec, best, record=prepared.backend, experiment="e").resolved["x"] == 0.5
    logged = log_model.log_policy(uri="sqlite:///unused.db", experiment_id="0", run_id="r", record=prepared.backend,
                                  best=SimpleNamespace(trial_path=str(tmp_path), config={}, trial_id="t"))
    assert logged.note == "not logged (the oracle has no policy)"
    assert prepare(load_spec("oracle"), record=prepared.backend).backend is prepared.backend
    with pytest.raises(ValueError, match="record 'ppo' is not the spec's trainable 'oracle'"):
        prepare(load_spec("oracle"), record=catalog.own_backend(learner_record("ppo")))


def test_train_resolves_its_agent_once_and_runs_with_that_record(monkeypatch):
    import io
    from types import SimpleNamespace

    from tune_runner.cli import train
    from tune_runner.cli.main import build_parser
    from tune_runner.tuning import runner

    asked, ran = [], {}
    lookup = catalog.backend
    monkeypatch.setattr(catalog, "backend", lambda name: asked.append(name) or lookup(name))
    monkeypatch.setattr(runner, "run", lambda spec, options, **kwargs: ran.update(spec=spec, **kwargs)
                        or SimpleNamespace(exit_status=0))
    argv = ["train", "--env_name", "CartPole-v1", "--agent_name", "oracle"]
    assert train.command(build_parser(argv).parse_args(argv), io.StringIO()) == 0
    assert asked == ["oracle"]  # by --agent_name's check, whose record the run is prepared with
    assert ran["record"] is lookup("oracle") and ran["spec"].trainable == "oracle"


def test_rllib_model_config_reaches_the_rl_module_and_a_bad_field_is_one_line():
    """RLlib's new API stack reads its networks from AlgorithmConfig.model_config, a read-only property that
    update_from_dict cannot set: ours passes it to rl_module(model_config=...)."""
    from tune_runner.trainables.rllib import rllib_config

    record = backend("rllib/PPO")
    config = {"env": "CartPole-v1", "model_config": {"fcnet_hiddens": [32, 32], "fcnet_activation": "relu"}}
    assert record.check_config(config) is None
    built = rllib_config("PPO", config).model_config
    assert built["fcnet_hiddens"] == [32, 32] and built["fcnet_activation"] == "relu"
    assert rllib_config("PPO", {"env": "CartPole-v1", "model_config.fcnet_hiddens": [8]}).model_config[
        "fcnet_hiddens"] == [8]  # a searched field arrives dotted
    assert record.check_config({**config, "model_config": {"fcnet_hidden": [32]}}) == (
        "model_config.fcnet_hidden: not a field of RLlib's DefaultModelConfig; did you mean 'fcnet_hiddens'?")
    assert record.check_config({**config, "model_config": [32]}) == (
        "model_config must be a mapping of RLlib's DefaultModelConfig fields, got [32]")



def test_the_exported_rllib_config_holds_the_searched_network_and_feeds_it_back():
    """best.yaml's resolved config is what `tune-rl train --config` trains: the network RLlib built in the search
    (its private _model_config) must be in it as model_config, and not the old stack's unused `model` dict,
    whose fcnet_hiddens default of [256, 256] named another network."""
    from tune_runner.trainables.rllib import rllib_config

    record = backend("rllib/PPO")
    resolved = record.resolved_config({"env": "CartPole-v1", "env_config": {}, "model_config.fcnet_hiddens": [17]})
    assert resolved["model_config"] == {"fcnet_hiddens": [17]} and "model" not in resolved
    again = {**resolved, "env": "CartPole-v1", "env_config": {}}
    assert rllib_config("PPO", again).model_config["fcnet_hiddens"] == [17]
    assert record.resolved_config(again) == resolved

CHECKS_WITHOUT_TORCH = """
import json, sys
from tune_runner.tuning.preflight import _check_space_corners
from tune_runner.spec.experiment import load_spec
from tune_runner.trainables.catalog import backend
checked = {}
for name in sys.argv[1:]:
    spec = load_spec(name)
    trainable = backend(spec.trainable)
    config = {**spec.fixed, **{p.name: p.example() for p in spec.space}, "env": spec.env, "env_config": spec.env_config}
    checked[name] = [_check_space_corners(spec, trainable), sorted(trainable.resolved_config(config))[:1]]
print(json.dumps([checked, "torch" in sys.modules]))
"""


@pytest.mark.e2e  # a fresh interpreter checking six spaces (3 s): with the e2e tests, units stay in-process
def test_the_checks_and_the_export_of_our_learners_configs_import_no_torch():
    """The driver checks every corner of a space before Ray starts and resolves the best config for best.yaml;
    for our learners both need only the config classes. Importing torch there cost `make search` 2-4 s of CPU
    before Ray's start (bench/search_e2e.py), on the 2 cores its trials train on."""
    spaces = ["ppo_small", "dqn_small", "ppo_pendulum", "ppo_minatar_breakout", "curriculum", "masked_choice"]
    ran = subprocess.run([sys.executable, "-c", CHECKS_WITHOUT_TORCH, *spaces], capture_output=True, text=True,
                         timeout=120)
    checked, torch_imported = json.loads(ran.stdout)
    assert all(problem is None and keys for problem, keys in checked.values()), checked
    assert set(checked) == set(spaces) and not torch_imported, ran.stderr


def test_rllibs_lambda_is_a_setting_only_of_a_learner_that_has_lambda():
    """`lambda` (RLlib's name of PPO's lambda_) was taken by dqn's checks too: a DQN space with it was refused by the
    config class as "unknown DQNConfig key 'lambda_'", and `lambda_` on dqn was told "did you mean 'lambda'?". A
    setting of our other learner is named as its (a space moved from ppo to dqn), not answered with dqn's 33 names."""
    assert backend("ppo").check_settings(["lambda", "lambda_"]) == []
    refused = dict(backend("dqn").check_settings(["lambda", "lambda_", "lambda_x"]))
    ppos = "a setting of ppo, not of dqn; drop it, or use trainable ppo"
    assert refused["lambda"] == refused["lambda_"] == ppos and refused["lambda_x"].startswith("not a setting of dqn")
    assert dict(backend("ppo").check_settings(["training_intensity"])) == {
        "training_intensity": "a setting of dqn, not of ppo; drop it, or use trainable dqn"}
