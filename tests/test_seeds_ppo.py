"""Our PPO with num_seeds = K (issue 16): each seed trains as it would alone, checkpoints are exact and keep
the one-seed format per seed, results carry every seed and their aggregate, rollout mode collects for all."""

from __future__ import annotations

import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from tests.test_algos import MaskedEnv, same, small_ppo
from tune_runner.algos import PPO, PPOConfig
from tune_runner.algos.seeds import aggregate
from tune_runner.plugins import register_model

FIXTURE = Path(__file__).parent / "fixtures" / "ppo_state_k1.pkl"
MASKED_ID = "TuneRlMaskedTest-v0"


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def weights_close(k_learner: PPO, seed: int, alone: PPO, *, atol: float = 1e-5) -> float:
    """The largest difference between seed `seed`'s weights in `k_learner` and `alone`'s (asserted small)."""
    ours, theirs = k_learner.get_weights(), alone.get_weights()
    worst = max(float(np.abs(ours[net][key][seed] - theirs[net][key]).max()) for net in theirs for key in theirs[net])
    assert worst <= atol, f"seed {seed} differs from its run alone by {worst}"
    return worst


def train_side_by_side(together: PPO, alone: list[PPO], iterations: int) -> None:
    """`iterations` of a K-seed learner and of each seed's learner alone; then each seed's weights match."""
    for _ in range(iterations):
        together.train_iteration()
        for learner in alone:
            learner.train_iteration()
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)


def minibatch_counts(learner: PPO, before: np.ndarray, size: int) -> set[int]:
    """How many minibatches each seed cut in the iteration that took it from `before` env steps."""
    return {-(-int(n) // size) for n in learner.seed_env_steps - before}


def masked_env() -> str:
    if MASKED_ID not in gym.registry:
        gym.register(MASKED_ID, entry_point=MaskedEnv)
    return MASKED_ID


# CartPole's seeds end episodes at different times, so their valid steps differ: minibatch 62 makes them cut
# 4 or 5 minibatches (padding, and seeds that sit out the last steps; first in the 4th iteration). Acrobot (6
# features, 3 actions, not a tuned env) and the masked env (action masks) end every episode on the same step in all
# seeds.
@pytest.mark.parametrize(("env_id", "overrides", "iterations"), [
    ("CartPole-v1", {"minibatch_size": 62, "lr": [[0, 3e-3], [2000, 1e-3]]}, 4),
    ("Acrobot-v1", {"num_envs_per_env_runner": 2, "minibatch_size": 100, "entropy_coeff": 0.01}, 4),
    ("masked", {"minibatch_size": 50}, 3),
], ids=["cartpole", "acrobot", "masked"])
def test_each_of_three_seeds_trains_as_it_would_alone(env_id, overrides, iterations, noise_source):
    env_id = masked_env() if env_id == "masked" else env_id
    config = small_ppo(seed=11, **overrides)
    together = PPO(PPOConfig.from_dict({**vars_of(config), "num_seeds": 3}), env_id=env_id)
    alone = [PPO(PPOConfig.from_dict({**vars_of(config), "seed": s}), env_id=env_id) for s in together.seeds]
    assert {learner.noise.source for learner in (together, *alone)} == {noise_source}
    ragged = False  # some iteration gave the seeds different numbers of minibatches (padding, sat-out steps)
    for _ in range(iterations):
        before = together.seed_env_steps.copy()
        result = together.train_iteration()
        ragged |= len(minibatch_counts(together, before, config.minibatch_size)) > 1
        for i, learner in enumerate(alone):
            own = learner.train_iteration()
            assert result[f"seed_{i}/env_steps"] == own["env_steps"]
            assert result[f"seed_{i}/episodes"] == own["episodes"]
            assert result[f"seed_{i}/policy_loss"] == pytest.approx(own["policy_loss"], rel=1e-3, abs=1e-6)
    assert ragged or env_id != "CartPole-v1", "the seeds never cut different minibatch counts: the test proves less"
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)
    # The seeds are independent runs, not copies.
    w = together.get_weights()["pi"]["0.weight"]
    assert not np.allclose(w[0], w[1])


def vars_of(config: PPOConfig) -> dict:
    return {k: v for k, v in vars(config).items() if k not in ("num_seeds",)}


POPULATION = {"lr": [3e-3, 1e-3, 2e-3], "gamma": [0.99, 0.9, 0.97], "lambda": [0.95, 0.8, 1.0],
              "clip_param": [0.2, 0.05, 0.3], "vf_loss_coeff": [0.5, 1.0, 0.25], "entropy_coeff": [0.0, 0.05, 0.01]}


def population(env_id: str, **overrides) -> tuple[PPO, list[PPO]]:
    """A 3-seed learner of POPULATION, and each seed's one-seed learner of its own config (`member`)."""
    config = PPOConfig.from_dict({**vars_of(small_ppo(seed=5, **overrides)), "num_seeds": 3, "population": POPULATION})
    return PPO(config, env_id=env_id), [PPO(config.member(i), env_id=env_id) for i in range(3)]


# A population of configs (issue 16, "later"): three seeds that differ in every continuous setting PPO has, each
# trained as the one-seed learner with its own values would be. CartPole's seeds cut different minibatch counts
# (padding); Pendulum has Box actions and large value errors (unclipped).
@pytest.mark.parametrize(("env_id", "overrides"), [
    ("CartPole-v1", {"minibatch_size": 62}),
    ("Pendulum-v1", {"minibatch_size": 64, "vf_clip_param": None}),
], ids=["cartpole", "pendulum"])
def test_a_population_of_three_configs_trains_each_as_its_own_config_would_alone(env_id, overrides):
    together, alone = population(env_id, **overrides)
    assert [learner.seeds[0] for learner in alone] == together.seeds
    assert [learner.config.gamma for learner in alone] == POPULATION["gamma"]
    for _ in range(3):
        result = together.train_iteration()
        for i, learner in enumerate(alone):
            own = learner.train_iteration()
            assert result[f"seed_{i}/lr"] == own["lr"] == POPULATION["lr"][i]
            for name in ("policy_loss", "vf_loss", "entropy"):
                assert result[f"seed_{i}/{name}"] == pytest.approx(own[name], rel=1e-3, abs=1e-6), name
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)


