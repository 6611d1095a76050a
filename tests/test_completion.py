"""Tab completion through its real entry point: bash sources `tune-rl completion bash` and calls its
completion function, which runs the console script with argcomplete's environment; the test reads
COMPREPLY, what bash would offer (fish: `complete -C`, where fish is installed). No helper of ours is
called directly, except to compare the RLlib algorithms read from Ray's source with RLlib's own list."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import run_entry_point

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(shutil.which("bash") is None or not (BIN / "tune-rl").exists(),
                                reason="needs bash and the tune-rl console script beside this python")


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    printed = subprocess.run([BIN / "tune-rl", "completion", "bash"], capture_output=True, text=True, check=True)
    path = tmp_path_factory.mktemp("completion") / "tune-rl.bash"
    path.write_text(printed.stdout)
    return path


def complete(script: Path, line: str, *, cwd: Path | None = None) -> list[str]:
    """What bash offers for `line` with the cursor at its end (COMPREPLY, trailing spaces dropped)."""
    driver = (f"source {shlex.quote(str(script))}\n"
              f"COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9\n"
              "_python_argcomplete tune-rl\n"
              "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert ran.returncode == 0, ran.stderr
    return [word.rstrip() for word in ran.stdout.splitlines() if word.strip()]


def experiments(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "tune_rl_spec.yaml").write_text("name: x\n")
    return root


def test_commands_and_flags(bash_script):
    commands = complete(bash_script, "tune-rl ")
    assert {"search", "spaces", "best", "train", "completion"} <= set(commands) and "--help" not in commands
    assert {"-h", "--help", "--version", "--traceback"} == set(complete(bash_script, "tune-rl -"))
    assert complete(bash_script, "tune-rl sch") == ["schedulers"]
    assert complete(bash_script, "tune-rl search --sch") == ["--scheduler"]
    assert complete(bash_script, "tune-rl completion z") == ["zsh"]


def test_space_scheduler_and_searcher_names(bash_script):
    assert complete(bash_script, "tune-rl search --space ppo") == ["ppo_minatar_breakout", "ppo_pendulum", "ppo_small"]
    assert complete(bash_script, "tune-rl search --space ppo_s") == ["ppo_small"]
    assert complete(bash_script, "tune-rl spaces show dq") == ["dqn_acrobot", "dqn_small"]
    assert complete(bash_script, "tune-rl spaces show sa") == ["sac_pendulum"]
    assert {"asha", "pbt", "pb2", "median"} <= set(complete(bash_script, "tune-rl search --scheduler "))
    assert complete(bash_script, "tune-rl search --searcher op") == ["optuna"]


def test_trainable_names_for_agent_name_and_set(bash_script):
    names = complete(bash_script, "tune-rl train --agent_name ")
    assert {"ppo", "dqn", "oracle", "rllib/PPO", "rllib/DQN", "rllib/SAC"} <= set(names)
    # "=" breaks words in bash: what it offers is the part after it.
    assert complete(bash_script, "tune-rl search --space ppo_small --set trainable=rllib/D") == \
        ["rllib/DQN", "rllib/DreamerV3"]


def test_set_offers_the_chosen_spaces_keys_with_its_backend(bash_script, tmp_path):
    keys = complete(bash_script, "tune-rl search --space ppo_small --set ")
    assert {"lr=", "lambda_=", "num_env_runners=", "budget=", "num_samples="} <= set(keys)
    assert "num_envs_per_env_runner=" in keys  # from backends.ppo, the space's trainable
    rllib = complete(bash_script, "tune-rl search --space ppo_small --set trainable=rllib/PPO --set ")
    assert "vf_loss_coeff=" in rllib and "vf_clip_param=" not in rllib  # backends.rllib/PPO instead
    (tmp_path / "mine.yaml").write_text("trainable: ppo\nenv: CartPole-v1\nbudget: {env_steps: 1000}\n"
                                        "env_config: {size: 3}\nfixed: {entropy_coeff: 0.01}\n"
                                        "space: {clip_param: {uniform: [0.1, 0.3]}}\n")
    mine = complete(bash_script, "tune-rl search --space mine.yaml --set ", cwd=tmp_path)
    assert {"entropy_coeff=", "clip_param=", "env_config.size="} <= set(mine) and "lr=" not in mine
    assert complete(bash_script, "tune-rl search --space ppo_small --set mo") == ["mode="]


def test_experiment_names_under_storage_or_the_default_results(bash_script, tmp_path, _isolated_home):
    storage = experiments(tmp_path / "runs", "ppo_small-20260101-120000", "dqn_small-20260101-130000")
    (storage / "not-an-experiment").mkdir()
    for command in ("best", "report"):
        offered = complete(bash_script, f"tune-rl {command} --storage {storage} ")
        assert sorted(offered) == ["dqn_small-20260101-130000", "ppo_small-20260101-120000"], command
    experiments(_isolated_home / "results", "oracle-20260102-090000")
    assert complete(bash_script, "tune-rl resume ") == ["oracle-20260102-090000"]
    assert complete(bash_script, "tune-rl search --resume or") == ["oracle-20260102-090000"]
    (storage / "ppo_small-20260101-120000" / "best.yaml").write_text("{}\n")
    bundle = str(storage / "ppo_small-20260101-120000" / "best.yaml")
    assert bundle in complete(bash_script, f"tune-rl verify --storage {storage} ", cwd=tmp_path)


def test_train_completes_the_chosen_agents_options(bash_script):
    assert complete(bash_script, "tune-rl train --agent_name dqn --dou") == ["--double_q"]
    assert complete(bash_script, "tune-rl train --clip") == ["--clip_param"]  # the default agent, ppo


@pytest.mark.parametrize("line", ["tune-rl ", "tune-rl search --space ppo_small --set ",
                                  "tune-rl train --agent_name ", "tune-rl train --agent_name dqn --"])
def test_a_completion_imports_nothing_heavy(line, tmp_path):
    answer = tmp_path / "answer"
    env = {"_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
    ran = run_entry_point([], tmp_path, env=env)
    assert ran["heavy"] == [] and ran["status"] == 0, ran
    assert answer.read_text().strip()


def test_scripts_for_each_shell():
    for shell, marker in (("bash", "complete -o nospace -o default -o bashdefault -F _python_argcomplete tune-rl"),
                          ("zsh", "#compdef tune-rl"), ("fish", "complete --command tune-rl")):
        printed = subprocess.run([BIN / "tune-rl", "completion", shell], capture_output=True, text=True)
        assert printed.returncode == 0 and marker in printed.stdout, (shell, printed.stderr)
    bad = subprocess.run([BIN / "tune-rl", "completion", "tcsh"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'tcsh'" in bad.stderr and len(bad.stderr.splitlines()) == 1


# zsh completes only in an interactive shell: this one runs in a pseudo-terminal (zpty), types the
# line and a Tab, then "; echo DONE" and Enter; what the terminal shows holds the completed line.
ZPTY = """
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PS1='> '; autoload -U compinit; compinit -u; source $1; bindkey '^I' complete-word"
zpty -w -n z "$2"$'\\t'
zpty -w -n z $'\\C-e; echo DONE\\n'
zpty -r z out '*echo DONE*'
print -r -- "$out"
zpty -d z
"""


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_through_the_script(tmp_path):
    script = subprocess.run([BIN / "tune-rl", "completion", "zsh"], capture_output=True, text=True).stdout
    (tmp_path / "tune-rl.zsh").write_text(script)
    (tmp_path / "zpty.zsh").write_text(ZPTY)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    shown = []
    for line in ("tune-rl search --space ppo_s", "tune-rl search --space ppo_small --set trainable=rllib/DQ"):
        ran = subprocess.run(["zsh", "-f", tmp_path / "zpty.zsh", tmp_path / "tune-rl.zsh", line],
                             capture_output=True, text=True, env=env, timeout=60)
        shown.append(re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\r", "", ran.stdout))
    assert "tune-rl search --space ppo_small" in shown[0], shown[0]
    assert "--set trainable=rllib/DQN" in shown[1], shown[1]


def test_the_rllib_names_read_from_rays_source_are_the_ones_rllib_registers():
    from tune_runner.cli.completion import rllib_algorithms
    from tune_runner.trainables.catalog import rllib_algorithms as registered

    assert rllib_algorithms() == registered() and "PPO" in registered()


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_through_the_script(tmp_path):
    script = subprocess.run([BIN / "tune-rl", "completion", "fish"], capture_output=True, text=True).stdout
    (tmp_path / "tune-rl.fish").write_text(script)
    probe = (f"source {tmp_path / 'tune-rl.fish'}; complete -C 'tune-rl search --space ppo_s'; "
             "complete -C 'tune-rl search --space ppo_small --set trainable=rllib/D'")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["fish", "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert ran.stdout.split() == ["ppo_small", "trainable=rllib/DQN", "trainable=rllib/DreamerV3"], ran.stderr
