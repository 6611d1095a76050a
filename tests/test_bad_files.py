"""Every file tune-rl reads, damaged every way a file can be, given to the command a user would run on it.

Each file kind has a good file (checked to load below), the commands that read it, and the cases of
tests/bad_inputs/files/expected.yaml: generated here from the good file (missing, a folder, unreadable,
not UTF-8, a list for a mapping, cut short, empty) or written by hand in tests/bad_inputs/files/<kind>/
(not parsable, wrong types). Every refusal: exit 2, one line on stderr naming the file and holding the
expected fragment, no traceback, nothing on stdout, no Ray, no file written, no MLflow run.
"""

from __future__ import annotations

import fnmatch
import os
import pickle
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import HERE
from tests.test_bad_inputs import assert_one_line_error

FILES = HERE / "bad_inputs" / "files"
EXPECTED: dict[str, dict[str, object]] = yaml.safe_load((FILES / "expected.yaml").read_text())

GOOD_SPACE = "trainable: oracle\nenv: CartPole-v1\nbudget: {env_steps: 1000}\nspace:\n  x: {uniform: [0.0, 1.0]}\n"
GOOD_PRESET = "description: a small ASHA\ntype: asha\nsettings: {grace_period: 1, max_t: 10}\n"
GOOD_BUNDLE = ("tune_rl_format: 1\ntrainable: oracle\nenv: CartPole-v1\nconfig: {x: 0.5, steps_per_iteration: 100}\n"
               "budget: {env_steps: 1000}\nseeds: {reevaluation: [1000, 1001]}\nevaluation: {ci: [1.0, 2.0]}\n")
GOOD_PLUGIN = "SETTINGS = dict(size=3, speed=1.5, name='grid', wrap=True)  # a plug-in may hold only settings\n"
GOOD_TASK = "def task(result, env, ctx):\n    return min(result.get('env_steps', 0) // 1000, 3)\n"
GOOD_PARAMS = '{"env": "CartPole-v1", "env_config": {}, "lr": 0.001}\n'
GOOD_STATE = '{"trial_data": [], "runner_data": {}}'
GOOD_REEVALUATION = '{"metric": "episode_return_mean", "clear_winner": false, "stop_at": null, "ranking": []}'
STATE_FILE = "experiment_state-2026-01-01_00-00-00.json"
GOOD_FINISHED = '{"status": "finished", "counts": {"done": 2}}'


@dataclass(frozen=True)
class Layout:
    """Where a kind's file sits for one test: the file, the folder the commands' paths start from."""

    target: Path
    checkpoint: Path  # for the kinds evaluate reads; else unused
    home: Path


@dataclass(frozen=True)
class Kind:
    """A kind of file tune-rl reads: where it goes, its good content, the commands that read it, how to load it."""

    name: str
    suffix: str  # of its hand-written fixtures
    place: Callable[[Path, Path], Layout]
    good: Callable[[Layout], bytes]
    commands: tuple[Callable[[Layout], list[str]], ...]
    load: Callable[[Layout], object]
    binary: bool = False


def _alone(filename: str) -> Callable[[Path, Path], Layout]:
    def place(base: Path, home: Path) -> Layout:
        return Layout(base / filename, base, home)
    return place


def _in_search(filename: str) -> Callable[[Path, Path], Layout]:
    """A file of an interrupted search's folder (exp under TUNE_RL_HOME/results), the others intact; Tune's
    experiment state as Tune leaves a search that ran no trial."""
    def place(base: Path, home: Path) -> Layout:
        from tests.resume_helpers import options, saved_search

        folder = saved_search(options(home, storage=home / "results"))
        (folder / STATE_FILE).write_text(GOOD_STATE)
        return Layout(folder / filename, folder, home)
    return place


def _in_trial(filename: str, *, rllib: bool = False) -> Callable[[Path, Path], Layout]:
    """A file of a trial folder holding checkpoint_000001 (ours: learner.pkl; RLlib's: its module folder)."""
    def place(base: Path, home: Path) -> Layout:
        checkpoint = base / "trial" / "checkpoint_000001"
        if rllib:
            (checkpoint / "learner_group" / "learner" / "rl_module" / "default_policy").mkdir(parents=True)
        else:
            checkpoint.mkdir(parents=True)
            (checkpoint / "learner.pkl").write_bytes(_pickle({"learner": {"pi": {}}, "runners": None}))
            (checkpoint.parent / "params.json").write_text(GOOD_PARAMS)
        return Layout((checkpoint if filename.endswith(".pkl") else checkpoint.parent) / filename, checkpoint, home)
    return place