def test_each_seed_of_a_population_scales_its_rewards_by_returns_discounted_with_its_own_gamma():
    """Reward scaling divides by the std of each env's discounted return: seed i's gamma, not seed 0's. (Compared
    after one iteration: later, Adam's steps on near-zero gradients make float noise lr-sized, seeds or no seeds.)"""
    together, alone = population("Pendulum-v1", normalize_rewards=True)
    result = together.train_iteration()
    for i, learner in enumerate(alone):
        own = learner.train_iteration()
        np.testing.assert_allclose(together.reward_scaler.stats.var[i], learner.reward_scaler.stats.var[0], rtol=1e-6)
        assert result[f"seed_{i}/vf_loss"] == pytest.approx(own["vf_loss"], rel=1e-4)
    assert len(set(together.reward_scaler.stats.var[:, 0])) == 3


def test_a_population_names_a_bad_setting_its_length_or_a_bad_value():
    def refusal(population: object) -> str:
        with pytest.raises(ValueError) as caught:
            small_ppo(num_seeds=3, population=population)
        return str(caught.value)

    assert "did you mean 'gamma'" in refusal({"gama": [0.9, 0.9, 0.9]})
    assert refusal({"num_epochs": [1, 2, 3]}).startswith("unknown PPOConfig.population setting 'num_epochs'")
    assert refusal({"gamma": [0.9, 0.99]}) == ("PPOConfig.population.gamma must list one value per seed (3, "
                                               "num_seeds), got gamma=[0.9, 0.99]")
    assert refusal({"gamma": [0.9, 1.5, 0.9]}) == ("PPOConfig.population, seed 1: PPOConfig.gamma must be in (0, 1], "
                                                   "got gamma=1.5")
    assert refusal([0.9]).startswith("PPOConfig.population must be a mapping")
    same_values = small_ppo(num_seeds=2, population={"gamma": [0.9, 0.9]})
    assert same_values.member(1) == small_ppo(seed=1_000_000, gamma=0.9)


