"""seeds_per_trial in a trial of our PPO (no Ray): the aggregate it reports, PBT's exploit of a K-seed checkpoint,
and which seed a policy is read from."""

from __future__ import annotations

import numpy as np
import pytest

from tune_runner.spec.reserved import AGGREGATE_KEY, SEEDS_KEY
from tune_runner.spec.seed_keys import per_seed
from tune_runner.trainables.own import OwnPPO

CONFIG = {"env": "CartPole-v1", "env_config": {}, "num_envs_per_env_runner": 2, "train_batch_size_per_learner": 128,
          "minibatch_size": 64, "num_epochs": 1, "lr": 1e-3, "seed": 3, "metrics_num_episodes_for_smoothing": 5,
          SEEDS_KEY: 3, AGGREGATE_KEY: "min"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def seed_weights(trainable) -> list[list[np.ndarray]]:
    """Each seed's parameters, from its one-seed state."""
    state = trainable.learner.get_state()
    return [[t.numpy() for net in ("pi", "vf") for t in seed[net].values()] for seed in state["seeds"]]


def test_a_trial_of_three_seeds_reports_each_and_their_aggregate():
    trial = OwnPPO(config=dict(CONFIG))
    result = [trial.train() for _ in range(3)][-1]
    returns = per_seed(result, "episode_return_mean")
    assert len(returns) == 3 and len(set(returns)) == 3  # three seeds that learned apart
    assert result["episode_return_mean"] == min(returns)  # the space's seed_aggregate, not the learner's default
    assert result["env_steps"] == min(per_seed(result, "env_steps")) > 2 * 128  # less the autoreset steps
    trial.stop()


def test_pbts_exploit_copies_all_three_seeds_and_keeps_the_exploiting_trials_new_lr(tmp_path):
    donor = OwnPPO(config=dict(CONFIG))
    for _ in range(2):
        donor.train()
    checkpoint = donor.save(str(tmp_path / "donor"))
    taker = OwnPPO(config={**CONFIG, "seed": 11, "lr": 3e-3})
    taker.train()
    mutated = {**CONFIG, "lr": 5e-4}  # PBT: the donor's state, a perturbed config
    assert taker.reset_config(mutated)
    taker.restore(checkpoint)
    for theirs, ours in zip(seed_weights(donor), seed_weights(taker), strict=True):
        for a, b in zip(theirs, ours, strict=True):
            np.testing.assert_array_equal(a, b)
    assert taker.learner.get_state()["seeds"][2]["env_steps"] == donor.learner.get_state()["seeds"][2]["env_steps"]
    result = taker.train()
    assert result["lr"] == pytest.approx(5e-4) and all(v == pytest.approx(5e-4) for v in per_seed(result, "lr"))
    donor.stop()
    taker.stop()


def test_a_policy_is_read_from_the_seed_whose_recent_episodes_returned_most():
    from tune_runner.trainables.checkpoints import policy_seed

    seeds = [{"stats": {"recent_returns": r}, "id": i} for i, r in enumerate([[10.0, 30.0], [50.0, 40.0], [], [45.0]])]
    assert policy_seed({"num_seeds": 4, "seeds": seeds}) == (seeds[1], 1)
    one = {"stats": {"recent_returns": [1.0]}}
    assert policy_seed(one) == (one, None)
    tied = [{"stats": {"recent_returns": [5.0]}}, {"stats": {"recent_returns": [5.0]}}]
    assert policy_seed({"num_seeds": 2, "seeds": tied})[1] == 0


def test_a_user_agent_of_several_seeds_gets_the_aggregate_added_by_the_trial(monkeypatch):
    from tune_runner.plugins import AGENTS, register_agent
    from tune_runner.trainables.own import own_trainable_class

    monkeypatch.setattr(AGENTS, "_entries", dict(AGENTS._entries))  # undone after the test

    @register_agent("three_coins")
    class Coins:  # reports per seed only: the trial adds the plain names
        seeds_per_trial = True

        @staticmethod
        def add_args(parser):
            parser.add_argument("--bias", type=float, default=0.0)

        def __init__(self, args):
            self.args, self.steps = args, 0

        def train_iteration(self):
            self.steps += 10
            values = [self.args.bias + 100.0 * i for i in range(self.args.num_seeds)]
            return {**{f"seed_{i}/episode_return_mean": v for i, v in enumerate(values)},
                    **{f"seed_{i}/env_steps": self.steps for i in range(self.args.num_seeds)}}

        def compute_actions(self, obs, explore=False):
            return np.zeros(len(obs), dtype=np.int64)

    trial = own_trainable_class("three_coins")(config={"env": "CartPole-v1", "bias": 1.0, SEEDS_KEY: 4,
                                                        AGGREGATE_KEY: "iqm"})
    result = trial.train()
    assert result["episode_return_mean"] == pytest.approx(151.0)  # the middle two of 1, 101, 201, 301
    assert result["env_steps"] == 10
    trial.stop()


def test_the_pbt_audit_sees_a_single_seed_left_on_a_stale_lr():
    from tune_runner.trainables.audit import AuditError, audit_result

    trial = OwnPPO(config=dict(CONFIG))
    trial.train()
    audited = audit_result(trial.config, trial.applied())
    assert audited["applied/lr"] == audited["requested/lr"] == 1e-3
    trial.learner.optimizer.lr = [1e-3, 2e-3, 1e-3]  # seed 1 still on a donor's lr
    with pytest.raises(AuditError, match="lr"):
        audit_result(trial.config, trial.applied())
    trial.stop()


def test_a_dqn_trial_of_two_seeds_reports_each_and_their_aggregate():
    from tune_runner.trainables.own import OwnDQN

    trial = OwnDQN(config={"env": "Acrobot-v1", "env_config": {}, "num_envs_per_env_runner": 2, "seed": 5,
                           "num_steps_sampled_before_learning_starts": 100, "replay_buffer_config.capacity": 1000,
                           "train_batch_size": 32, "fcnet_hiddens": [16], SEEDS_KEY: 2, AGGREGATE_KEY: "mean"})
    result = trial.train()  # learning starts at 100 of its 1000 env steps a seed
    losses = per_seed(result, "qf_loss")
    assert len(losses) == 2 and losses[0] != losses[1]  # two seeds, trained apart
    assert result["qf_loss"] == pytest.approx(sum(losses) / 2)
    trial.stop()


def test_a_re_evaluation_line_counts_the_seeds_that_reached_stop_at_as_the_verdict_does():
    """The aggregate of seeds 500, 379 and 482 ends below 475, yet each seed reached it at some result over a
    full window of its episodes: the line says 3/3 seeds solved, as the robust verdict will, not 'not solved' from
    the aggregate's last value; and a seed whose 480 came from its first 5 episodes has not solved."""
    import io
    from types import SimpleNamespace

    from tune_runner.spec.experiment import load_spec
    from tune_runner.tuning.reevaluate import CANDIDATE_KEY, Candidate, _Progress, _solved_said

    spec = load_spec("ppo_small")
    config = {SEEDS_KEY: 3, "seed": 1000, CANDIDATE_KEY: 0}

    def result(steps: int, *seeds: tuple[float, int]) -> dict:
        out = {"env_steps": steps, "episode_return_mean": 0.0, "config": config}
        for i, (value, episodes) in enumerate(seeds):
            out.update({f"seed_{i}/episode_return_mean": value, f"seed_{i}/episodes": episodes})
        return out

    out = io.StringIO()
    progress = _Progress([Candidate("t_00000", {}, 480.0)], spec, out)
    trial = SimpleNamespace(trial_id="r0", config=config, last_result=None)
    for each in (result(20_000, (500.0, 120), (480.0, 5), (300.0, 90)),    # seed 1: 480 over its first 5 episodes
                 result(120_000, (500.0, 300), (470.0, 200), (476.0, 250)),
                 result(250_000, (500.0, 600), (379.3, 500), (481.8, 520))):
        progress.on_trial_result(0, [], trial, each)
    trial.last_result = {**each, "episode_return_mean": 467.7}
    progress.on_trial_complete(0, [], trial)
    assert out.getvalue().endswith("episode_return_mean 467.7, 2/3 seeds solved in 250,000 env steps\n"), out.getvalue()
    last = {"episode_return_mean": 467.7, "env_steps": 250_000}
    assert _solved_said(config, last, {0, 1, 2}, spec) == ", 3/3 seeds solved in 250,000 env steps"
    assert _solved_said({"seed": 1000}, last, set(), spec) == ", not solved in 250,000 env steps"
    assert _solved_said({"seed": 1000}, {**last, "episode_return_mean": 480.0, "env_steps": 99_000}, set(), spec) == \
        ", solved at 99,000 env steps"


@pytest.mark.parametrize("form", ["dotted", "mapping"])
def test_a_trial_of_a_population_trains_each_seed_on_its_values_and_its_policy_exports(form, tmp_path):
    """A population in a trial config (`population.lr` keys as a space's fixed mapping flattens, or one mapping as
    train's --population gives it): each seed gets its own values, and the policy of its checkpoint is exported
    (the one-seed view of the config, tune_runner.trainables.trial.one_seed_config)."""
    from tune_runner import tune_rl_policy
    from tune_runner.results import pyfunc_model as model

    values = {"lr": [1e-3, 3e-3, 2e-3], "gamma": [0.99, 0.9, 0.95]}
    config = {**CONFIG, **({f"population.{k}": v for k, v in values.items()} if form == "dotted"
                           else {"population": values})}
    trial = OwnPPO(config=config)
    result = trial.train()
    assert per_seed(result, "lr") == values["lr"]
    assert [member.gamma for member in trial.learner.members] == values["gamma"]
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    trial.save_checkpoint(str(checkpoint))
    data = model.save_policy(checkpoint, learner="ppo", config=config, folder=tmp_path / "policy")
    assert tune_rl_policy.Policy(data).predict(np.zeros((2, 4), np.float32)).shape == (2,)
    trial.stop()


def test_one_seed_of_a_population_config_is_a_one_seed_config_at_its_values():
    from tune_runner.trainables.trial import one_seed_config

    config = {**CONFIG, "population.lambda": [0.9, 0.8, 0.7], "population": {"gamma": [0.99, 0.9, 0.95]}}
    one = one_seed_config(config, 2)
    assert one == {**{k: v for k, v in CONFIG.items() if k not in (SEEDS_KEY, AGGREGATE_KEY)},
                   "lambda_": 0.7, "gamma": 0.95}


def test_a_members_policy_comes_from_its_own_slots_seeds_in_a_population_trials_checkpoint(tmp_path):
    """A re-evaluation's population trial of members a and b, 2 seeds each: the seed that returned the most is
    b's, yet a's bundle, a's MLflow-model data and a's checkpoint read act as a's best seed; a member not in the
    checkpoint's slots is one line."""
    import json
    import pickle

    from tune_runner import tune_rl_policy
    from tune_runner.errors import UserError
    from tune_runner.paths import CHECKPOINT_FILE
    from tune_runner.results import pyfunc_model as model
    from tune_runner.results.bundle import Bundle
    from tune_runner.results.policy import load_policy
    from tune_runner.spec.reserved import MEMBER_LIST_KEY, MEMBERS_KEY
    from tune_runner.trainables import checkpoints

    members = [{"id": "a", "values": {"lr": 1e-3}}, {"id": "b", "values": {"lr": 3e-3}}]
    config = {**CONFIG, SEEDS_KEY: 2, MEMBERS_KEY: 2,
              MEMBER_LIST_KEY: {"members": members, "metric": "episode_return_mean", "mode": "max", "per_seed": True}}
    trial = OwnPPO(config=dict(config))
    result = trial.train()
    assert len(per_seed(result, "episode_return_mean")) == 4  # per_seed: every seed's own curve too
    checkpoint = tmp_path / "trial" / "checkpoint_000000"
    checkpoint.mkdir(parents=True)
    trial.save_checkpoint(str(checkpoint))
    trial.stop()
    (checkpoint.parent / "params.json").write_text(json.dumps(config))
    saved = checkpoints.read(checkpoint)
    returns = {3: [500.0], 0: [20.0], 1: [30.0], 2: [10.0]}  # seed 3 (b's second) the best; a's best is seed 1
    for index, seed in enumerate(saved["learner"]["seeds"]):
        seed["stats"]["recent_returns"] = returns[index]
    (checkpoint / CHECKPOINT_FILE).write_bytes(pickle.dumps(saved))
    seeds = saved["learner"]["seeds"]

    def weights(folder):
        return np.concatenate([p.detach().numpy().ravel() for p in tune_rl_policy.Policy(folder).net.parameters()])

    assert checkpoints.member_policy(saved, "a") is seeds[1] and checkpoints.member_policy(saved, "b") is seeds[3]
    assert checkpoints.member_policy(saved, None) is seeds[3] and checkpoints.member_policy(saved, "c") is None
    own = model.save_policy(checkpoint, learner="ppo", config=config, folder=tmp_path / "a", member="a")
    best_of_all = model.save_policy(checkpoint, learner="ppo", config=config, folder=tmp_path / "all")
    assert not np.array_equal(weights(own), weights(best_of_all))  # a's seed 1, not b's seed 3
    bundle = Bundle(trainable="ppo", env="CartPole-v1", metric="episode_return_mean", mode="max",
                    config={"lr": 1e-3}, source={"trial_id": "a"}, checkpoint=str(checkpoint))
    bundle = bundle.write(tmp_path / "a.yaml")
    from_bundle = load_policy(bundle)  # evaluate, --video and tr.load_policy read a bundle so
    observations = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    acted = np.asarray(from_bundle.compute_actions(observations))
    assert np.array_equal(acted, tune_rl_policy.Policy(own).predict(observations))
    assert not np.array_equal(acted, tune_rl_policy.Policy(best_of_all).predict(observations))
    with pytest.raises(UserError, match="member c is not in this population trial's checkpoint"):
        checkpoints.learner_state(checkpoint, fix="x", member="c")
