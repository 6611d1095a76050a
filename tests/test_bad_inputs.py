"""Every bad input a user can type: one line naming file/key/flag, value and fix; exit 2; nothing written.

The YAML corpus lives in tests/bad_inputs/; each file's first line says what the
error must contain.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import HERE
from tune_runner.errors import UserError

CORPUS = sorted((HERE / "bad_inputs").glob("*.yaml"))


def expected(path: Path) -> str:
    first = path.read_bytes().split(b"\n")[0].decode()  # the file itself may be bad UTF-8 past this line
    assert first.startswith("# expect: "), f"{path.name} lacks its '# expect:' line"
    return first.removeprefix("# expect: ")


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.status == 2, (result.status, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    assert result.out == "", result.out  # nothing began: no header, no progress
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_bad_space_file(path, cli, untouched):
    result = cli("search", "--space", str(path))
    assert_one_line_error(result, str(path), expected(path))
    untouched.check()


@pytest.mark.parametrize("argv, fragments", [
    (["search", "--space", "ppo_smal"], ["--space: unknown space 'ppo_smal'; did you mean 'ppo_small'?"]),
    (["search", "--space", "oracle", "--plugins", "nope.py"], ["--plugins nope.py: no such file or folder"]),
    (["search", "--space", "oracle", "--no-plugins", "--plugins", "nope.py"],
     ["--no-plugins: --plugins nope.py asks to import a plug-in, --no-plugins to import none; drop one of them"]),
    (["train", "--env_name", "CartPole-v1", "--agent_name", "ppoo"],
     ["--agent_name ppoo: unknown trainable 'ppoo'; did you mean 'ppo'?"]),
    (["train", "--env_name", "CartPol-v1"], ["--env_name CartPol-v1: unknown environment 'CartPol-v1'; did you mean"]),
    (["train", "--env_name", "CartPole-v1", "--num_workers", "-1"], ["--num_workers -1: must be 0 or more"]),
    (["train", "--env_name", "CartPole-v1", "--batch_size", "0"], ["--batch_size 0: must be a positive integer"]),
    (["train", "--env_name", "CartPole-v1", "--lr", "abc"], ["PPOConfig.lr must be a number, got lr='abc'"]),
    (["train", "--env_name", "CartPole-v1", "--model_name", "wide"], ["--model_name wide: unknown model 'wide'"]),
    (["train", "--env_name", "CartPole-v1", "--set", "seeds_per_trial=3", "--population", "{gamma: [0.9, 0.99]}"],
     ["PPOConfig.population.gamma must list one value per seed (3, num_seeds), got gamma=[0.9, 0.99]"]),
    (["train", "--env_name", "CartPole-v1", "--set", "seeds_per_trial=2", "--population", "{gamma: [0.9, 2]}"],
     ["PPOConfig.population, seed 1: PPOConfig.gamma must be in (0, 1], got gamma=2"]),
    (["train", "--env_name", "CartPole-v1", "--set", "trainable=dqn"],
     ["--set trainable=dqn: a run's trainable is its --agent_name; give --agent_name dqn"]),
    (["train", "--env_name", "CartPole-v1", "--set", "num_samples=3"],
     ["--set num_samples=3: num_samples is a setting of a search (tune-rl search), not of one training run; drop it"]),
    (["train", "--env_name", "CartPole-v1", "--agent_name", "dqn", "--clip_param", "0.2"],
     ["unrecognized arguments: --clip_param 0.2"]),
    (["search", "--space", "missing/space.yaml"], ["--space missing/space.yaml: no such file"]),
    (["search", "--space", str(HERE / "bad_inputs")],
     [f"--space {HERE / 'bad_inputs'}: a folder, expected a YAML file"]),
    (["search", "--space", "ppo_small", "--set", "env_config={a: 1, a: 2}"],
     ["line 1: duplicate key 'a' (first at line 1); keep one of them"]),
    (["search", "--space", "ppo_small", "--set", "lr"], ["--set lr: expected KEY=VALUE"]),
    (["search", "--space", "ppo_small", "--seeds-per-trial", "0"],
     ["--seeds-per-trial 0: must be a positive integer"]),
    (["search", "--space", "ppo_small", "--seed-aggregate", "mean2"],
     ["--seed-aggregate: unknown seed aggregate 'mean2'; did you mean 'mean'?"]),
    (["search", "--space", "dqn_small", "--set", "trainable=rllib/DQN", "--seeds-per-trial", "2"],
     ["seeds_per_trial: 2: rllib/DQN trains one seed per trial"]),
    (["search", "--space", "ppo_small", "--set", "seeds_per_trial=x"],
     ["seeds_per_trial: expected a positive integer, got 'x'"]),
    (["search", "--space", "ppo_small", "--set", "budget=abc"],
     ["budget.env_steps: expected a positive whole number of env steps, got 'abc'"]),
    (["search", "--space", "ppo_small", "--set", "lrr=0.1"],
     ["fixed.lrr: not a setting of ppo; did you mean 'lr'?"]),
    (["search", "--space", "ppo_small", "--num-samples", "0"], ["--num-samples 0: must be a positive integer"]),
    (["search", "--space", "ppo_small", "--num-sample", "3"],
     ["unrecognized arguments: --num-sample 3; did you mean --num-samples?"]),
    (["search", "--space", "ppo_small", "--num-samples", "x"], ["--num-samples: invalid int value: 'x'"]),
    # An unknown flag is judged against the command's own flags: a name it begins, the same name with - for _, a
    # close spelling, or, for a space's key, --set; never a far guess from another command (--env: --open once)
    (["train", "--env", "Pendulum-v1"],
     ["unrecognized arguments: --env Pendulum-v1; did you mean --env_name or --env_backend? (see tune-rl train "
      "--help)"]),
    (["search", "--space", "ppo_small", "--mlflow_uri", "x"], ["--mlflow_uri x; did you mean --mlflow-uri?"]),
    # Box-action settings on another action space would change nothing: ppo_pendulum's gSDE and log_std_init
    (["search", "--space", "ppo_pendulum", "--set", "env=CartPole-v1"],
     ["ppo_pendulum.yaml: space.log_std_init, fixed.use_sde: True, fixed.sde_sample_freq: 4: act on Box actions "
      "only, and CartPole-v1's actions are Discrete(2), so they would change nothing; drop them from the space "
      "(tune-rl spaces show ppo_pendulum > my_space.yaml gives a copy to edit), or choose an env with Box actions"]),
    (["search", "--space", "ppo_small", "--set", "log_std_init=-1"], ["fixed.log_std_init: -1: act on Box actions"]),
    # RLlib's models read observations as they come and take floats: MinAtar's bool images failed every trial
    (["search", "--space", "ppo_minatar_breakout", "--set", "trainable=rllib/PPO"],
     ["ppo_minatar_breakout.yaml: rllib/PPO feeds observations to RLlib's models as they come, and those take "
      "floats; MinAtar/Breakout-v1 has bool observations of shape (10, 10, 4); use ppo or dqn (ours read them as "
      "floats), or register a wrapped env that gives float32 ones (gymnasium.wrappers.DtypeObservation)"]),
    (["search", "--space", "ppo_small", "--trainable", "dqn"],
     ["--trainable dqn; a setting goes with --set trainable=VALUE (see tune-rl search --help)"]),
    (["search", "--space", "ppo_small", "--lr", "0.1"], ["--lr 0.1; a setting goes with --set lr=VALUE"]),
    (["search", "--space", "ppo_small", "--scheduler", "hyperbandd"], ["unknown scheduler 'hyperbandd'"]),
    (["search", "--space", "ppo_small", "--searcher", "optuan"], ["did you mean 'optuna'?"]),
    (["search", "--space", "ppo_small", "--mlflow-uri", "http://127.0.0.1:9"],
     ["--mlflow-uri http://127.0.0.1:9: MLflow server unreachable"]),
    (["search", "--space", "ppo_small", "--mlflow-uri", "mlflow.db"], ["--mlflow-uri mlflow.db: not a tracking URI"]),
    (["search"], ["the following arguments are required: --space"]),
    (["serch"], ["invalid choice: 'serch'"]),
    (["best", "no-such-experiment"], ["experiment 'no-such-experiment'"]),
    (["best", "x", "--scope", "avg-last-x"], ["--scope avg-last-x: expected last | max | avg-last-N"]),
    # best from MLflow (tests/test_best_mlflow.py): the store is checked before it is read, and never created
    (["best", "runs:/abc", "--mlflow-uri", "http://127.0.0.1:9"],
     ["--mlflow-uri http://127.0.0.1:9: MLflow server unreachable", "start it (mlflow server) or fix the address"]),
    (["best", "runs:/abc", "--mlflow-uri", "sqlite:///store/mlflow.db"],
     ["--mlflow-uri sqlite:///store/mlflow.db: no such file; give the store the search logged to"]),
    (["best", "runs:/abc"], ["/mlflow.db: no such file; give the store the search logged to"]),  # the default one
    (["best", "x", "--mlflow-uri", "file:///nonexistent/mlruns"],
     ["--mlflow-uri file:///nonexistent/mlruns: no such folder; give the store the search logged to"]),
    (["best", "runs:/abc", "--mlflow-uri", f"sqlite:///{HERE / 'bad_inputs' / 'bad_mode.yaml'}"],
     ["bad_mode.yaml is not an SQLite database (file is not a database); give the store the search logged to"]),
    (["best", "runs:/abc/best.yaml"],
     ["experiment runs:/abc/best.yaml: expected runs:/<parent run id> (a run, not an artifact in it), e.g. runs:/abc"]),
    (["best", "runs:/abc", "--reevaluate", "2"],
     ["--reevaluate 2: re-trains from the search's results folder and writes its verdict there; MLflow holds "
      "neither; run tune-rl best <the search's folder> --reevaluate 2"]),
    (["best", "runs:/abc", "--storage", "/tmp"],
     ["--storage /tmp: names where results folders are; runs:/abc is read from MLflow", "drop --storage"]),
    (["train", "--config", "missing.yaml"], ["missing.yaml: cannot read"]),
    # --storage: refused before Ray starts, with the OS's reason (a real write is tried: root passes permission bits)
    (["search", "--space", "oracle", "--storage", "/etc/hostname/results"],
     ["--storage /etc/hostname/results: cannot create or write a folder there (/etc/hostname: Not a directory); "
      "choose a folder you can write to"]),
    (["search", "--space", "oracle", "--storage", "/etc/hostname"], ["--storage /etc/hostname: cannot create or "
                                                                     "write a folder there (/etc/hostname: Not a"]),
    (["search", "--space", "oracle", "--storage", "/proc/tune-rl"],
     ["--storage /proc/tune-rl: cannot create or write a folder there (/proc: No such file or directory)"]),
    (["train", "--env_name", "CartPole-v1", "--storage", "/proc/tune-rl"],
     ["--storage /proc/tune-rl: cannot create or write a folder there"]),
    (["search", "--space", "oracle", "--mlflow-uri", "sqlite:///store/mlflow.db", "--storage", "/proc/tune-rl"],
     ["--storage /proc/tune-rl: cannot create or write"]),  # and ./store, where the store would go, is not made
    (["search", "--space", "oracle", "--address", "127.0.0.1:9"],
     ["--address 127.0.0.1:9: nothing answers at 127.0.0.1:9"]),  # before the header: a refusal prints nothing else
    # --name: one folder name under --storage; experiment names that other commands read stay inside it too
    (["search", "--space", "oracle", "--name", "../../x"],
     ["--name ../../x: expected one folder name (not . or .., without '/', '\\' or control characters, at most "
      "255 bytes), e.g. cartpole-ppo"]),
    (["search", "--space", "oracle", "--name", "/abs/path"], ["--name /abs/path: expected one folder name"]),
    (["search", "--space", "oracle", "--name", "a/b"], ["--name a/b: expected one folder name"]),
    (["search", "--space", "oracle", "--name", "a\\b"], ["--name a\\b: expected one folder name"]),
    (["search", "--space", "oracle", "--name", ".."], ["--name ..: expected one folder name"]),
    (["search", "--space", "oracle", "--name", ""], ["--name '': expected one folder name"]),
    (["search", "--space", "oracle", "--name", "a\nb"], ["--name 'a\\nb': expected one folder name"]),
    (["search", "--space", "oracle", "--name", "x" * 256], ["expected one folder name"]),
    (["train", "--env_name", "CartPole-v1", "--name", "../x"], ["--name ../x: expected one folder name"]),
    (["submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--name", "/tmp/x"],
     ["--name /tmp/x: expected one folder name"]),
    (["best", "../../x"], ["experiment '../../x': no such folder; give an experiment's folder, or its name under "]),
    (["report", "../x"], ["experiment '../x': no such folder; give an experiment's folder, or its name under"]),
    (["resume", "a/b"], ["experiment 'a/b': no such folder; give an experiment's folder, or its name under"]),
    (["resume", "../x", "--storage", "file:///nonexistent/results"], ["experiment ../x: expected one folder name"]),
    (["search", "--space", "oracle", "--max-failures", "-1"], ["--max-failures -1: must be 0 or more"]),
    (["search", "--space", "oracle", "--gpu", "first"], ['--gpu first: expected GPU indices like "0" or "0,1"']),
    (["search", "--space", "oracle", "--gpus-per-trial", "-0.5"], ["--gpus-per-trial -0.5: must be 0 or more"]),
    (["search", "--space", "oracle", "--reevaluate", "0"], ["--reevaluate 0: must be a positive integer"]),
    (["search", "--space", "oracle", "--set", "reevaluate=maybe"], ["reevaluate: expected false, true or"]),
    (["resume", "never-ran"], ["experiment 'never-ran'"]),
    (["search", "--resume", "never-ran"], ["experiment 'never-ran'"]),
    (["verify", "missing.yaml"], ["missing.yaml: cannot read"]),
    # a file that is not one: refused before the read (a device or a pipe may never end); tests/test_bad_files.py
    (["verify", "/dev/zero"], ["/dev/zero: not a regular file (a character device); expected a best-config bundle"]),
    (["search", "--space", "/dev/null"], ["/dev/null: not a regular file (a character device); expected a mapping"]),
    (["evaluate", "/dev/null"], ["/dev/null: not a regular file (a character device); expected a best-config"]),
    (["train", "--config", "/etc"], ["/etc: cannot read (Is a directory); expected a best-config bundle"]),
    (["search", "--space", "oracle", "--plugins", "/dev/null"],
     ["--plugins /dev/null: not a Python file; give a .py file or a folder of them"]),
    (["report", "no-such-experiment"], ["experiment 'no-such-experiment'"]),
    (["best", "x", "--reevaluate", "-2"], ["--reevaluate -2: must be a positive integer"]),
    (["best", "x", "--reevaluate", "2", "--seeds", "0"], ["--seeds 0: must be a positive integer"]),
    (["best", "x", "--reevaluate", "2", "--num-cpus", "0"], ["--num-cpus 0: must be a positive integer"]),
    (["spaces", "show", "dqn_smal"], ["did you mean 'dqn_small'?"]),
    (["search", "--space", "oracle", "--mlflow-uri", "ftp://host/mlflow"],
     ["--mlflow-uri ftp://host/mlflow: unknown scheme 'ftp'; use sqlite:///"]),
    # database and file stores: connected (or tried) before launch, the password masked
    (["search", "--space", "oracle", "--mlflow-uri", "postgresql://tune:s3cret@127.0.0.1:9/mlflow"],
     ["--mlflow-uri postgresql://tune:***@127.0.0.1:9/mlflow: nothing answers at 127.0.0.1:9 (Connection refused); "
      "start the database server or fix the host and port"]),
    (["search", "--space", "oracle", "--mlflow-uri", "mysql://tune:s3cret@db.invalid/mlflow"],
     ["--mlflow-uri mysql://tune:***@db.invalid/mlflow: "]),
    (["search", "--space", "oracle", "--mlflow-uri", "postgresql+nosuchdriver://db/mlflow"],
     ["--mlflow-uri postgresql+nosuchdriver://db/mlflow: not a database URI SQLAlchemy reads (Can't load plugin",
      "write postgresql://user:password@host:port/database"]),
    # a typo in a path makes no folders at the root: tune-rl makes at most the last folder of a path it is given
    (["search", "--space", "oracle", "--mlflow-uri", "sqlite:////nonexistent/dir/mlflow.db"],
     ["--mlflow-uri sqlite:////nonexistent/dir/mlflow.db: /nonexistent does not exist, and tune-rl makes only the "
      "last folder of a path; fix the path, or make /nonexistent first"]),
    (["search", "--space", "oracle", "--storage", "/nonexistent/dir/results"],
     ["--storage /nonexistent/dir/results: /nonexistent/dir does not exist, and tune-rl makes only the last"]),
    (["search", "--space", "oracle", "--mlflow-uri", "sqlite:////etc/hostname/mlflow.db"],
     ["--mlflow-uri sqlite:////etc/hostname/mlflow.db: cannot write the store's folder (/etc/hostname: Not a "
      "directory); choose a folder you can write to"]),
    (["search", "--space", "oracle", "--mlflow-uri", f"sqlite:///{HERE / 'bad_inputs'}"],
     [f"cannot write {HERE / 'bad_inputs'} (Is a directory); choose a file you can write to"]),
    (["search", "--space", "oracle", "--mlflow-uri", f"sqlite:///{HERE / 'bad_inputs' / 'bad_mode.yaml'}"],
     [f"{HERE / 'bad_inputs' / 'bad_mode.yaml'} is not an SQLite database (file is not a database); point it at"]),
    (["search", "--space", "oracle", "--mlflow-uri", "file:///proc/mlruns"],
     ["--mlflow-uri file:///proc/mlruns: cannot write the store's folder (/proc: No such file or"]),
    (["search", "--space", "oracle", "--register-model", "policy"],
     ["--register-model policy: the policy of trainable oracle is not exported as a model (only ppo, dqn, sac)"]),
    (["search", "--space", "ppo_small", "--register-model", "a/b"], ["--register-model 'a/b': a model name without"]),
    (["dashboard", "--mlflow-uri", "ftp://host/mlflow"], ["--mlflow-uri ftp://host/mlflow: unknown scheme 'ftp'"]),
    (["dashboard", "--mlflow-uri", "http://127.0.0.1:9"],
     ["--mlflow-uri http://127.0.0.1:9: already a tracking server with its own UI; open it in a browser"]),
    (["dashboard", "--port", "70000"], ["--port 70000: must be between 1 and 65535"]),
    (["dashboard", "--host", "0.0.0.0", "--allowed-hosts", "*"],
     ["--allowed-hosts '*': list the names clients use"]),
    (["search", "--space", "oracle", "--storage", "ftp://host/results"],
     ["--storage ftp://host/results: unknown scheme 'ftp'; use a folder path or a URI with one of s3://"]),
    (["best", "x", "--storage", "s3://bucket/results"],
     ["--storage s3://bucket/results: tune-rl best reads an experiment folder on this machine; copy the experiment"]),
    (["resume", "x", "--storage", "file:///nonexistent/results"],
     ["--storage file:///nonexistent/results: no x/tune_rl_spec.yaml there nor in ", "check the name and --storage"]),
    (["resume", "x", "--max-failures", "3"],
     ["unrecognized arguments: --max-failures 3; --max-failures is not a flag of this command"]),
    (["search", "--resume", "x", "--space", "oracle"],
     ["--space: a resumed search keeps the space and options it was started with", "run: tune-rl resume x"]),
    (["report", "x", "--storage", "s3://bucket/results"], ["tune-rl report reads an experiment folder on this"]),
    (["submit", "--space", "oracle"], ["--mlflow-uri: required by submit", "--mlflow-uri http://mlflow:5000"]),
    (["submit", "--space", "oracle", "--mlflow-uri", "sqlite:////tmp/m.db"],
     ["--mlflow-uri sqlite:////tmp/m.db: a file on this machine", "or add --shared-fs"]),
    (["submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--storage", "results"],
     ["--storage results: a relative path would be relative to the job's temporary folder on the cluster"]),
    (["submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--address", "ray://127.0.0.1:10001"],
     ["--address ray://127.0.0.1:10001: jobs go to the Ray dashboard's HTTP address, e.g. http://127.0.0.1:8265"]),
    (["submit", "--space", "oracle", "--num-cpus", "2"], ["--num-cpus: sizes a local Ray; a submitted search runs"]),
    (["submit", "--space", "ppo_smal", "--mlflow-uri", "http://mlflow:5000"], ["did you mean 'ppo_small'?"]),
    (["submit", "--space", "oracle", "--mlflow-uri", "http://mlflow:5000", "--num-samples", "0"],
     ["--num-samples 0: must be a positive integer"]),
    (["submit", "--mlflow-uri", "http://mlflow:5000"], ["submit: the following arguments are required: --space"]),
    (["jobs", "logs"], ["the following arguments are required: ID"]),
    (["jobs", "lst"], ["invalid choice: 'lst'"]),
    (["evaluate"], ["the following arguments are required: path"]),
    (["evaluate", "missing/checkpoint_000001"],
     ["missing/checkpoint_000001: no such file or folder; expected a checkpoint folder (learner.pkl"]),
    (["evaluate", str(HERE / "bad_inputs")], [f"{HERE / 'bad_inputs'}: not a policy; expected a checkpoint folder"]),
    (["evaluate", str(HERE / "bad_inputs" / "bad_mode.yaml")], ["bad_mode.yaml: not a best-config bundle"]),
    (["evaluate", "ckpt", "--episodes", "0"], ["--episodes 0: must be a positive integer"]),
    (["evaluate", "ckpt", "--seed", "-1"], ["--seed -1: must be 0 or more"]),
    (["evaluate", "ckpt", "--video", "out.mp4", "--render", "human"],
     ["--video out.mp4: writes rgb_array frames, not --render human; drop --render human"]),
    (["evaluate", "ckpt", "--render", "rgb_array"], ["--render rgb_array: the frames go nowhere; add --video"]),
    (["evaluate", "ckpt", "--epsilon", "1.5"], ["--epsilon 1.5: the share of random actions, from 0 (greedy, the "
                                                "default) to 1"]),
    (["evaluate", "ckpt", "--epsilon", "nan"], ["--epsilon nan: the share of random actions"]),
    (["evaluate", "ckpt", "--render", "ascii"], ["--render ascii: expected one of rgb_array, human"]),
    (["evaluate", "ckpt", "--render", "rgb_array", "--video", "/no/such/folder/out.mp4"],
     ["--video /no/such/folder/out.mp4: "]),
])
def test_bad_flags(argv, fragments, cli, untouched):
    result = cli(*argv)
    assert_one_line_error(result, *fragments)
    untouched.check(argv)


@pytest.mark.parametrize("argv", [
    ["search", "--space", "oracle", "--mlflow-uri", "sqlite:///{typo}/mlflow.db"],
    ["search", "--space", "oracle", "--mlflow-uri", "file://{typo}"],
    ["search", "--space", "oracle", "--storage", "{typo}"],
    ["train", "--env_name", "CartPole-v1", "--storage", "{typo}"],
    ["verify", "{bundle}", "--storage", "{typo}"],
    ["best", "{exp}", "--export", "{typo}/best.yaml"],
], ids=["sqlite", "file-store", "storage", "train-storage", "verify-storage", "export"])
def test_a_path_whose_parent_is_missing_is_refused_and_nothing_made(argv, cli, untouched, tmp_path):
    """Every path a user gives goes through one rule (paths.writable_folder): tune-rl makes at most its last
    folder; a missing parent is a typo, refused in one line with the flag, the value and the fix."""
    import yaml

    from tests.mlflow_helpers import hand_spec, write_search_folder
    from tests.test_robust import _bundle, _sure_verdict

    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "best.yaml").write_text(yaml.safe_dump(_bundle(tmp_path / "bundle", _sure_verdict())))
    write_search_folder(tmp_path / "exp", hand_spec())
    untouched.mark()
    typo = tmp_path / "typo" / "dir"
    argv = [word.format(typo=typo, bundle=tmp_path / "bundle" / "best.yaml", exp=tmp_path / "exp") for word in argv]
    result = cli(*argv)
    flag = argv[-2]
    assert_one_line_error(result, f"{flag} {argv[-1]}: {tmp_path / 'typo'} does not exist, and tune-rl makes only the "
                                  f"last folder of a path; fix the path, or make {tmp_path / 'typo'} first")
    untouched.check(argv)


@pytest.mark.parametrize("argv", [["search", "--space", "oracle"], ["search", "--space", "oracle", "--storage", "r"],
                                  ["train", "--env_name", "CartPole-v1"], ["dashboard"]])
def test_a_tune_rl_home_that_is_a_file_is_named_as_the_variable(argv, cli, untouched, tmp_path, monkeypatch):
    """A default derived from an environment variable names the variable, not a flag the user never gave (it
    blamed --mlflow-uri)."""
    home = tmp_path / "home-file"
    home.write_text("not a folder\n")
    monkeypatch.setenv("TUNE_RL_HOME", str(home))
    untouched.mark()
    result = cli(*argv)
    assert_one_line_error(result, f"TUNE_RL_HOME={home}: cannot create or write a folder there ({home}: Not a "
                                  f"directory); point TUNE_RL_HOME at a folder you can write to, or unset it")
    assert "--mlflow-uri" not in result.err and "--storage" not in result.err
    untouched.check(argv)


def test_a_tune_rl_home_under_a_missing_folder_is_named_as_the_variable(cli, untouched, tmp_path, monkeypatch):
    home = tmp_path / "typo" / "tune-rl"
    monkeypatch.setenv("TUNE_RL_HOME", str(home))
    result = cli("search", "--space", "oracle")
    assert_one_line_error(result, f"TUNE_RL_HOME={home}: {tmp_path / 'typo'} does not exist, and tune-rl makes only "
                                  f"the last folder of a path; fix the path, or make {tmp_path / 'typo'} first")
    untouched.check()


def test_an_address_where_nothing_listens_is_refused_and_one_that_answers_passes():
    """The check a search with --address makes before ray.init (which would retry for minutes);
    tests/test_cluster_e2e.py runs it through a fresh driver."""
    import socket

    from tune_runner.cluster.session import check_address

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_address(f"127.0.0.1:{port}")
        check_address(f"ray://127.0.0.1:{port}")
    with pytest.raises(UserError, match=rf"^--address 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} "
                                        r"\(Connection refused\); check the address"):
        check_address(f"127.0.0.1:{port}")
    with pytest.raises(UserError, match=rf"^--address ray://127.0.0.1:{port}: nothing answers"):
        check_address(f"ray://127.0.0.1:{port}")
    for left_to_ray in ("auto", "http://127.0.0.1:8265", "no-port"):
        check_address(left_to_ray)  # ray.init finds or judges these itself


def test_verify_refuses_a_storage_it_cannot_write_before_ray(cli, untouched, tmp_path):
    import yaml

    from tests.test_robust import _bundle, _sure_verdict

    bundle = tmp_path / "bundle" / "best.yaml"
    bundle.parent.mkdir()
    bundle.write_text(yaml.safe_dump(_bundle(bundle.parent, _sure_verdict())))
    untouched.mark()
    result = cli("verify", str(bundle), "--storage", "/proc/tune-rl")
    assert_one_line_error(result, "--storage /proc/tune-rl: cannot create or write a folder there (/proc: ")
    untouched.check()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits: nothing to refuse as root")
def test_a_storage_without_write_permission_is_refused(cli, untouched, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    untouched.mark()
    result = cli("search", "--space", "oracle", "--storage", str(locked / "results"))
    assert_one_line_error(result, f"--storage {locked / 'results'}: cannot create or write a folder there "
                                  f"({locked}: Permission denied)")
    untouched.check()


@pytest.fixture(scope="module")
def postgres():
    from tests.mlflow_helpers import Postgres

    try:
        cluster = Postgres().start()
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        pytest.fail(f"PostgreSQL could not be started for the database-store tests: {exc}")
    yield cluster
    cluster.stop()


@pytest.mark.e2e  # a real PostgreSQL server: not for the quick unit run
@pytest.mark.parametrize("wrong, fragment", [
    ("password", 'password authentication failed for user "tune"'),
    ("database", 'database "nowhere" does not exist'),
    ("user", 'password authentication failed for user "nobody"'),
])
def test_a_database_store_that_refuses_us_is_named_before_launch(postgres, wrong, fragment, cli, untouched):
    from tune_runner.tracking.uri import check_uri, redacted

    assert check_uri(postgres.uri) is None  # the right URI connects
    uri = {"password": postgres.uri.replace(postgres.password, "not-the-password"),
           "database": postgres.uri.replace("/mlflow", "/nowhere"),
           "user": postgres.uri.replace("tune:", "nobody:")}[wrong]
    result = cli("search", "--space", "oracle", "--mlflow-uri", uri)
    assert_one_line_error(result, f"--mlflow-uri {redacted(uri)}: cannot connect to the database (", fragment,
                          "); check the user, the password and the database name")
    assert postgres.password not in result.err and "not-the-password" not in result.err
    untouched.check(["--mlflow-uri", postgres.uri])


@pytest.mark.e2e  # a real PostgreSQL server: not for the quick unit run
def test_a_refusal_after_the_database_check_leaves_no_run_in_it(postgres, cli, untouched):
    argv = ["search", "--space", "oracle", "--mlflow-uri", postgres.uri, "--storage", "/proc/tune-rl"]
    result = cli(*argv)
    assert_one_line_error(result, "--storage /proc/tune-rl: cannot create or write a folder there")
    untouched.check(argv)  # counts the runs in PostgreSQL itself


def test_space_file_is_not_an_export(cli, untouched):
    from tune_runner.spec.experiment import shipped_spaces

    result = cli("train", "--config", str(shipped_spaces()["ppo_small"]))
    assert_one_line_error(result, "not a tune-rl best-config export")
    untouched.check()


def test_traceback_flag_shows_the_stack(cli):
    from tune_runner.errors import UserError

    with pytest.raises(UserError):
        cli("--traceback", "search", "--space", "ppo_smal")


def test_dashboard_on_a_port_in_use(cli, untouched):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("dashboard", "--port", str(port))
    assert_one_line_error(result, f"--port {port}: 127.0.0.1:{port} is in use", "leave --port out for a free one")
    untouched.check()


def test_search_against_a_server_that_refuses_us(cli, untouched):
    import http.server
    import threading

    class Refuses(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = cli("search", "--space", "oracle", "--mlflow-uri", url)
    finally:
        server.shutdown()
        server.server_close()
    assert_one_line_error(result, f"--mlflow-uri {url}: the server refused us (HTTP 401",
                          "MLFLOW_TRACKING_USERNAME")
    untouched.check()


# --- saved state of an interrupted search (tune-rl resume) ----------------------------------------------------------

STATE_CORPUS = sorted((HERE / "bad_inputs" / "saved_state").glob("*.txt"))


def damage(case: Path, folder: Path) -> Path:
    """Apply a saved-state case to a good search folder; what the error must name. Its header says how:
    `# file: F` replaces F with the rest, `# patch: F` sets the YAML keys below in F (<missing> drops one),
    `# remove: F` deletes F."""
    import yaml

    lines = case.read_text().splitlines(keepends=True)
    how, target = lines[1].removeprefix("# ").strip().split(": ")
    body = "".join(lines[2:])
    path = folder / target
    if how == "file":
        path.write_text(body)
    elif how == "patch":
        raw = yaml.safe_load(path.read_text())
        for key, value in yaml.safe_load(body).items():
            raw.pop(key) if value == "<missing>" else raw.__setitem__(key, value)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    else:
        assert how == "remove", case
        path.unlink()
        return folder
    return path


def test_the_saved_state_fixture_resumes_when_undamaged(cli, _isolated_home, monkeypatch):
    """What the corpus below damages: untouched, it reaches the point where a resume starts Ray."""
    from tests.resume_helpers import options, record_runs, saved_search

    started = record_runs(monkeypatch)
    saved_search(options(_isolated_home, storage=_isolated_home / "results"))
    result = cli("resume", "exp")
    assert result.status == 0 and len(started) == 1, result.err


@pytest.mark.parametrize("case", STATE_CORPUS, ids=[p.stem for p in STATE_CORPUS])
def test_bad_saved_state(case, cli, _isolated_home, monkeypatch, untouched):
    from tests.resume_helpers import options, record_runs, saved_search

    started = record_runs(monkeypatch)
    saved = options(_isolated_home, storage=_isolated_home / "results")
    named = damage(case, saved_search(saved))
    untouched.mark()
    result = cli("resume", "exp")
    assert_one_line_error(result, str(named), expected(case))
    assert started == []  # runner.run, where a resume starts Ray and opens MLflow runs, was not reached
    untouched.check(["--mlflow-uri", saved.mlflow_uri])


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    """A real MLflow store holding a finished search, a population-based one, one logged before the
    spec was, a run that is not tune-rl's and an experiment without a search."""
    from tests.mlflow_helpers import hand_spec, log_folder_search, write_search_folder
    from tune_runner.tracking import callback as tracking
    from tune_runner.tracking import parent as parent_run

    root = tmp_path_factory.mktemp("best-refusals")
    uri, spec = f"sqlite:///{root / 'mlflow.db'}", hand_spec()
    write_search_folder(root / "done", spec)
    parent = log_folder_search(uri, root / "done", spec)
    client = tracking.client(uri)
    exp_id = tracking.experiment_id(client, spec.name, uri)
    child = tracking.children(client, exp_id, parent)["h_00000"]
    pbt = parent_run.open_run(client, exp_id, hand_spec(scheduler="pbt"), name="pbt-search",
                              exp_path=root / "pbt-search")
    old = client.create_run(exp_id, run_name="old-search", tags={"tune_rl.space": spec.name,
                                                                 "tune_rl.experiment_path": "/data/old-search"})
    plain = client.create_run(client.create_experiment("other"), run_name="notebook")
    client.create_experiment("empty")
    return {"uri": uri, "parent": parent, "child": child, "pbt": pbt, "old": old.info.run_id,
            "plain": plain.info.run_id, "store": root / "mlflow.db"}


