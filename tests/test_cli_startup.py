"""The import budget of the command line: building the parser, every `--help`, `spaces` and `schedulers`
import none of the heavy libraries. Each case runs the console script's entry point in a fresh interpreter
and reads its sys.modules, so a module that a previous test imported cannot hide a regression.

The commands are found by walking the parser, not by listing files: a command added later, or the
modules moved into packages, are checked the same way. Times are measured in bench/cli_startup.py.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import run_entry_point
from tune_runner.cli.main import build_parser


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand of the parser, e.g. ("spaces", "show")."""
    found = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += command_paths(sub, (*prefix, name))
    return found


HELP = [[*path, "--help"] for path in command_paths(build_parser())]
LIGHT = [[], ["--version"], ["spaces", "list"], ["spaces", "show", "ppo_small"], ["schedulers", "list"],
         ["train", "--agent_name", "ppo", "--help"], ["train", "--agent_name", "dqn", "--help"],
         ["train", "--agent_name", "rllib/PPO", "--help"], ["train", "--model_name", "ppo", "--help"]]


def test_the_walk_finds_every_command():
    paths = command_paths(build_parser())
    assert {("search",), ("train",), ("spaces", "list"), ("spaces", "show"), ("jobs", "logs"),
            ("completion",)} <= set(paths)
    assert len(paths) >= 19


@pytest.mark.parametrize("argv", HELP + LIGHT, ids=lambda argv: " ".join(argv) or "(no command)")
def test_no_heavy_import(argv, tmp_path):
    ran = run_entry_point(argv, tmp_path)
    assert ran["heavy"] == [], f"tune-rl {' '.join(argv)} imported {ran['heavy']}"
    assert ran["status"] in (0, 2, None) and ran["out"], ran["err"]  # 2: no command prints the help


def test_spaces_and_schedulers_still_answer(tmp_path):
    assert "ppo_small" in run_entry_point(["spaces", "list"], tmp_path)["out"]
    assert run_entry_point(["spaces", "show", "ppo_small"], tmp_path)["out"].startswith("# ")
    assert "asha" in run_entry_point(["schedulers", "list"], tmp_path)["out"]


def test_train_help_lists_the_default_agents_options_without_torch(tmp_path):
    ran = run_entry_point(["train", "--help"], tmp_path)
    assert ran["heavy"] == [] and "options of agent ppo" in ran["out"] and "--clip_param" in ran["out"]
    dqn = run_entry_point(["train", "--agent_name", "dqn", "--help"], tmp_path)
    assert "options of agent dqn" in dqn["out"] and "--target_network_update_freq" in dqn["out"]
    assert "--clip_param" not in dqn["out"]


AGENT_PLUGIN = '''
from tune_runner.plugins import register_agent


@register_agent("tiny")
class Tiny:
    @staticmethod
    def add_args(parser):
        parser.add_argument("--tiny_rate", type=float, default=0.5, help="how tiny")

    def __init__(self, args): ...
    def train_iteration(self): ...
    def compute_actions(self, obs, explore=False): ...
'''

MODEL_PLUGIN = '''
import torch
from tune_runner.algos.networks import Model
from tune_runner.plugins import register_model


@register_model("wide")
class Wide(Model):
    @staticmethod
    def add_args(parser):
        parser.add_argument("--width", type=int, default=128, help="units per layer")
'''

ENV_PLUGIN = '''
import gymnasium as gym
from tune_runner.plugins import register_env


@register_env("plain_corridor")
class Corridor(gym.Env):
    def __init__(self, env_config=None): ...
'''


