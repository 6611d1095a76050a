"""Space files → ExperimentSpec: shipped files load, overrides apply, the saved form reloads."""

from __future__ import annotations

import pytest
import yaml

from tune_runner.errors import UserError
from tune_runner.spec.experiment import build_spec, load_spec, parse_value, shipped_spaces


@pytest.mark.parametrize("name", sorted(shipped_spaces()))
def test_every_shipped_space_loads_with_a_description(name):
    spec = load_spec(name)
    assert spec.description and spec.budget_env_steps > 0 and spec.space
    assert spec.trainable in ("ppo", "dqn", "sac", "oracle")
    shipped_envs = ("CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MinAtar/Breakout-v1", "curriculum_corridor",
                    "masked_choice")
    assert spec.env in shipped_envs  # the last two: envs/


@pytest.mark.parametrize("backend", ["", "rllib/"])
def test_shipped_spaces_pass_the_pre_launch_checks_on_both_backends(backend):
    from tune_runner.tuning.runner import prepare

    for name in shipped_spaces():
        if name == "oracle":  # trains nothing; no RLlib twin
            assert prepare(load_spec(name)).trainable.__name__ == "Oracle"
            continue
        algo = load_spec(name).trainable  # ppo, dqn or sac; the RLlib twin is rllib/PPO, rllib/DQN or rllib/SAC
        spec = load_spec(name, overrides=[f"trainable={backend}{algo.upper() if backend else algo}"])
        if backend and name == "ppo_minatar_breakout":  # bool images: RLlib's models take floats, so it is refused
            with pytest.raises(UserError, match="rllib/PPO feeds observations to RLlib's models as they come"):
                prepare(spec)
            continue
        prepared = prepare(spec)
        assert prepared.trainable.__name__.lower().endswith(algo)


def test_backend_section_applies_to_the_chosen_trainable_and_set_still_wins():
    ours = load_spec("ppo_small")
    rllib = load_spec("ppo_small", overrides=["trainable=rllib/PPO", "num_envs_per_env_runner=2"])
    assert ours.fixed["num_envs_per_env_runner"] == 32 and ours.stop_at == 475
    assert rllib.fixed["num_envs_per_env_runner"] == 2  # --set beats the backend section
    assert rllib.budget_env_steps == 50_000 and rllib.stop_at is None
    assert dict((p.name, p.args) for p in rllib.space)["num_epochs"] == (6, 15)
    assert "backends" not in ours.as_dict()