@pytest.mark.parametrize("argv, fragment", [
    (["best", "runs:/0123abcd", "--mlflow-uri", "{uri}"],
     "experiment runs:/0123abcd: no such run in {uri}; check the id (tune-rl search prints its parent run on its "
     "mlflow line) and --mlflow-uri"),
    (["best", "runs:/{child}", "--mlflow-uri", "{uri}"],
     "experiment runs:/{child}: the run of trial h_00000, not a search's parent run; give its parent: runs:/{parent}"),
    (["best", "runs:/{plain}", "--mlflow-uri", "{uri}"],
     "experiment runs:/{plain}: not the parent run of a tune-rl search (no tune_rl.space tag); give the run tune-rl "
     "search printed on its mlflow line"),
    (["best", "runs:/{old}", "--mlflow-uri", "{uri}"],
     "experiment runs:/{old}: search old-search logged no tune_rl_spec.yaml (it started before tune-rl logged the "
     "spec there); read it from its results folder: tune-rl best /data/old-search"),
    (["best", "runs:/{pbt}", "--mlflow-uri", "{uri}"],
     "experiment runs:/{pbt}: search pbt-search ran scheduler pbt, whose trials change config as they go, and MLflow "
     "holds only each trial's first; read it from its results folder: tune-rl best "),
    (["best", "empty", "--mlflow-uri", "{uri}"],
     "experiment empty: the MLflow experiment holds no tune-rl search in {uri}; give the experiment tune-rl search "
     "logged to (the space's name) or runs:/<parent run id>"),
    (["best", "ppo_smal", "--mlflow-uri", "{uri}"],
     "experiment ppo_smal: no search's run and no MLflow experiment of that name in {uri} (unknown experiment "
     "'ppo_smal'; did you mean 'ppo_small'?"),
    (["best", "runs:/{parent}", "--mlflow-uri", "{uri}", "--metric", "episode_retrun_mean"],
     "--metric episode_retrun_mean: no trial reported it; unknown metric 'episode_retrun_mean'; did you mean "
     "'episode_return_mean'?"),
])
def test_bad_best_from_mlflow(argv, fragment, searches, cli, untouched):
    store = searches["store"]
    before = (store.stat().st_mtime_ns, store.stat().st_size)
    result = cli(*(word.format(**searches) for word in argv))
    assert_one_line_error(result, fragment.format(**searches))
    untouched.check()  # no file here, no Ray
    assert (store.stat().st_mtime_ns, store.stat().st_size) == before, "the store was written to"
