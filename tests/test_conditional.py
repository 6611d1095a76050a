"""Conditional parameters (`when:`): parsed, checked, decided on fixed values, and honoured by every searcher.

The searchers run here on their own, without Ray: each is asked for configs as Tune asks it. The bad
conditions (one line each) are in tests/bad_inputs/when_*.yaml.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from tune_runner.spec.experiment import Component, build_spec, load_spec
from tune_runner.spec.search_space import inactive, parse_space, prune

SPACE = {
    "lr": {"loguniform": [1.0e-4, 1.0e-2]},
    "use_target_network": {"choice": [True, False]},
    "freq": {"randint": [1, 100], "when": {"use_target_network": True}},
    "net": {"choice": [[64, 64], [32]]},
    "width": {"uniform": [0.0, 1.0], "when": {"net": [64, 64]}},  # a list value of a list-valued choice
    "kind": {"choice": ["a", "b", "c"]},
    "tau": {"quniform": [0.1, 0.9, 0.1], "when": {"kind": ["a", "b"]}},  # any of two values
    "decay": {"uniform": [0.5, 1.0], "when": {"tau_kind": "soft"}},
    "tau_kind": {"choice": ["soft", "hard"], "when": {"kind": "a"}},  # a chain: decay <- tau_kind <- kind
}


def expected_keys(config: dict) -> set[str]:
    """The parameters a config must hold, by the conditions written above."""
    keys = {"lr", "use_target_network", "net", "kind"}
    keys |= {"freq"} if config["use_target_network"] is True else set()
    keys |= {"width"} if config["net"] == [64, 64] else set()
    keys |= {"tau"} if config["kind"] in ("a", "b") else set()
    if config["kind"] == "a":
        keys.add("tau_kind")
        keys |= {"decay"} if config["tau_kind"] == "soft" else set()
    return keys


def params(space: dict = SPACE, **fixed):
    return parse_space(space, where="f.yaml", fixed=fixed)


def test_parents_come_first_and_pruning_follows_chains():
    names = [p.name for p in params()]
    assert names.index("tau_kind") < names.index("decay") and names.index("kind") < names.index("tau_kind")
    config = {"lr": 1e-3, "use_target_network": False, "freq": 5, "net": [32], "width": 0.5, "kind": "b",
              "tau": 0.3, "tau_kind": "soft", "decay": 0.9}
    assert inactive(config, params()) == ["freq", "width", "tau_kind", "decay"]  # decay: its parent is gone
    assert set(prune(config, params())) == expected_keys(config)


def test_a_condition_on_a_fixed_value_is_decided_and_set_pins_a_parent(tmp_path):
    without_parent = {k: v for k, v in SPACE.items() if k != "use_target_network"}
    kept = {p.name: p for p in params(without_parent, use_target_network=True)}
    assert kept["freq"].when == ()  # the condition holds: searched unconditionally
    assert "freq" not in {p.name for p in params(without_parent, use_target_network=False)}  # never searched
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                                    "space": SPACE}))
    pinned = load_spec(str(path), overrides=["kind=c"])
    assert {p.name for p in pinned.space} == {"lr", "use_target_network", "freq", "net", "width"}
    assert pinned.fixed == {"kind": "c"}


def test_the_saved_spec_keeps_its_conditions():
    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "space": SPACE}, name="s", source="s.yaml")
    saved = yaml.safe_load(yaml.safe_dump(spec.as_dict(), sort_keys=False))  # as spec/saved.py writes it
    again = build_spec({k: saved[k] for k in ("trainable", "env", "budget", "space")}, name="s", source="s.yaml")
    assert again.space == spec.space and spec.conditional
    assert dict((p.name, p.describe()) for p in spec.space)["tau"] == "quniform(0.1, 0.9, 0.1) when kind in ['a', 'b']"
    assert spec.param_space(searched=False).keys() == {"env", "env_config"}


def draw(name: str, count: int = 24) -> list[dict]:
    """`count` configs from searcher `name`, as Tune asks for them (a result after each)."""
    from tune_runner.searchers import build_searcher

    space = params()
    searcher = build_searcher(Component(name, {"seed": 3}), params=space, where="f.yaml", budget=9000,
                              num_samples=count)
    if name in ("random", "grid"):
        from ray.tune.experiment import Experiment

        searcher.add_configurations([Experiment("x", run=lambda config: None, num_samples=count,
                                                config={p.name: p.to_tune() for p in space})])
        return [searcher.next_trial().config for _ in range(count)]
    configs = []
    for i in range(count):
        configs.append(searcher.suggest(f"t{i}"))
        searcher.on_trial_complete(f"t{i}", {"episode_return_mean": float(i), "training_iteration": 1})
    return configs


@pytest.mark.parametrize("name", ["random", "optuna", "hyperopt", "bohb", "smac", "nevergrad"])
def test_each_searcher_gives_exactly_the_active_parameters(name, forbid_ray):
    configs = draw(name)
    for config in configs:
        config.pop("tune_rl_budget", None)  # smac's own per-trial budget (tests/test_smac_search.py)
        assert set(config) == expected_keys(config), config
        assert isinstance(config["net"], list) and config["use_target_network"] in (True, False)
    # both sides of every condition were tried: the conditions are not trivially always on or off
    for key in ("freq", "width", "tau", "decay"):
        assert 0 < sum(key in c for c in configs) < len(configs), key


def test_optuna_is_never_asked_for_an_inactive_parameter():
    """Define-by-run: the study's own trials hold only what was suggested, so TPE models each branch apart."""
    from tune_runner.searchers import build_searcher

    searcher = build_searcher(Component("optuna", {"seed": 3}), params=params(), where="f.yaml")
    for i in range(8):
        searcher.suggest(f"t{i}")
        searcher.on_trial_complete(f"t{i}", {"episode_return_mean": float(i)})
    for trial in searcher._ot_study.trials:
        assert set(trial.params) == expected_keys({**trial.params, "net": list(trial.params["net"])})


