"""Each file tune-rl writes has one writer and one reader, and each reserved trial-config key is named once:
the saved spec, run options and finished mark (spec/saved.py), best.yaml (results/bundle.py), our checkpoints
(trainables/checkpoints.py), the reserved keys (spec/reserved.py), the file names (paths.py)."""

from __future__ import annotations

import ast
import errno
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import tune_runner
from tune_runner import paths
from tune_runner.results import export
from tune_runner.results.analysis import Best
from tune_runner.results.bundle import KEYS, Bundle
from tune_runner.spec import reserved, saved
from tune_runner.spec.experiment import load_spec
from tune_runner.trainables.catalog import backend

PACKAGE = Path(tune_runner.__file__).parent


def _trial_config(spec) -> dict:
    """A trial config as Tune hands it over: the spec's param_space with each searched value drawn."""
    config = spec.param_space()
    config.update({name: 0.001 for name in spec.searched})
    return config


def _searched_with_plugins_and_resources():
    spec = load_spec("ppo_small")
    return replace(spec, plugins=("/home/someone/envs/my_envs.py",),
                   fixed={**spec.fixed, "cpus_per_trial": 2, "gpus_per_trial": 0.5})


# ---- the reserved keys ----------------------------------------------------------------------------------


def test_an_exported_bundle_carries_no_plugin_path_bookkeeping_or_resources_under_config(tmp_path):
    spec = _searched_with_plugins_and_resources()
    config = {**_trial_config(spec), reserved.CANDIDATE_KEY: 1}
    best = Best(trial_id="t_1", config=config, value=1.0, metric=spec.metric, mode="max", scope="last",
                last_result={}, trial_path="/x")
    data = export.bundle(spec, best, record=backend(spec.trainable), experiment="e")
    path = data.write(tmp_path / "best.yaml")
    written = yaml.safe_load(path.read_text())
    assert "/home/someone" not in path.read_text()  # a machine's absolute paths do not travel with the bundle
    for section in ("config", "resolved"):
        left = [k for k in written[section] if k in ("env", "env_config", "cpus_per_trial", "gpus_per_trial")
                or k.startswith("tune_rl_")]
        assert left == [], (section, left)
    assert written["config"]["lr"] == 0.001
    assert export.load(path).param_space() == {"env": spec.env, "env_config": {}, **written["config"]}


def test_every_key_the_spec_adds_to_a_trial_config_is_reserved():
    spec = _searched_with_plugins_and_resources()
    added = set(spec.param_space()) - set(spec.fixed) - set(spec.searched)
    assert added and added <= set(reserved.RESERVED)


def test_each_readers_subset_is_built_from_the_one_list():
    from tune_runner.trainables import oracle, trial

    assert set(trial.TRIAL_KEYS) == set(reserved.RESERVED)  # the learner sees none of them
    assert set(trial.ENV_KEYS) | {"num_env_runners", "env_task_fn", reserved.MIN_TIME_KEY, *reserved.RESOURCE_KEYS} \
        == set(reserved.RESERVED)  # RLlib reads num_env_runners and min_time_s_per_iteration as its own
    assert all(key in reserved.RESERVED for key in reserved.NOT_EXPORTED + reserved.NOT_ORACLE + reserved.TOP_LEVEL)
    config = {"env": "CartPole-v1", "env_config": {}, "x": 0.3, "tune_rl_plugins": ["/p.py"], "cpus_per_trial": 1,
              "tune_rl_candidate": 0}
    assert oracle.hyperparameters(config) == {"x": 0.3}  # the oracle's distance and luck ignore a search's plug-ins