def _task_file(base: Path, home: Path) -> Layout:
    """task.py, named by a space file's env_task_fn (a curriculum env, so that the function is what is wrong)."""
    target = base / "task.py"
    space = base / "space.yaml"
    space.write_text(f"trainable: ppo\nenv: curriculum_corridor\nbudget: {{env_steps: 1000}}\n"
                     f"fixed: {{env_task_fn: '{target}:task'}}\n")
    return Layout(target, space, home)


def _pickle(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _text(text: str) -> Callable[[Layout], bytes]:
    return lambda layout: text.encode()


def _current(layout: Layout) -> bytes:
    return layout.target.read_bytes()  # what the helper that laid out the folder wrote: the good file


def _load_checkpoint(layout: Layout) -> object:
    from tune_runner import files
    from tune_runner.trainables.own import read_checkpoint

    return files.load_checkpoint(layout.checkpoint, read_checkpoint, fix="")


def _load_rllib(layout: Layout) -> object:
    from tune_runner.results.policy import _rllib_env

    return _rllib_env(layout.checkpoint)


def _load_search(what: str) -> Callable[[Layout], object]:
    def load(layout: Layout) -> object:
        from tune_runner.tuning import resume

        return getattr(resume, what)(layout.checkpoint)
    return load


KINDS = {kind.name: kind for kind in (
    Kind("space", ".yaml", _alone("space.yaml"), _text(GOOD_SPACE),
         (lambda lay: ["search", "--space", str(lay.target)],),
         lambda lay: __import__("tune_runner.spec.experiment", fromlist=["x"]).load_spec(str(lay.target))),
    Kind("scheduler", ".yaml", _alone("preset.yaml"), _text(GOOD_PRESET),
         (lambda lay: ["search", "--space", "oracle", "--scheduler", str(lay.target)],),
         lambda lay: __import__("tune_runner.tuning.schedulers", fromlist=["x"]).load_preset(lay.target)),
    Kind("bundle", ".yaml", _alone("best.yaml"), _text(GOOD_BUNDLE),
         (lambda lay: ["verify", str(lay.target)], lambda lay: ["train", "--config", str(lay.target)],
          lambda lay: ["evaluate", str(lay.target)]),
         lambda lay: __import__("tune_runner.tuning.verify", fromlist=["x"]).load(lay.target)),
    Kind("plugin", ".py", _alone("my_envs.py"), _text(GOOD_PLUGIN),
         (lambda lay: ["search", "--space", "oracle", "--plugins", str(lay.target)],),
         lambda lay: __import__("tune_runner.plugins", fromlist=["x"]).load_plugins([lay.target], shipped=False)),
    Kind("task_fn", ".py", _task_file, _text(GOOD_TASK), (lambda lay: ["search", "--space", str(lay.checkpoint)],),
         lambda lay: __import__("tune_runner.trainables.curriculum", fromlist=["x"]).resolve_task_fn(
             f"{lay.target}:task")),
    Kind("saved_spec", ".yaml", _in_search("tune_rl_spec.yaml"), _current,
         (lambda lay: ["resume", "exp"], lambda lay: ["best", "exp"], lambda lay: ["report", "exp"]),
         _load_search("read_spec")),
    Kind("run_options", ".yaml", _in_search("tune_rl_run.yaml"), _current,
         (lambda lay: ["resume", "exp"], lambda lay: ["report", "exp"]), _load_search("read_run")),
    Kind("finished", ".json", _in_search("tune_rl_finished.json"), _text(GOOD_FINISHED),
         (lambda lay: ["resume", "exp"],), _load_search("finished")),
    Kind("experiment_state", ".json", _in_search(STATE_FILE), _text(GOOD_STATE),
         (lambda lay: ["best", "exp"], lambda lay: ["report", "exp"]),
         lambda lay: __import__("tune_runner.results.analysis", fromlist=["x"]).load(lay.checkpoint)),
    Kind("reevaluation", ".json", _in_search("reevaluation.json"), _text(GOOD_REEVALUATION),
         (lambda lay: ["report", "exp"], lambda lay: ["best", "exp"]),
         lambda lay: __import__("tune_runner.files", fromlist=["x"]).read_json_mapping(lay.target, expected="")),
    Kind("params", ".json", _in_trial("params.json"), _text(GOOD_PARAMS),
         (lambda lay: ["evaluate", str(lay.checkpoint)], lambda lay: ["evaluate", str(lay.checkpoint.parent)]),
         lambda lay: __import__("tune_runner.results.policy", fromlist=["x"])._trial_config(lay.checkpoint)),
    Kind("checkpoint", ".pkl", _in_trial("learner.pkl"), _current,
         (lambda lay: ["evaluate", str(lay.checkpoint)], lambda lay: ["evaluate", str(lay.checkpoint.parent)]),
         _load_checkpoint, binary=True),
    Kind("rllib_config", ".pkl", _in_trial("class_and_ctor_args.pkl", rllib=True),
         lambda lay: _pickle({"ctor_args_and_kwargs": [[{"env": "CartPole-v1"}]]}),
         (lambda lay: ["evaluate", str(lay.checkpoint)],), _load_rllib, binary=True),
)}


def _truncated(good: bytes, *, binary: bool) -> bytes:
    """The good file cut off as a full disk or a killed writer leaves it: a pickle at half its bytes, a text file
    in the middle of its middle line (so the cut falls at the same key whatever the paths inside are)."""
    if binary:
        return good[: len(good) // 2]
    lines = good.splitlines(keepends=True)
    middle = len(lines) // 2
    return b"".join(lines[:middle]) + lines[middle][: len(lines[middle].rstrip()) // 2]


def damage(case: str, kind: Kind, layout: Layout, good: bytes) -> None:
    """Put the case's file where the kind's file goes (or nothing there, or a folder)."""
    target = layout.target
    target.unlink(missing_ok=True)
    fixture = FILES / kind.name / f"{case}{kind.suffix}"
    if fixture.is_file():
        target.write_bytes(fixture.read_bytes())
    elif case == "missing":
        pass
    elif case == "directory":
        target.mkdir()
    elif case == "fifo":
        os.mkfifo(target)  # reading would wait for a writer forever
    elif case == "unreadable_eio":
        target.symlink_to("/proc/self/mem")  # open succeeds, read fails with EIO: an honest OSError, even as root
    else:
        target.write_bytes({
            "not_utf8": lambda: good + b"\xe9",
            "wrong_shape": lambda: _pickle([1, 2]) if kind.binary else
            (b'["a", "b"]' if kind.suffix == ".json" else b"- a\n- b\n"),
            "wrong_types": lambda: b"task = 5\n" if kind.name == "task_fn" else
            _pickle({"learner": "weights"} if kind.name == "checkpoint" else
                                           {"ctor_args_and_kwargs": [[{"env": 5}]]}),
            "wrong_types_weights": lambda: _pickle({"learner": {"pi": {"0.weight": 5}}, "runners": None}),
            "truncated": lambda: _truncated(good, binary=kind.binary),
            "empty": lambda: b"",
        }[case]())


def _cases() -> list:
    found = []
    for name, cases in EXPECTED.items():
        kind = KINDS[name]
        for index, command in enumerate(kind.commands):
            verb = command(Layout(Path("F"), Path("C"), Path("H")))[0]
            for case, fragment in cases.items():
                if isinstance(fragment, dict):
                    fragment = fragment[verb]
                marks = [pytest.mark.timeout(60)] if case == "fifo" else []  # a regression here hangs on the read
                found.append(pytest.param(name, index, case, fragment, id=f"{name}-{verb}{index or ''}-{case}",
                                          marks=marks))
    return found


@pytest.mark.parametrize("name, command, case, fragment", _cases())
def test_a_damaged_file_is_one_line_naming_it(name, command, case, fragment, cli, untouched, _isolated_home,
                                             tmp_path, monkeypatch):
    from tests.resume_helpers import record_runs

    kind = KINDS[name]
    # A resume that got past its checks would call runner.run (which starts Ray: forbidden here anyway);
    # a search goes through runner.run's own checks (plug-ins, scheduler presets) before Ray starts.
    started = record_runs(monkeypatch) if kind.place.__qualname__.startswith("_in_search") else []
    layout = _laid_out(kind, tmp_path, _isolated_home)
    good = kind.good(layout)
    damage(case, kind, layout, good)
    untouched.mark()
    argv = kind.commands[command](layout)
    result = cli(*argv)
    target = layout.target
    line = result.err.strip()
    patterns = re.findall(r"[\w.-]*\*[\w.*-]*", line)  # a file named by its pattern: experiment_state-*.json
    named = target.name in line or any(fnmatch.fnmatch(target.name, p) for p in patterns)
    assert str(target) in line or (str(target.parent) in line and named), line
    assert_one_line_error(result, str(fragment).replace("{offset}", str(len(good))))
    assert started == []
    untouched.check(argv)
    if kind.place.__qualname__.startswith("_in_search"):
        untouched.check(["--mlflow-uri", f"sqlite:///{_isolated_home / 'other' / 'm.db'}"])  # the saved store


def _laid_out(kind: Kind, tmp_path: Path, home: Path) -> Layout:
    base = tmp_path / "files"
    base.mkdir()
    layout = kind.place(base, home)
    layout.target.parent.mkdir(parents=True, exist_ok=True)
    layout.target.write_bytes(kind.good(layout))
    return layout


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_good_file_of_each_kind_loads(name, tmp_path, _isolated_home):
    """What the cases above damage: undamaged, each kind's loader takes it (so a refusal is the damage's)."""
    kind = KINDS[name]
    layout = _laid_out(kind, tmp_path, _isolated_home)
    assert kind.load(layout) is not None


def test_every_kind_has_its_cases():
    """The table covers each kind with every case that can happen to it (see expected.yaml's header)."""
    all_cases = {"missing", "directory", "fifo", "unreadable_eio", "not_utf8", "not_parsable", "wrong_shape",
                 "wrong_types", "truncated", "empty"}
    left_out = {"run_options": {"missing"}, "finished": {"missing"},
                "reevaluation": {"missing", "wrong_types"}, "plugin": {"wrong_shape", "wrong_types", "empty"},
                "checkpoint": {"not_utf8"}, "task_fn": {"wrong_shape"}, "rllib_config": {"not_utf8"}}
    assert set(EXPECTED) == set(KINDS)
    for name, cases in EXPECTED.items():
        assert set(cases) & all_cases == all_cases - left_out.get(name, set()), name
        for extra in set(cases) - all_cases:  # more of a case, e.g. wrong_types_mode: a fixture of its own
            assert extra.startswith(tuple(all_cases)), (name, extra)
    for fixture in FILES.glob("*/*"):
        assert fixture.parent.name in KINDS and fixture.stem in EXPECTED[fixture.parent.name], fixture


def test_json_says_where_a_file_ends_early(tmp_path):
    from tune_runner import files
    from tune_runner.errors import UserError

    path = tmp_path / "params.json"
    path.write_text('{"env": "CartPole-v1", "lr": ')
    with pytest.raises(UserError, match=r"params.json: invalid JSON at line 1, column 30: Expecting value "
                                        r"\(the file ends before it closes: cut short\?\); expected a trial config$"):
        files.read_json(path, expected="a trial config")
    path.write_text('{"env": "CartPole-v1",, "lr": 1}')
    with pytest.raises(UserError, match=r"line 1, column 23: Expecting property name enclosed in double quotes; "):
        files.read_json(path, expected="a trial config")


def test_a_python_file_in_its_declared_encoding_loads(tmp_path):
    from tune_runner import files

    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nNAME = '\xe9t\xe9'\n")
    assert "NAME = 'été'" in files.read_source(path)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="drops root with setpriv; as a user, chmod 000 alone would do (not this test)")
@pytest.mark.parametrize("argv, expected", [
    (["search", "--space"], "cannot read (Permission denied); expected a mapping of settings at the top level"),
    (["verify"], "cannot read (Permission denied); expected a best-config bundle"),
])
def test_a_file_without_read_permission_as_user_nobody_via_setpriv(argv, expected, untouched):
    """chmod 000 for real: root reads through permission bits, so the command runs as nobody (setpriv)."""
    import subprocess
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="tune-rl-locked-"))
    try:
        folder.chmod(0o755)  # nobody may look in, not write
        locked = folder / "locked.yaml"
        locked.write_text(GOOD_BUNDLE if argv[0] == "verify" else GOOD_SPACE)
        locked.chmod(0o000)
        before = sorted(folder.rglob("*"))
        env = {**os.environ, "PYTHONPATH": str(HERE.parent), "HOME": str(folder),
               "TUNE_RL_HOME": str(folder / "home")}
        run = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
                              "-m", "tune_runner", *argv, str(locked)],
                             cwd=folder, env=env, capture_output=True, text=True, timeout=120)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1 and run.stdout == "", (run.returncode, run.stderr)
        assert f"{locked}: {expected}" in lines[0], lines[0]
        assert sorted(folder.rglob("*")) == before  # no home, results folder or store made
        untouched.check()
    finally:
        shutil.rmtree(folder)


def test_yaml_with_a_control_character_and_json_with_a_byte_order_mark(tmp_path):
    from tune_runner import files
    from tune_runner.errors import UserError

    path = tmp_path / "space.yaml"
    path.write_bytes(b"trainable: ppo\nenv: Cart\x00Pole-v1\n")
    with pytest.raises(UserError, match=r"space.yaml: invalid YAML: character #x0000 at character 24 is not "
                                        r"allowed; expected a space$"):
        files.read_yaml(path, expected="a space")
    path = tmp_path / "params.json"
    path.write_bytes(b'\xef\xbb\xbf{"env": "CartPole-v1"}')  # as some editors save it
    assert files.read_json_mapping(path, expected="a trial config") == {"env": "CartPole-v1"}