def test_hyperopt_space_nests_each_child_under_its_parents_value():
    from tune_runner.searchers.conditional import BRANCH, flat

    nested = {f"{BRANCH}lr": 0.1, f"{BRANCH}use_target_network": {"use_target_network": True, f"{BRANCH}freq": 7},
              f"{BRANCH}kind": {"kind": "a", f"{BRANCH}tau_kind": {"tau_kind": "hard"}}}
    assert flat(nested) == {"lr": 0.1, "use_target_network": True, "freq": 7, "kind": "a", "tau_kind": "hard"}


def test_the_corner_check_sees_each_parameter_active_and_no_inactive_one():
    from tune_runner.tuning.preflight import _check_space_corners

    seen = []

    class Backend:
        @staticmethod
        def check_config(config):
            seen.append(config)

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "space": SPACE}, name="s", source="s.yaml")
    assert _check_space_corners(spec, Backend) is None
    for config in seen:
        assert set(config) - {"env", "env_config"} == expected_keys(config), config
    for key in ("freq", "width", "tau", "decay"):
        assert any(key in c for c in seen), key


def test_a_config_read_back_from_mlflow_params_leaves_out_what_the_trial_did_not_have():
    from tune_runner.results.tracked import config_of

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "space": SPACE}, name="s", source="s.yaml")
    logged = {"lr": "0.001", "use_target_network": "False", "net.0": "32", "kind": "c"}
    config = config_of(spec, {**logged, "net": "[32]"}, where="run")
    assert {k: config[k] for k in expected_keys(config)} == {"lr": 0.001, "use_target_network": False,
                                                              "net": [32], "kind": "c"}
    assert set(config) - {"env", "env_config"} == expected_keys(config)


def test_the_reevaluation_gives_each_candidate_only_the_parameters_it_had(forbid_ray):
    from tune_runner.results.robust import Candidate
    from tune_runner.tuning.reevaluate import CANDIDATE_KEY, trial_configs

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "space": SPACE}, name="s", source="s.yaml")
    with_freq = {"lr": 1e-3, "use_target_network": True, "freq": 9, "net": [32], "kind": "c"}
    without = {"lr": 2e-3, "use_target_network": False, "net": [64, 64], "width": 0.5, "kind": "a", "tau": 0.2,
               "tau_kind": "hard"}
    picks = [Candidate("t_1", with_freq, 1.0), Candidate("t_2", without, 0.5)]
    configs = trial_configs(spec, picks, seeds=2, first_seed=1000, batched=False)
    assert sorted((c[CANDIDATE_KEY], c["seed"]) for c in configs) == [(0, 1000), (0, 1001), (1, 1000), (1, 1001)]
    for config in configs:
        pick = picks[config[CANDIDATE_KEY]].config
        assert {k: config[k] for k in expected_keys(config)} == pick and set(pick) == expected_keys(config)
        assert not set(config) - set(pick) - {"env", "env_config", "seed", CANDIDATE_KEY}, config