def test_results_hold_every_seed_and_the_aggregate():
    learner = PPO(small_ppo(num_seeds=3, seed_aggregate="median"), env_id="CartPole-v1")
    for _ in range(3):
        result = learner.train_iteration()
    for name in ("episode_return_mean", "episode_len_mean", "policy_loss", "vf_loss", "entropy", "kl", "lr"):
        per_seed = [result[f"seed_{i}/{name}"] for i in range(3)]
        assert result[name] == aggregate(per_seed, "median")
    assert result["env_steps"] == min(result[f"seed_{i}/env_steps"] for i in range(3)) == learner.env_steps
    assert result["episodes"] == min(result[f"seed_{i}/episodes"] for i in range(3)) > 0
    assert "seed_3/episode_return_mean" not in result and "seed_0/sps" not in result
    one = PPO(small_ppo(), env_id="CartPole-v1").train_iteration()
    assert not any(key.startswith("seed_") for key in one)  # one seed: the names it always had


def test_a_k_seed_checkpoint_restores_exactly_and_each_seed_is_a_one_seed_checkpoint(noise_source):
    config = small_ppo(num_seeds=3, lr=[[0, 1e-3], [600, 1e-4]])
    original = PPO(config, env_id="CartPole-v1")
    assert original.noise.source == noise_source
    for _ in range(2):
        original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    assert state["num_seeds"] == 3 and len(state["seeds"]) == 3
    draws = 2 * (1 + (noise_source == "counter") * -(-config.train_batch_size // config.num_envs_per_env_runner))
    assert [seed["rngs"]["counter"] for seed in state["seeds"]] == [draws] * 3  # 2 plans (and every step's noise)
    restored = PPO(config, env_id="CartPole-v1")
    restored.set_state(state)
    assert restored.stats.lengths.any()  # mid-episode
    lone = PPO(small_ppo(seed=original.seeds[2], lr=[[0, 1e-3], [600, 1e-4]]), env_id="CartPole-v1")
    lone.set_state(state["seeds"][2])  # seed 2's part, in the one-seed format
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
        lone.train_iteration()
    assert all(np.array_equal(a, b) for net in ("pi", "vf")
               for a, b in zip(original.get_weights()[net].values(), restored.get_weights()[net].values(),
                               strict=True))
    weights_close(original, 2, lone)
    with pytest.raises(ValueError, match="state of 3 seed.*num_seeds=2"):
        PPO(small_ppo(num_seeds=2), env_id="CartPole-v1").set_state(state)


def test_a_one_seed_state_written_before_seeds_existed_restores_and_continues_as_it_did():
    """The sampling continues as it did (the torch generators' states are in the old state). The minibatches do not:
    since issue 44 they come from the seed's counter stream (seed_streams.minibatch_plan), which the old state does
    not hold, so it starts at draw 0 and the losses and weights part from the saved ones."""
    saved = pickle.loads(FIXTURE.read_bytes())  # tests/fixtures/make_ppo_state_fixture.py, run on the old code
    assert "counter" not in saved["state"]["rngs"]
    learner, again = (PPO(PPOConfig.from_dict(saved["config"]), env_id="CartPole-v1") for _ in range(2))
    learner.set_state(saved["state"])
    again.set_state(saved["state"])
    result = learner.train_iteration()
    assert result.keys() - {"sps"} == saved["next_result"].keys()
    for key in ("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "lr"):
        assert result[key] == pytest.approx(saved["next_result"][key], rel=1e-12), key
    assert same(result, again.train_iteration())  # the old state still fixes where training goes
    state = learner.get_state()
    assert set(state) == set(saved["state"])  # and one seed still saves that format,
    assert state["rngs"]["counter"] == 1  # with the plan's draw beside the generators


@register_model("tune_rl_test_seeds_net")
class TwoLayer(nn.Module):
    def __init__(self, num_inputs, num_outputs, args):
        super().__init__()
        self.hidden, self.out = nn.Linear(num_inputs, 12), nn.Linear(12, num_outputs)

    def forward(self, obs):
        return self.out(torch.relu(self.hidden(obs)))


@register_model("tune_rl_test_seeds_branchy")
class Branchy(TwoLayer):
    def forward(self, obs):
        if obs.sum() > 0:  # data-dependent Python control flow: vmap cannot run it
            return self.out(self.hidden(obs))
        return self.out(torch.relu(self.hidden(obs)))


def test_a_registered_model_trains_k_seeds_through_vmap_or_is_refused_in_one_line():
    config = {**vars_of(small_ppo(seed=4)), "model": "tune_rl_test_seeds_net"}
    together = PPO(PPOConfig.from_dict({**config, "num_seeds": 2}), env_id="CartPole-v1")
    alone = [PPO(PPOConfig.from_dict({**config, "seed": s}), env_id="CartPole-v1") for s in together.seeds]
    train_side_by_side(together, alone, 2)
    assert set(together.get_state()["seeds"][0]["pi"]) == set(alone[0].get_state()["pi"]) == {
        "hidden.weight", "hidden.bias", "out.weight", "out.bias"}
    with pytest.raises(ValueError, match="model 'tune_rl_test_seeds_branchy' does not run under torch.func.vmap"):
        PPO(PPOConfig.from_dict({**config, "model": "tune_rl_test_seeds_branchy", "num_seeds": 2}),
            env_id="CartPole-v1")
    PPO(PPOConfig.from_dict({**config, "model": "tune_rl_test_seeds_branchy"}), env_id="CartPole-v1")  # K = 1 runs


@pytest.mark.parametrize(("key", "value", "says"), [("num_seeds", 0, "must be > 0"),
                                                    ("num_seeds", 2.5, "must be a whole number"),
                                                    ("seed_aggregate", "iqr", "did you mean")])
def test_seed_settings_are_checked_naming_the_key(key, value, says):
    with pytest.raises(ValueError, match=f"(?s){key}.*{says}"):
        PPOConfig.from_dict({key: value})


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])  # Pendulum: Box actions and a log-std to ship
def test_rollout_mode_collects_for_every_seed_and_each_seed_trains_as_it_would_alone(env):
    from tests.test_rollouts import PPO_CONFIG, WORKERS, stand_ins
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.rollouts import Workers

    def rollout_run(config: dict) -> tuple[PPO, list[dict]]:
        trainer = build_learner("ppo", config)
        workers, gather, _ = stand_ins("ppo", config)
        results = [trainer.train_iteration(Workers(trainer, gather=gather, count=WORKERS)) for _ in range(3)]
        assert all(w.get_weights().keys() == trainer.get_weights().keys() for w in workers)
        return trainer, results

    config = {**PPO_CONFIG, "env": env, "minibatch_size": 100}
    together, results = rollout_run({**config, "num_seeds": 2})
    assert ("log_std" in together.get_weights()) == (env == "Pendulum-v1")
    assert together.env.num_envs == 2 * config["num_envs_per_env_runner"]
    for i, seed in enumerate(together.seeds):
        alone, own = rollout_run({**config, "seed": seed})
        assert [r[f"seed_{i}/env_steps"] for r in results] == [r["env_steps"] for r in own]
        assert [r[f"seed_{i}/episodes"] for r in results] == [r["episodes"] for r in own]
        weights_close(together, i, alone)
