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
    assert spec.trainable in ("ppo", "dqn", "oracle")
    assert spec.env in ("CartPole-v1", "Pendulum-v1", "curriculum_corridor", "masked_choice")  # the last two: envs/


@pytest.mark.parametrize("backend", ["", "rllib/"])
def test_shipped_spaces_pass_the_pre_launch_checks_on_both_backends(backend):
    from tune_runner.search.runner import prepare

    for name in shipped_spaces():
        if name == "oracle":  # trains nothing; no RLlib twin
            assert prepare(load_spec(name)).trainable.__name__ == "Oracle"
            continue
        algo = load_spec(name).trainable  # ppo or dqn; the RLlib twin is rllib/PPO or rllib/DQN
        spec = load_spec(name, overrides=[f"trainable={backend}{algo.upper() if backend else algo}"])
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


def test_set_overrides_budget_fixed_and_pins_a_searched_value():
    spec = load_spec("ppo_small", overrides=["budget=1234", "vf_loss_coeff=0.5", "lr=1e-3",
                                               "env_config.size=3", "num_samples=2"])
    assert spec.budget_env_steps == 1234
    assert spec.fixed["vf_loss_coeff"] == 0.5
    assert spec.fixed["lr"] == 1e-3 and "lr" not in spec.searched  # pinned: no longer searched
    assert spec.env_config == {"size": 3} and spec.num_samples == 2


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
    from tune_runner.search.runner import BudgetStopper

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