# Python names of ours that share a reserved key's name but are not trial-config keys: the API's keywords,
# argparse dests and RunOptions fields (--cpus-per-trial fills cpus_per_trial; the flag is not the key), the
# learner's config field seed_aggregate, and the class attribute an agent declares `seeds_per_trial = True`
# with. Each is counted: a new literal beside them is caught too.
NAMESAKES = {
    ("api/checks.py", "cpus_per_trial"): 1, ("api/checks.py", "gpus_per_trial"): 1,
    ("api/searching.py", "cpus_per_trial"): 1, ("api/searching.py", "gpus_per_trial"): 1,
    ("api/searching.py", "seeds_per_trial"): 1, ("api/searching.py", "seed_aggregate"): 1,
    ("api/searching.py", "configs_per_trial"): 1, ("cli/commands.py", "configs_per_trial"): 2,
    ("cli/commands.py", "cpus_per_trial"): 2, ("cli/commands.py", "gpus_per_trial"): 2,
    ("cli/commands.py", "seeds_per_trial"): 2, ("cli/commands.py", "seed_aggregate"): 2,
    ("cli/options.py", "cpus_per_trial"): 1, ("cli/options.py", "gpus_per_trial"): 1,
    ("spec/saved.py", "cpus_per_trial"): 1, ("spec/saved.py", "gpus_per_trial"): 1,
    ("trainables/agents.py", "seed_aggregate"): 1, ("trainables/agents.py", "seeds_per_trial"): 1,
    ("trainables/backends.py", "seed_aggregate"): 1, ("trainables/backends.py", "seeds_per_trial"): 1,
}
# "env" and "env_config" are Ray Tune's and RLlib's own names for these keys, and the spec's and the bundle's
# fields: written out everywhere, as everyone who reads a Tune config expects them.
SHARED = ("env", "env_config")


def reserved_literals(package: Path) -> Counter:
    """(module, value) of each string constant in the package, f-strings' parts included, that spells a
    reserved key (or the env_config./tune_rl_ prefixes) outside spec/reserved.py."""
    values = {key for key in reserved.RESERVED if key not in SHARED} | {reserved.PREFIX, reserved.BOOKKEEPING_PREFIX}
    found: Counter = Counter()
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module == "spec/reserved.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in values:
                found[module, node.value] += 1
    return found


def test_each_reserved_key_is_spelled_out_only_in_reserved_py():
    """A reserved key written as a literal elsewhere bypasses spec/reserved.py: renaming or dropping the key
    there would leave that reader behind. Every module takes the constant."""
    assert dict(reserved_literals(PACKAGE)) == NAMESAKES


def test_the_literal_check_catches_a_key_written_out(tmp_path):
    module = tmp_path / "pkg" / "trainables" / "own.py"
    module.parent.mkdir(parents=True)
    module.write_text('runners = config.get("num_env_runners", 0)\nkey = f"env_config.{name}"\nenv = config["env"]\n')
    assert reserved_literals(tmp_path / "pkg") == {("trainables/own.py", "num_env_runners"): 1,
                                                   ("trainables/own.py", "env_config."): 1}


# ---- best.yaml -------------------------------------------------------------------------------------------


def _bundle() -> Bundle:
    spec = load_spec("ppo_small")
    best = Best(trial_id="t_1", config=_trial_config(spec), value=480.0, metric=spec.metric, mode="max",
                scope="last", last_result={"episode_return_mean": 480.0, "env_steps": 100}, trial_path="/x")
    return export.bundle(spec, best, record=backend(spec.trainable), experiment="e")


def test_a_bundle_writes_the_yaml_it_always_wrote_and_reads_back_equal(tmp_path):
    bundle = _bundle()
    path = bundle.write(tmp_path / "best.yaml")
    assert bundle.keys == KEYS and list(bundle.as_dict()) == list(KEYS)
    as_before = yaml.safe_dump({k: getattr(bundle, k) for k in KEYS}, sort_keys=False, default_flow_style=False)
    assert path.read_text() == as_before  # the format on disk: every key, in this order, block style
    again = Bundle.read(path)
    assert again == bundle and again.path == path


def test_a_bundle_an_older_tune_rl_wrote_writes_back_as_it_was(tmp_path):
    text = "trainable: oracle\ntune_rl_format: 1\nenv: CartPole-v1\nconfig:\n  x: 0.5\nbudget:\n  env_steps: 1000\n"
    (tmp_path / "old.yaml").write_text(text)
    old = Bundle.read(tmp_path / "old.yaml")
    assert old.description is None and old.keys[:2] == ("trainable", "tune_rl_format")
    assert old.write(tmp_path / "again.yaml").read_text() == text


