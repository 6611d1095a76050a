"""`tune-rl train`'s seed-000 flags parsed and mapped onto a one-trial spec (no Ray, no training)."""

from __future__ import annotations

import io

import pytest

from tune_runner.cli import train
from tune_runner.cli.main import build_parser
from tune_runner.errors import UserError

SEED_FLAGS = ["train", "--env_name", "CartPole-v1", "--agent_name", "ppo", "--model_name", "mlp",
              "--num_envs_per_worker", "3", "--num_workers", "3", "--gpu", "0,1,2", "--num_gpus", "3",
              "--num_cpus", "8", "--batch_size", "10"]


def spec_of(argv: list[str]):
    args = build_parser(argv).parse_args(argv)
    out = io.StringIO()
    return args, train.spec_from_flags(args, out)[0], out.getvalue()


def test_seed_000s_command_line_maps_onto_our_settings():
    args, spec, _ = spec_of(SEED_FLAGS)
    assert (spec.trainable, spec.env, spec.num_samples, spec.space) == ("ppo", "CartPole-v1", 1, ())
    assert spec.fixed == {"num_envs_per_env_runner": 3, "num_env_runners": 3, "train_batch_size": 10, "model": "mlp"}
    assert (args.gpu, args.num_gpus, args.num_cpus) == ("0,1,2", 3.0, 8)  # the local Ray's size, not trial settings
    assert spec.budget_env_steps == train.DEFAULT_BUDGET and spec.reevaluate is False


def test_dashed_spellings_and_rllib_batch_name():
    _, spec, _ = spec_of(["train", "--env-name", "CartPole-v1", "--agent-name", "rllib/PPO", "--batch-size", "400",
                          "--num-workers", "1", "--budget", "2000", "--seed", "4"])
    assert spec.trainable == "rllib/PPO" and spec.budget_env_steps == 2000
    assert spec.fixed == {"train_batch_size_per_learner": 400, "num_env_runners": 1, "seed": 4}


def test_set_budget_is_the_budget_as_for_search_not_a_learner_setting():
    _, spec, _ = spec_of(["train", "--env_name", "Pendulum-v1", "--set", "budget=20000", "--set", "gamma=0.9"])
    assert spec.budget_env_steps == 20_000 and spec.fixed == {"gamma": 0.9}
    _, spec, _ = spec_of(["train", "--env_name", "CartPole-v1", "--set", "budget=3000", "--budget", "3000"])
    assert spec.budget_env_steps == 3000


BUNDLE = ("tune_rl_format: 1\ntrainable: dqn\nenv: Acrobot-v1\nenv_config: {}\nbudget: {env_steps: 40000}\n"
          "stop_at: -100\nconfig: {lr: 0.002, n_step: 3}\n")


def test_set_env_and_other_run_settings_change_the_run_not_the_learner_config(tmp_path):
    """`train --config best.yaml --set env=CartPole-v1` once ran the bundle's Acrobot-v1 (the header said so)
    with env: CartPole-v1 among the learner's settings and Acrobot's stop_at -100: env, env_config.X, stop_at,
    metric and mode are the run's, as in search, and another env brings its own stop_at."""
    bundle = tmp_path / "best.yaml"
    bundle.write_text(BUNDLE)
    _, spec, _ = spec_of(["train", "--config", str(bundle), "--set", "env=CartPole-v1", "--set", "lr=0.001"])
    assert (spec.env, spec.stop_at, spec.fixed) == ("CartPole-v1", 475.0, {"lr": 0.001, "n_step": 3})
    assert spec.stop_at_note.startswith("CartPole-v1's reward_threshold; the bundle's stop_at -100 was for Acrobot-v1")
    _, spec, _ = spec_of(["train", "--config", str(bundle), "--env_name", "CartPole-v1", "--set", "stop_at=200",
                          "--set", "env_config.sutton_barto_reward=true", "--set", "mode=max"])
    assert (spec.env, spec.stop_at, spec.env_config) == ("CartPole-v1", 200.0, {"sutton_barto_reward": True})
    assert "stop_at" not in spec.fixed and not any(k.startswith("env_config") for k in spec.fixed)
    _, spec, _ = spec_of(["train", "--set", "env=Pendulum-v1", "--set", "stop_at=-300"])  # no --env_name needed
    assert (spec.env, spec.stop_at, spec.fixed) == ("Pendulum-v1", -300.0, {})
    with pytest.raises(UserError, match="--env_name CartPole-v1 and --set env=Acrobot-v1 disagree; give one of them"):
        spec_of(["train", "--env_name", "CartPole-v1", "--set", "env=Acrobot-v1"])
    with pytest.raises(UserError, match="--set mode=up: must be max or min"):
        spec_of(["train", "--config", str(bundle), "--set", "mode=up"])