def test_the_readmes_example_parses_and_its_chain_holds():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("**Conditional parameters.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    space = params(yaml.safe_load(block)["space"])
    config = {"use_target_network": False, "target_network_update_freq": 5, "target_kind": "soft", "tau": 0.01}
    assert prune(config, space) == {"use_target_network": False}  # tau goes with its parent target_kind
    assert prune({**config, "use_target_network": True}, space) == {**config, "use_target_network": True}


def test_importances_use_every_trial_for_the_parameters_all_of_them_have():
    """fANOVA over a conditional space: Optuna scores the parameters every trial holds, from all trials (a
    trial without an inactive parameter is not dropped, nor given a None value)."""
    from types import SimpleNamespace

    from tune_runner.results.report import importances

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "space": {"x": {"uniform": [0.0, 1.0]}, "on": {"choice": [True, False]},
                                 "y": {"uniform": [0.0, 1.0], "when": {"on": True}}}}, name="s", source="s.yaml")
    rng = np.random.default_rng(0)
    trials = []
    for i in range(30):
        config = {"x": float(rng.random()), "on": bool(i % 2)}
        if config["on"]:
            config["y"] = float(rng.random())
        trials.append(SimpleNamespace(config=config, last_result={"episode_return_mean": 100 * config["x"]}))
    scores = importances(SimpleNamespace(trials=trials), spec)
    assert set(scores) >= {"x", "on"} and "y" not in scores
    assert max(scores, key=scores.get) == "x"  # the return is x's alone


@pytest.mark.parametrize("name", ["random", "optuna", "hyperopt", "bohb", "smac", "nevergrad"])
def test_a_conditional_searcher_saves_and_restores_as_tune_resumes_it(name, tmp_path, forbid_ray):
    """Tune saves the search algorithm with the experiment and a resume restores it: the restored searcher
    goes on with the active parameters only."""
    from ray.tune.search import SearchGenerator

    from tune_runner.searchers import build_searcher

    searcher = build_searcher(Component(name, {"seed": 3}), params=params(), where="f.yaml", budget=9000)
    if name == "random":
        import pickle

        assert pickle.loads(pickle.dumps(searcher)).params == searcher.params
        return
    generator = SearchGenerator(searcher)
    for i in range(3):
        searcher.suggest(f"t{i}")
    generator.save_to_dir(str(tmp_path), session_str="s")
    restored = SearchGenerator(build_searcher(Component(name, {"seed": 3}), params=params(), where="f.yaml",
                                              budget=9000))
    restored.restore_from_dir(str(tmp_path))
    for i in range(3, 9):
        config = restored.searcher.suggest(f"t{i}")
        config.pop("tune_rl_budget", None)
        assert set(config) == expected_keys(config), config


# As runner.run does it: the driver's logs quieted, then the searcher built (prepare), then Tune hands it the
# space, where OptunaSearch makes its study; a conditional space makes it in the constructor.
QUIET_SEARCHER = """
from tune_runner.cluster.session import quiet_logs
from tune_runner.searchers import build_searcher
from tune_runner.spec.experiment import Component, load_spec
from tune_runner.spec.search_space import parse_space

quiet_logs(verbose=False)
spec = load_spec("oracle")
searcher = build_searcher(Component("optuna", {"seed": 1}), params=spec.space, where="oracle.yaml")
searcher.set_search_properties(spec.metric, spec.mode, spec.param_space())
searcher.suggest("t0")
conditional = parse_space({"a": {"choice": [1, 2]}, "b": {"uniform": [0, 1], "when": {"a": 1}}}, where="f.yaml")
build_searcher(Component("optuna", {"seed": 1}), params=conditional, where="f.yaml").suggest("t0")
print("built")
"""


def test_optuna_says_nothing_into_the_live_view():
    """Optuna's first import sets its own logger to INFO, and each study it makes printed "[I ...] A new study
    created in memory" in the middle of the live view. A fresh interpreter: one that imported Optuna before
    would not show it."""
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, "-c", QUIET_SEARCHER], capture_output=True, text=True, timeout=120)
    assert ran.stdout == "built\n" and ran.stderr == "", ran.stderr
