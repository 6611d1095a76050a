"""seeds_per_trial: the spec setting, its aggregates, the trial's reporting and what is refused before launch."""

from __future__ import annotations

import pytest

from tune_runner.errors import UserError
from tune_runner.spec import reserved
from tune_runner.spec.experiment import build_spec
from tune_runner.spec.seed_keys import per_seed, seed_key

BASE = {"trainable": "ppo", "env": "CartPole-v1", "budget": {"env_steps": 2000}}


def spec_of(**raw):
    return build_spec({**BASE, **raw}, name="s", source="s.yaml")


def test_the_trial_result_gets_each_per_seed_metrics_aggregate_under_its_plain_name():
    from tune_runner.algos.seeds import with_aggregates

    result = {seed_key(i, "episode_return_mean"): v for i, v in enumerate([10.0, 20.0, 30.0, 500.0])}
    result |= {seed_key(i, "episodes"): n for i, n in enumerate([7, 5, 9, 8])} | {"sps": 9.0, "node_id": "n"}
    result[seed_key(0, "device")] = "cpu"  # not a number: no aggregate
    out = with_aggregates(result, "iqm")
    assert out["episode_return_mean"] == pytest.approx(25.0)  # the middle two of four
    assert with_aggregates(result, "min")["episode_return_mean"] == 10.0
    assert with_aggregates(result, "mean")["episode_return_mean"] == pytest.approx(140.0)
    assert out["episodes"] == 5  # a counter: what every seed has at least
    assert out["sps"] == 9.0 and "device" not in out
    assert per_seed(out, "episode_return_mean") == [10.0, 20.0, 30.0, 500.0]
    assert with_aggregates({"episode_return_mean": 3.0}, "iqm") == {"episode_return_mean": 3.0}  # one seed


def test_seeds_per_trial_reaches_the_trial_config_only_when_above_one():
    one, three = spec_of(), spec_of(seeds_per_trial=3, seed_aggregate="median")
    assert one.seeds_per_trial == 1 and one.seed_aggregate == "iqm"
    assert not set(reserved.SEED_KEYS) & set(one.param_space())  # a one-seed search's trials are as before
    space = three.param_space()
    assert space[reserved.SEEDS_KEY] == 3 and space[reserved.AGGREGATE_KEY] == "median"
    assert (three.as_dict()["seeds_per_trial"], three.as_dict()["seed_aggregate"]) == (3, "median")
    from tune_runner.spec.saved import saved_spec

    again = saved_spec(three.as_dict(), where="saved", fix="")  # how resume reads it back
    assert (again.seeds_per_trial, again.seed_aggregate) == (3, "median")


def test_the_seed_keys_are_never_a_learners_setting_nor_exported():
    for subset in (reserved.NOT_LEARNER, reserved.NOT_EXPORTED, reserved.NOT_RLLIB, reserved.NOT_ORACLE):
        assert set(reserved.SEED_KEYS) <= set(subset)


@pytest.mark.parametrize("raw, fragment", [
    ({"seeds_per_trial": True}, "seeds_per_trial: expected a positive integer, got True"),
    ({"seeds_per_trial": 2.5}, "seeds_per_trial: expected a positive integer"),
    ({"seed_aggregate": "worst"}, "seed_aggregate: unknown seed_aggregate 'worst'"),
    ({"seed_aggregate": 3}, "seed_aggregate: expected a string, got 3"),
    ({"space": {"seed_aggregate": {"choice": ["iqm", "min"]}}}, "seed_aggregate: set it at the top level"),
])
def test_bad_seed_settings_are_named(raw, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", r"\(")):
        spec_of(**raw)


def test_preflight_refuses_several_seeds_for_a_trainable_that_trains_one(forbid_ray):
    from tune_runner.tuning.preflight import check_before_ray

    check_before_ray(spec_of(seeds_per_trial=4))  # ppo and dqn train several
    check_before_ray(spec_of(trainable="dqn", seeds_per_trial=4))
    for trainable in ("rllib/DQN", "rllib/PPO", "oracle"):
        with pytest.raises(UserError, match=f"seeds_per_trial: 4: {trainable} trains one seed per trial"):
            check_before_ray(spec_of(trainable=trainable, seeds_per_trial=4))
    check_before_ray(spec_of(trainable="dqn", seeds_per_trial=1))
    with pytest.raises(UserError, match="fixed.num_seeds: set by the trial from the space's top-level seeds_per_trial"):
        check_before_ray(spec_of(fixed={"num_seeds": 3}))  # the learner's field: the space says seeds_per_trial


def test_a_user_agent_trains_several_seeds_only_when_it_says_so(forbid_ray, tmp_path, monkeypatch):
    from tune_runner.plugins import AGENTS, load_plugins
    from tune_runner.tuning.preflight import check_before_ray

    monkeypatch.setattr(AGENTS, "_entries", dict(AGENTS._entries))  # undone after the test
    plugin = tmp_path / "agents.py"
    plugin.write_text(
        "from tune_runner.plugins import register_agent\n\n"
        "class Base:\n"
        "    @staticmethod\n"
        "    def add_args(parser):\n        parser.add_argument('--lr', type=float, default=0.1)\n"
        "    def __init__(self, args):\n        self.args = args\n"
        "    def train_iteration(self):\n        return {'episode_return_mean': 0.0, 'env_steps': 1}\n"
        "    def compute_actions(self, obs, explore=False):\n        return obs\n\n"
        "register_agent('one_seed')(Base)\n\n"
        "@register_agent('many_seeds')\nclass Many(Base):\n    seeds_per_trial = True\n")
    load_plugins([str(plugin)])
    with pytest.raises(UserError, match="one_seed trains one seed per trial"):
        check_before_ray(spec_of(trainable="one_seed", seeds_per_trial=2, plugins=[str(plugin)]))
    check_before_ray(spec_of(trainable="many_seeds", seeds_per_trial=2, plugins=[str(plugin)]))
    from tune_runner.trainables.agents import build

    learner = build("many_seeds", {}, env="CartPole-v1", env_config={}, device="cpu", num_seeds=2)
    assert learner.args.num_seeds == 2