def test_backend_section_rejects_what_it_cannot_set(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("trainable: ppo\nenv: CartPole-v1\nbudget: {env_steps: 10}\n"
                    "backends: {ppo: {trainable: dqn}}\n")
    with pytest.raises(UserError, match="backends.ppo.trainable: not allowed in a backend section"):
        load_spec(str(path))


def test_a_backend_section_replaces_the_top_levels_value_wherever_it_stands(tmp_path):
    """One value, one place holds within a section; a backend section's value replaces the top level's: a key it
    searches is no longer fixed, one it fixes no longer searched, and a `--set env_config.X` replaces a fixed one."""
    path = tmp_path / "s.yaml"
    path.write_text("trainable: ppo\nenv: CartPole-v1\nbudget: {env_steps: 10}\n"
                    "fixed: {lr: 0.001, env_config.sutton_barto_reward: true}\n"
                    "space: {gamma: {uniform: [0.9, 0.99]}}\n"
                    "backends: {ppo: {space: {lr: {loguniform: [1.0e-4, 1.0e-2]}}, fixed: {gamma: 0.95}}}\n")
    spec = load_spec(str(path), overrides=["env_config.sutton_barto_reward=false"])
    assert spec.searched == ("lr",) and spec.fixed == {"gamma": 0.95}
    assert spec.env_config == {"sutton_barto_reward": False}
    path.write_text("trainable: ppo\nenv: CartPole-v1\nbudget: {env_steps: 10}\n"
                    "env_config: {sutton_barto_reward: true}\nfixed: {env_config.sutton_barto_reward: true}\n"
                    "backends: {ppo: {env_config: {sutton_barto_reward: false}}, "
                    "rllib/PPO: {space: {env_config.sutton_barto_reward: {choice: [true, false]}}}}\n")
    with pytest.raises(UserError, match=r"env_config.sutton_barto_reward is given twice, in the top-level "
                                        r"env_config.sutton_barto_reward and fixed.env_config.sutton_barto_reward"):
        load_spec(str(path))  # the top level gives it twice: no backend section mends that
    path.write_text("trainable: ppo\nenv: CartPole-v1\nbudget: {env_steps: 10}\n"
                    "fixed: {env_config.sutton_barto_reward: true}\n"
                    "backends: {ppo: {env_config: {sutton_barto_reward: false}}, "
                    "rllib/PPO: {space: {env_config.sutton_barto_reward: {choice: [true, false]}}}}\n")
    assert load_spec(str(path)).env_config == {"sutton_barto_reward": False}
    rllib = load_spec(str(path), overrides=["trainable=rllib/PPO"])
    assert rllib.searched == ("env_config.sutton_barto_reward",) and rllib.fixed == {}


def test_set_overrides_budget_fixed_and_pins_a_searched_value():
    spec = load_spec("ppo_small", overrides=["budget=1234", "vf_loss_coeff=0.5", "lr=1e-3",
                                               "env_config.size=3", "num_samples=2"])
    assert spec.budget_env_steps == 1234
    assert spec.fixed["vf_loss_coeff"] == 0.5
    assert spec.fixed["lr"] == 1e-3 and "lr" not in spec.searched  # pinned: no longer searched
    assert spec.env_config == {"size": 3} and spec.num_samples == 2


@pytest.mark.parametrize("overrides, stop_at, note", [
    (["env=MountainCarContinuous-v0"], 90.0, "MountainCarContinuous-v0's reward_threshold; the space's stop_at -250 "
                                             "was for Pendulum-v1"),
    (["env=Acrobot-v1"], -100.0, "Acrobot-v1's reward_threshold"),
    (["env=Hopper-v5"], 3800.0, "Hopper-v5's reward_threshold"),
    (["env=masked_choice"], None, "no stop_at: the space's stop_at -250 was for Pendulum-v1 and masked_choice has no "
                                  "reward_threshold (--set stop_at=VALUE for one)"),
    (["env=MountainCarContinuous-v0", "stop_at=50"], 50, ""),  # the user's own bar
    (["env=Pendulum-v1"], -250, ""),  # the space's own env
    (["lr=1e-3"], -250, ""),
])
def test_another_env_gets_its_own_stop_at_not_the_spaces(overrides, stop_at, note):
    """ppo_pendulum's -250 is a Pendulum return: on MountainCarContinuous every trial 'solved' it at its first
    result (returns -100..100), and the re-evaluation confirmed it, until --set env= took the new env's bar."""
    from tune_runner.tuning.console import header

    spec = load_spec("ppo_pendulum", overrides=overrides)
    assert spec.stop_at == stop_at
    assert spec.stop_at_note.startswith(note) and bool(spec.stop_at_note) == bool(note)
    assert "stop_at_note" not in spec.as_dict()  # the saved spec holds the bar, not how it came about
    import io

    out = io.StringIO()
    header(spec, "x", out)
    first = out.getvalue().splitlines()[0]
    assert (note in first) if note else ("reward_threshold" not in first)


def test_a_return_over_fewer_episodes_than_its_window_has_not_reached_stop_at():
    from tune_runner.tuning.reevaluate import SeedRun, _seed_run
    from tune_runner.tuning.stopper import BudgetStopper, EverySeedStopper

    spec = build_spec({"trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 10_000}, "stop_at": 475},
                      name="x", source="x.yaml")
    assert not spec.reached({"episode_return_mean": 480.0, "episodes": 3})  # the default window: 100
    assert spec.reached({"episode_return_mean": 480.0, "episodes": 100})
    assert spec.reached({"episode_return_mean": 480.0})  # a trainable that counts no episodes (the oracle)
    assert spec.reached({"episode_return_mean": 480.0, "episodes": float("nan")})
    small = {"config": {"metrics_num_episodes_for_smoothing": 20}, "episode_return_mean": 480.0}
    assert spec.reached({**small, "episodes": 20}) and not spec.reached({**small, "episodes": 19})
    fixed = spec.with_overrides(fixed={"metrics_num_episodes_for_smoothing": 50})
    assert fixed.reached({"episode_return_mean": 480.0, "episodes": 50})
    assert not fixed.reached({"episode_return_mean": 480.0, "episodes": 49})
    assert not BudgetStopper(spec)("t", {"env_steps": 4_000, "episode_return_mean": 480.0, "episodes": 3})
    assert spec.ending({"env_steps": 4_000, "episode_return_mean": 480.0, "episodes": 3}) == "stopped_early"
    every = EverySeedStopper(spec)  # per seed: its own episodes
    seeds = {"env_steps": 4_000, "seed_0/episode_return_mean": 480.0, "seed_1/episode_return_mean": 490.0,
             "seed_0/episodes": 150, "seed_1/episodes": 5}
    assert not every("t", seeds)
    assert every("t", {**seeds, "env_steps": 8_000, "seed_0/episode_return_mean": 400.0, "seed_1/episodes": 120})
    assert _seed_run(spec, 7, [480.0, 470.0, 480.0], [4_000, 8_000, 12_000], [3, 60, 130]) == \
        SeedRun(7, 480.0, 12_000)  # not at 4,000 env steps, over 3 episodes


@pytest.mark.usefixtures("one_torch_thread")
def test_one_lucky_episode_of_a_real_learner_does_not_solve_the_space():
    """ppo_pendulum moved to MountainCarContinuous-v0 (stop_at: its reward_threshold, 90): our PPO's first
    iteration with seed 0 finishes one episode, one that reached the goal (92); 4,095 env steps are no solve.
    With the space's envs and minibatches as they were then (16 and 256; 32 and 512 since 2026-11-28, with which
    no episode ends in the first iteration)."""
    from tune_runner.algos import PPO, PPOConfig

    spec = load_spec("ppo_pendulum", overrides=["env=MountainCarContinuous-v0", "num_envs_per_env_runner=16",
                                                "minibatch_size=256"])
    fixed = {k: v for k, v in spec.fixed.items() if k not in ("num_env_runners", "train_batch_size_per_learner")}
    learner = PPO(PPOConfig.from_dict({**fixed, "train_batch_size": spec.fixed["train_batch_size_per_learner"],
                                       "lr": 1.1e-3, "num_epochs": 9, "lambda_": 0.92, "log_std_init": -0.44,
                                       "seed": 0}), env_id=spec.env)
    try:
        first = learner.train_iteration()
    finally:
        learner.close()
    assert first["episodes"] == 1 and first["episode_return_mean"] >= spec.stop_at == 90  # what it was judged on
    assert not spec.reached(first)


def test_parse_value_reads_numbers_leniently():
    assert parse_value("1e-5") == 1e-5  # YAML alone would give the string '1e-5'
    assert parse_value("42") == 42 and isinstance(parse_value("42"), int)
    assert parse_value("[64, 64]") == [64, 64] and parse_value("true") is True
    assert parse_value("tanh") == "tanh"


def test_param_space_holds_env_fixed_and_domains():
    spec = load_spec("ppo_small")
    space = spec.param_space()
    assert space["env"] == "CartPole-v1" and space["env_config"] == {}
    assert space["num_envs_per_env_runner"] == spec.fixed["num_envs_per_env_runner"]
    assert set(spec.searched) <= set(space) and hasattr(space["lr"], "sample")


def test_saved_spec_reloads_to_the_same_spec(tmp_path):
    spec = load_spec("ppo_small")
    raw = yaml.safe_load(yaml.safe_dump(spec.as_dict(), sort_keys=False))
    again = build_spec({k: v for k, v in raw.items() if k not in ("name", "source", "source_sha256")},
                       name=raw["name"], source=raw["source"], sha256=raw["source_sha256"])
    assert again == spec


def test_user_file_by_path(tmp_path):
    path = tmp_path / "mine.yml"
    path.write_text("trainable: rllib/PPO\nenv: CartPole-v1\nbudget: {env_steps: 100}\n"
                    "space: {lr: {choice: [0.001]}}\n")
    spec = load_spec(str(path))
    assert spec.name == "mine" and spec.searcher.name == "random" and spec.scheduler.name == "fifo"
    assert len(spec.source_sha256) == 64


def test_budget_accepts_float_written_whole_numbers():
    spec = build_spec({"trainable": "rllib/PPO", "env": "CartPole-v1", "budget": {"env_steps": 1.0e+5}},
                      name="x", source="x.yaml")
    assert spec.budget_env_steps == 100000
    with pytest.raises(UserError, match="got 1.5"):
        build_spec({"trainable": "rllib/PPO", "env": "CartPole-v1", "budget": {"env_steps": 1.5}},
                   name="x", source="x.yaml")


def test_stop_at_ends_a_trial_that_reached_the_target():
    from tune_runner.tuning.runner import BudgetStopper

    spec = build_spec({"trainable": "rllib/DQN", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "stop_at": 475}, name="x", source="x.yaml")
    stop = BudgetStopper(spec)
    assert not stop("t", {"env_steps": 500, "episode_return_mean": 474.9})
    assert stop("t", {"env_steps": 500, "episode_return_mean": 475.0})
    assert stop("t", {"env_steps": 1000, "episode_return_mean": 20.0})
    assert not stop("t", {"env_steps": 500, "episode_return_mean": float("nan")})
    assert spec.ending({"env_steps": 500, "episode_return_mean": 480.0}) == "solved"
    assert spec.ending({"env_steps": 1000, "episode_return_mean": 20.0}) == "done"
    assert spec.ending({"env_steps": 500, "episode_return_mean": 20.0}) == "stopped_early"
    low = spec.with_overrides(mode="min", stop_at=10.0)
    assert low.reached({"episode_return_mean": 9.0}) and not low.reached({"episode_return_mean": 11.0})


def test_a_saved_spec_with_a_searched_env_config_key_loads_again():
    """as_dict writes `env_config: {}` beside `space: {env_config.K: ...}`: an empty mapping is no second place."""
    from tune_runner.spec.experiment import build_spec
    from tune_runner.spec.saved import saved_spec

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 1000},
                       "space": {"env_config.size": {"grid": [3, 7]}}}, name="s", source="s.yaml")
    again = saved_spec(spec.as_dict(), where="tune_rl_spec.yaml", fix="x")
    assert again.searched == ("env_config.size",) and again.env_config == {}