def test_a_full_disk_leaves_the_previous_bundle_whole(tmp_path, monkeypatch):
    path = _bundle().write(tmp_path / "best.yaml")
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="best-config bundle not written to .*No space left"):
        replace(_bundle(), description="another").write(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["best.yaml"]


class Read(Exception):
    """What a reader replaced by a spy raises: proof that a command went through it."""


def test_train_verify_and_evaluate_read_a_bundle_through_bundle_read(tmp_path, monkeypatch):
    from tune_runner.results import policy
    from tune_runner.tuning import verify

    path = _bundle().write(tmp_path / "best.yaml")
    calls = []

    def spy(cls, where, **kwargs):
        calls.append(where)
        raise Read

    monkeypatch.setattr(Bundle, "read", classmethod(spy))
    for reader in (export.load, verify.load, policy.load_policy):
        with pytest.raises(Read):
            reader(path)
    assert calls == [path] * 3  # verify reads it once (it read it twice before)


# ---- the saved spec, run options and finished mark ------------------------------------------------------


def test_the_saved_files_round_trip_and_the_logged_spec_is_the_folders(tmp_path):
    from tests.resume_helpers import options
    from tune_runner.tracking import parent

    spec, folder, opts = load_spec("oracle"), tmp_path / "results" / "exp", options(tmp_path)
    saved.save(folder, spec=spec, options=opts)
    assert saved.read_spec(folder) == spec and saved.saved_trainable(folder) == "oracle"
    assert saved.read_run(folder) == saved.run_fields(opts)
    assert saved.finished(folder) is None
    saved.mark_finished(folder, status="finished", counts={"done": 3})
    assert saved.finished(folder) == {"done": 3}

    logged = {}

    class FakeMlflow:
        def log_text(self, run_id: str, text: str, name: str) -> None:
            logged[name] = text

    parent.log_spec(FakeMlflow(), "parent", spec)
    assert logged == {paths.SPEC_FILE: (folder / paths.SPEC_FILE).read_text()}
    (tmp_path / "copy.yaml").write_text(logged[paths.SPEC_FILE])
    assert saved.read_logged_spec(tmp_path / "copy.yaml", where="x", fix="") == spec


def test_evaluate_reads_the_trainable_through_the_saved_spec_reader(tmp_path, monkeypatch):
    from tune_runner.results import policy

    seen = []
    monkeypatch.setattr(saved, "saved_trainable", lambda folder: seen.append(folder) or "ppo")
    assert policy._agent_name(tmp_path / "exp" / "trial" / "checkpoint_000001") == "ppo"
    assert seen == [tmp_path / "exp"]


# ---- checkpoints -----------------------------------------------------------------------------------------


def test_a_checkpoint_round_trips_and_evaluate_reads_it_through_the_one_reader(tmp_path, monkeypatch):
    from tune_runner.results import policy
    from tune_runner.trainables import checkpoints, own

    folder = tmp_path / "checkpoint_000001"
    folder.mkdir()
    checkpoints.write(folder, learner={"pi": {"w": [1.0]}}, runners=None)
    assert [p.name for p in folder.iterdir()] == [paths.CHECKPOINT_FILE] and checkpoints.holds_one(folder)
    assert own.read_checkpoint(folder) == {"learner": {"pi": {"w": [1.0]}}, "runners": None}
    assert checkpoints.learner_state(folder, fix="") == {"pi": {"w": [1.0]}}

    (tmp_path / "params.json").write_text('{"env": "CartPole-v1"}')
    monkeypatch.setattr(checkpoints, "learner_state", lambda *a, **k: (_ for _ in ()).throw(Read()))
    with pytest.raises(Read):
        policy.load_policy(folder)


# ---- the file names ----------------------------------------------------------------------------------------


def test_each_file_name_is_written_out_once_in_the_package():
    names = [paths.SPEC_FILE, paths.RUN_FILE, paths.FINISHED_MARK, paths.BUNDLE_FILE, paths.CHECKPOINT_FILE,
             paths.REEVALUATION_FILE]
    found = {name: [] for name in names}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in names:
            if re.search(rf"""["']{re.escape(name)}["']""", text):
                found[name].append(path.relative_to(PACKAGE).as_posix())
    assert found == {name: ["paths.py"] for name in names}