def test_a_user_agents_help_imports_only_what_its_file_imports(tmp_path):
    """The agent's file is read (its options are flags), the shipped envs are not, and nothing goes to Ray."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "tiny_agent.py").write_text(AGENT_PLUGIN)
    (tmp_path / "envs" / "corridor.py").write_text(ENV_PLUGIN)  # imports gymnasium, registers an env
    ran = run_entry_point(["train", "--agent_name", "tiny", "--help"], tmp_path, cwd=tmp_path)
    assert "options of agent tiny" in ran["out"] and "--tiny_rate" in ran["out"], ran["err"]
    assert ran["heavy"] == ["gymnasium"]  # the env file's own import; no Ray (registered when a run starts)


def test_agent_and_model_options_are_both_listed(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "wide.py").write_text(MODEL_PLUGIN)
    ran = run_entry_point(["train", "--agent_name", "dqn", "--model_name", "wide", "--help"], tmp_path, cwd=tmp_path)
    assert "options of agent dqn" in ran["out"] and "--double_q" in ran["out"], ran["err"]
    assert "options of model wide (model_config)" in ran["out"] and "--width" in ran["out"]
    assert "ray" not in ran["heavy"]  # torch yes: the model's file imports it


def test_best_on_a_finished_experiment_imports_no_ray_torch_or_pandas(tmp_path):
    """`best` reads Tune's files itself (tune_runner.results.trials). The experiment is a copy of a finished
    search's folder written by hand: Tune's experiment state and one result.json per trial."""
    import json

    exp = tmp_path / "results" / "done"
    trials = []
    for i, returns in enumerate(([10.0, 30.0, 20.0], [5.0, 25.0, 40.0])):
        trial_id = f"abc_0000{i}"
        folder = exp / f"trial_{i}"
        folder.mkdir(parents=True)
        rows = [{"episode_return_mean": r, "env_steps": 1000 * (k + 1), "training_iteration": k + 1}
                for k, r in enumerate(returns)]
        (folder / "result.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
        summary = {"max": max(returns), "min": min(returns), "avg": sum(returns) / 3, "last": returns[-1],
                   "last-5-avg": sum(returns) / 3, "last-10-avg": sum(returns) / 3}
        trials.append([json.dumps({"trial_id": trial_id, "status": "TERMINATED", "relative_logdir": folder.name,
                                   "config": {"lr": 0.1 * (i + 1), "env": "CartPole-v1"}}),
                       json.dumps({"last_result": rows[-1], "metric_analysis": {"episode_return_mean": summary}})])
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps({"trial_data": trials}))
    import yaml

    from tune_runner.paths import SPEC_FILE
    from tune_runner.spec.experiment import load_spec

    (exp / SPEC_FILE).write_text(yaml.safe_dump(load_spec("oracle").as_dict(), sort_keys=False))  # as search saves it
    env = {"TUNE_RL_HOME": str(tmp_path)}
    ran = run_entry_point(["best", "done", "--scope", "max"], tmp_path, env=env)
    assert ran["status"] in (0, None) and "abc_00001" in ran["out"] and "40" in ran["out"], ran["err"]
    assert ran["heavy"] == [], f"tune-rl best imported {ran['heavy']}"


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_reader_that_stops_early_ends_the_command_quietly(buffered, tmp_path):
    """`tune-rl completion zsh | head -2` once ended in "unexpected error: BrokenPipeError". Here head has read
    two lines and exited before tune-rl writes (through a FIFO, so that the order is certain); tune-rl then says
    nothing and ends 141, as a command that SIGPIPE ends. Buffered, the write fails in the last flush at exit."""
    tune_rl = Path(sys.executable).with_name("tune-rl")
    script = f"""
        mkfifo pipe
        head -2 < pipe > head.out & reader=$!
        exec 3> pipe
        printf 'one\\ntwo\\n' >&3
        wait $reader
        {shlex.quote(str(tune_rl))} completion zsh >&3
        echo "status $?"
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | ({} if buffered else
                                                                           {"PYTHONUNBUFFERED": "1"})
    ran = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert (tmp_path / "head.out").read_text() == "one\ntwo\n"
    assert ran.stderr == "" and ran.stdout == "status 141\n", (ran.stdout, ran.stderr)