def test_seeds_per_trial_and_seed_aggregate_are_the_runs_settings_with_or_without_a_bundle(tmp_path):
    """`train --set seeds_per_trial=3` was refused ("set it at the top level of the file") with no file to set it
    in: like search's --seeds-per-trial they are the run's; a population's lists are checked against them."""
    from tune_runner.tuning.console import header

    argv = ["train", "--env_name", "CartPole-v1", "--set", "seeds_per_trial=3", "--set", "seed_aggregate=min",
            "--population", "{gamma: [0.9, 0.95, 0.99]}"]
    _, spec, _ = spec_of(argv)
    assert (spec.seeds_per_trial, spec.seed_aggregate) == (3, "min")
    assert spec.fixed == {"population": {"gamma": [0.9, 0.95, 0.99]}}
    out = io.StringIO()
    header(spec, "x", out)
    assert "1 trial(s) of 3 seeds (min) x 100,000 env steps" in out.getvalue()
    bundle = tmp_path / "best.yaml"
    bundle.write_text(BUNDLE)
    _, spec, _ = spec_of(["train", "--config", str(bundle), "--set", "seeds_per_trial=2"])
    assert (spec.seeds_per_trial, spec.seed_aggregate, spec.fixed) == (2, "iqm", {"lr": 0.002, "n_step": 3})
    with pytest.raises(UserError, match="--set: seed_aggregate: unknown seed_aggregate 'avg'"):
        spec_of(["train", "--config", str(bundle), "--set", "seed_aggregate=avg"])


def test_the_default_experiment_name_is_one_folder_name_for_namespaced_envs_and_agents():
    from tune_runner.paths import check_name

    _, spec, _ = spec_of(["train", "--env_name", "phys2d/CartPole-v1", "--agent_name", "rllib/PPO"])
    assert check_name(spec.name) == "rllib-PPO-phys2d-CartPole-v1"  # not a folder rllib/PPO-phys2d/...


def test_the_agents_own_options_are_flags_typed_from_its_config():
    _, spec, _ = spec_of(["train", "--env_name", "CartPole-v1", "--agent_name", "dqn", "--lr", "1e-4",
                          "--double_q", "false", "--fcnet_hiddens", "[32, 32]", "--epsilon", "[[0, 1.0], [500, 0.1]]"])
    assert spec.fixed == {"lr": 1e-4, "double_q": False, "fcnet_hiddens": [32, 32],
                          "epsilon": [[0, 1.0], [500, 0.1]]}


def test_train_help_lists_the_seed_flags_and_the_chosen_agents_options():
    parser = build_parser(["train", "--agent_name", "dqn"])
    train_parser = parser._subparsers._group_actions[0].choices["train"]
    text = train_parser.format_help()
    for flag in ("--env_name", "--agent_name", "--model_name", "--num_envs_per_worker", "--num_workers", "--gpu",
                 "--num_gpus", "--num_cpus", "--batch_size", "--plugins"):
        assert flag in text, flag
    assert "options of agent dqn" in text and "--target_network_update_freq" in text
    assert "Env steps between copies of the Q network" in text  # the config field's docstring is the help
    assert "options of agent ppo" in build_parser(["train"])._subparsers._group_actions[0].choices["train"] \
        .format_help()


def test_seed_usage_model_name_ppo_reads_as_the_agent():
    _, spec, out = spec_of(["train", "--env_name", "CartPole-v1", "--agent_name", "default_agent",
                            "--model_name", "dqn"])
    assert spec.trainable == "dqn" and "model" not in spec.fixed
    assert "--model_name dqn names a learning rule" in out


@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "--agent_name", "ppo"], "give --env_name ENV"),
    (["train", "--env_name", "CartPole-v1", "--model_name", "mlpp"], "--model_name mlpp: unknown model 'mlpp'; "
                                                                     "did you mean 'mlp'?"),
    (["train", "--env_name", "CartPole-v1", "--set", "budget=-3"], "--set budget: budget.env_steps: expected a "
                                                                   "positive whole number"),
    (["train", "--env_name", "CartPole-v1", "--set", "budget=100", "--budget", "200"], "disagree; give one of them"),
])
def test_bad_train_flags_are_one_line(argv, expected):
    args = build_parser(argv).parse_args(argv)
    with pytest.raises(UserError, match=expected.replace("?", r"\?").replace("(", r"\(")):
        train.spec_from_flags(args, io.StringIO())


def test_an_unknown_option_of_the_agent_is_refused_with_the_closest_flag():
    argv = ["train", "--env_name", "CartPole-v1", "--agent_name", "dqn", "--target_network_update_frq", "5"]
    with pytest.raises(UserError, match="did you mean --target_network_update_freq"):
        build_parser(argv).parse_args(argv)
