"""load_policy and evaluate without Ray: checkpoints written by the trainable's own save code in a
Tune-shaped trial folder, an RLlib checkpoint laid out as a Learner saves its RLModule, the CLI in-process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from tune_runner.errors import UserError
from tune_runner.results import evaluate as evaluation
from tune_runner.results.policy import OwnPolicy, RLlibPolicy, load_policy
from tune_runner.trainables.agents import build_learner
from tune_runner.trainables.own import OwnTrainable

CONFIGS = {
    "ppo": {"env": "CartPole-v1", "env_config": {}, "num_envs_per_env_runner": 4, "train_batch_size_per_learner": 256,
            "minibatch_size": 64, "num_epochs": 2, "fcnet_hiddens": [16, 16], "fcnet_activation": "relu", "seed": 1},
    "dqn": {"env": "CartPole-v1", "env_config": {}, "num_envs_per_env_runner": 4, "train_batch_size": 32,
            "fcnet_hiddens": [16, 8], "dueling": True, "num_steps_sampled_before_learning_starts": 64, "seed": 3},
}
MASKED_ENV = "TuneRlMaskedPolicyTest-v0"


def write_trial(trial: Path, learner, config: dict, *, index: int = 1) -> Path:
    """A trial folder as Tune leaves it: params.json, and checkpoint_NNNNNN written by OwnTrainable.save_checkpoint
    (called on a stand-in: building the Trainable itself would start Ray)."""
    trial.mkdir(parents=True, exist_ok=True)
    (trial / "params.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    checkpoint = trial / f"checkpoint_{index:06d}"
    checkpoint.mkdir()
    OwnTrainable.save_checkpoint(SimpleNamespace(learner=learner, runners=None), str(checkpoint))
    return checkpoint


@pytest.fixture(scope="module", params=["ppo", "dqn"])
def trained(request, tmp_path_factory):
    name = request.param
    learner = build_learner(name, CONFIGS[name])
    learner.train_iteration()
    trial = tmp_path_factory.mktemp(name) / "exp" / f"Own{name.upper()}_CartPole-v1_00000"
    checkpoint = write_trial(trial, learner, CONFIGS[name])
    (trial / "checkpoint_000000").mkdir()  # an older one, left empty: never read
    yield SimpleNamespace(name=name, learner=learner, trial=trial, checkpoint=checkpoint)
    learner.close()


def observations(n: int = 64) -> np.ndarray:
    return np.random.default_rng(0).normal(scale=[1.0, 1.0, 0.1, 1.0], size=(n, 4)).astype(np.float32)


def test_actions_are_the_learners_own(trained):
    policy = load_policy(trained.checkpoint)
    assert isinstance(policy, OwnPolicy) and policy.kind == trained.name
    assert policy.env_id == "CartPole-v1" and policy.env_config == {}
    obs = observations()
    expected = trained.learner.compute_actions(obs, explore=False)
    assert len(set(expected.tolist())) == 2  # both actions occur, so a wrong network would show
    np.testing.assert_array_equal(policy.compute_actions(obs), expected)
    singles = [policy.compute_single_action(o) for o in obs]
    assert singles == expected.tolist() and all(type(a) is int for a in singles)
    by_id = policy.compute_actions({"obs1": obs[0], "obs2": obs[1], "obs3": obs[2]})
    assert by_id == {"obs1": expected[0], "obs2": expected[1], "obs3": expected[2]}
    assert policy.compute_actions({}) == {}
    with pytest.raises(ValueError, match="compute_single_action"):
        policy.compute_actions(obs[0])  # one observation is not a batch


def test_trial_folder_and_bundle_take_the_newest_checkpoint(trained, tmp_path):
    from tune_runner.results import export
    from tune_runner.results.analysis import Best
    from tune_runner.spec.experiment import load_spec
    from tune_runner.trainables.catalog import backend

    assert load_policy(trained.trial).checkpoint == trained.checkpoint
    spec = load_spec("ppo_small" if trained.name == "ppo" else "dqn_small")
    best = Best(trial_id="t1", config=CONFIGS[trained.name], value=1.0, metric=spec.metric, mode="max",
                scope="last", last_result={}, trial_path=str(trained.trial))
    bundle = export.bundle(spec, best, record=backend(spec.trainable), experiment="exp").write(
        tmp_path / "best.yaml")
    policy = load_policy(bundle)
    assert policy.checkpoint == trained.checkpoint.resolve()
    np.testing.assert_array_equal(policy.compute_actions(observations()),
                                  trained.learner.compute_actions(observations(), explore=False))


def test_the_load_policy_docstring_example_runs_as_written(trained, tmp_path, monkeypatch):
    """tr.load_policy's docstring once called `policy.act`, which no policy has: its example is run here as a
    doctest, from a folder holding the bundle it loads."""
    import doctest

    import tune_runner as tr
    from tune_runner.results import export
    from tune_runner.results.analysis import Best
    from tune_runner.spec.experiment import load_spec
    from tune_runner.trainables.catalog import backend

    spec = load_spec("ppo_small" if trained.name == "ppo" else "dqn_small")
    best = Best(trial_id="t1", config=CONFIGS[trained.name], value=1.0, metric=spec.metric, mode="max",
                scope="last", last_result={}, trial_path=str(trained.trial))
    export.bundle(spec, best, record=backend(spec.trainable), experiment="exp").write(tmp_path / "cartpole.yaml")
    monkeypatch.chdir(tmp_path)
    [example] = doctest.DocTestFinder().find(tr.load_policy, "load_policy", globs={})
    ran = doctest.DocTestRunner(verbose=False).run(example)
    assert ran.attempted >= 6 and ran.failed == 0, ran


def test_bundles_without_a_usable_checkpoint(tmp_path):
    from tune_runner.results import export
    from tune_runner.results.analysis import Best
    from tune_runner.spec.experiment import load_spec
    from tune_runner.trainables.catalog import backend

    spec = load_spec("ppo_small")
    best = Best(trial_id="t1", config=CONFIGS["ppo"], value=1.0, metric=spec.metric, mode="max", scope="last",
                last_result={}, trial_path=str(tmp_path / "gone"))
    data = export.bundle(spec, best, record=backend(spec.trainable), experiment="exp")
    path = data.write(tmp_path / "old.yaml")
    with pytest.raises(UserError, match=r"old\.yaml: checkpoint: missing .*export again .* or pass a checkpoint"):
        load_policy(path)
    path = replace(data, checkpoint=str(tmp_path / "moved" / "checkpoint_000001")).write(tmp_path / "b.yaml")
    with pytest.raises(UserError, match=r"b\.yaml: checkpoint: .*moved/checkpoint_000001 no longer exists"):
        load_policy(path)


def test_evaluate_matches_a_hand_run_episode(trained):
    policy = load_policy(trained.checkpoint)
    result = evaluation.evaluate(policy, episodes=3, seed=5)
    assert len(result.returns) == len(result.lengths) == 3
    assert result.returns == tuple(float(n) for n in result.lengths)  # CartPole pays 1 per step
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=6)  # episode 1 of seed 5
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(int(trained.learner.compute_actions(obs[None])[0]))
        total, done = total + reward, terminated or truncated
    assert result.returns[1] == total
    assert evaluation.evaluate(policy, episodes=3, seed=5) == result  # deterministic


def test_cli_prints_a_compact_summary(trained, cli):
    expected = evaluation.evaluate(load_policy(trained.checkpoint), episodes=2, seed=3)
    result = cli("evaluate", str(trained.trial), "--episodes", "2", "--seed", "3")
    assert result.status == 0 and result.err == "", result.err
    lines = result.out.splitlines()
    assert lines == [f"policy     {trained.name}  {trained.checkpoint}",
                     f"evaluate   CartPole-v1  2 episodes (seeds 3-4)  return {expected.mean:.1f} ± "
                     f"{expected.std:.1f}  length {expected.mean_length:.1f}"]


def test_video_holds_every_frame(trained, cli, tmp_path):
    import imageio.v2 as imageio  # imageio, imageio-ffmpeg and pygame (CartPole's renderer): the test extra

    video = tmp_path / "out.mp4"
    result = cli("evaluate", str(trained.checkpoint), "--episodes", "2", "--video", str(video))  # README's: no --render
    assert result.status == 0, result.err
    steps = sum(evaluation.evaluate(load_policy(trained.checkpoint), episodes=2, seed=0).lengths)
    assert f"video      {video}  ({steps + 2} frames)" in result.out  # each reset's frame, then one per step
    assert video.stat().st_size > 1000 and [p.name for p in tmp_path.iterdir()] == ["out.mp4"]
    with imageio.get_reader(video) as reader:
        assert reader.count_frames() == steps + 2


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_masked_actions_are_never_chosen(name, tmp_path):
    from tests.test_algos import MaskedEnv

    if MASKED_ENV not in gym.registry:
        gym.register(MASKED_ENV, entry_point=MaskedEnv)
    config = {**CONFIGS[name], "env": MASKED_ENV, "num_envs_per_env_runner": 2}
    learner = build_learner(name, config)
    learner.train_iteration()
    policy = load_policy(write_trial(tmp_path / "trial", learner, config))
    obs = {"observations": np.random.default_rng(1).uniform(-1, 1, (64, 3)).astype(np.float32),
           "action_mask": np.eye(4, dtype=np.int8)[np.arange(64) % 4]}
    np.testing.assert_array_equal(policy.compute_actions(obs), np.arange(64) % 4)
    single = {"observations": obs["observations"][5], "action_mask": obs["action_mask"][5]}
    assert policy.compute_single_action(single) == 1
    assert policy.compute_actions({"a": single, "b": single}) == {"a": 1, "b": 1}
    several = {"observations": obs["observations"], "action_mask": np.ones((64, 4), np.int8)}
    np.testing.assert_array_equal(policy.compute_actions(several), learner.compute_actions(several))
    result = evaluation.evaluate(policy, episodes=3, seed=0)  # MaskedEnv raises on a forbidden action
    assert result.lengths == (7, 7, 7)
    randomly = evaluation.evaluate(policy, episodes=3, seed=0, epsilon=1.0)  # every action random, none masked
    assert randomly.lengths == (7, 7, 7)
    learner.close()


def test_epsilon_takes_seeded_random_actions_that_repeat(trained):
    """evaluate --epsilon: a random action with that probability, from each episode's own generator, so the
    same seed gives the same episodes; 0 is the greedy run itself, 1 a uniformly random policy."""
    policy = load_policy(trained.checkpoint)
    greedy = evaluation.evaluate(policy, episodes=8, seed=0)
    assert evaluation.evaluate(policy, episodes=8, seed=0, epsilon=0.0) == greedy
    noisy = evaluation.evaluate(policy, episodes=8, seed=0, epsilon=0.5)
    assert noisy == evaluation.evaluate(policy, episodes=8, seed=0, epsilon=0.5) and noisy != greedy
    random = evaluation.evaluate(policy, episodes=20, seed=0, epsilon=1.0)
    assert 10 < random.mean_length < 40  # CartPole under a random policy: about 22 steps
    assert "(seeds 0-7, epsilon 0.5)" in evaluation.summary(noisy, env_id="CartPole-v1", seed=0, epsilon=0.5)


# ---- RLlib's checkpoints: the RLModule part, laid out as Learner.save_to_path lays it out ---------------


@pytest.fixture(scope="module", params=["PPO", "DQN"])
def rllib_checkpoint(request, tmp_path_factory):
    """<trial>/checkpoint_000000/learner_group/learner/rl_module/default_policy (a MultiRLModule's save) and
    <trial>/params.json. Building the whole Algorithm would start Ray; the module is what we read."""
    import pickle

    import torch
    from ray.rllib.algorithms.dqn import DQN, DQNConfig
    from ray.rllib.algorithms.ppo import PPO, PPOConfig

    algo, config_cls = {"PPO": (PPO, PPOConfig), "DQN": (DQN, DQNConfig)}[request.param]
    config = config_cls().environment("CartPole-v1").rl_module(model_config={"fcnet_hiddens": [8]})
    module = config.get_multi_rl_module_spec(env=gym.make("CartPole-v1")).build()
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking weights: a fresh policy head is near uniform, its argmax constant
        for param in module["default_policy"].parameters():
            param.copy_(torch.randn(param.shape, generator=noise))
    trial = tmp_path_factory.mktemp(request.param) / f"{request.param}_CartPole-v1_00000"
    checkpoint = trial / "checkpoint_000000"
    module.save_to_path(checkpoint / "learner_group" / "learner" / "rl_module")
    with open(checkpoint / "class_and_ctor_args.pkl", "wb") as f:  # as Algorithm.save_to_path writes it
        pickle.dump({"class": algo, "ctor_args_and_kwargs": ((config.get_state(),), {})}, f)
    (trial / "params.json").write_text(json.dumps({"env": "CartPole-v1", "env_config": {}, "lr": 0.001}))
    return SimpleNamespace(module=module["default_policy"], checkpoint=checkpoint, trial=trial)


def test_rllib_actions_are_the_modules_greedy_ones(rllib_checkpoint):
    import torch
    from ray.rllib.core import Columns

    policy = load_policy(rllib_checkpoint.trial)
    assert isinstance(policy, RLlibPolicy) and policy.env_id == "CartPole-v1"
    obs = observations()
    out = rllib_checkpoint.module.forward_inference({Columns.OBS: torch.from_numpy(obs)})
    expected = out[Columns.ACTIONS] if Columns.ACTIONS in out else out[Columns.ACTION_DIST_INPUTS].argmax(-1)
    expected = expected.numpy()
    assert len(set(expected.tolist())) == 2
    np.testing.assert_array_equal(policy.compute_actions(obs), expected)
    assert [policy.compute_single_action(o) for o in obs[:5]] == expected[:5].tolist()
    assert policy.compute_actions({"x": obs[0]}) == {"x": expected[0]}
    forced = {"observations": obs, "action_mask": np.tile(np.array([[0, 1]], np.int8), (64, 1))}
    assert (policy.compute_actions(forced) == 1).all()  # the mask wins over the module's choice
    assert len(evaluation.evaluate(policy, episodes=2, seed=0).returns) == 2


def test_rllib_checkpoint_outside_its_trial_reads_the_env_from_the_algorithm_config(rllib_checkpoint, tmp_path):
    import shutil

    moved = shutil.copytree(rllib_checkpoint.checkpoint, tmp_path / "checkpoint_000000")
    assert load_policy(moved).env_id == "CartPole-v1"
    (moved / "class_and_ctor_args.pkl").unlink()
    with pytest.raises(UserError, match="no params.json beside it and its Algorithm config is unreadable"):
        load_policy(moved)


def test_paths_that_hold_no_policy(tmp_path):
    with pytest.raises(UserError, match=r"nothing: no such file or folder; expected a checkpoint folder"):
        load_policy(tmp_path / "nothing")
    (tmp_path / "experiment_state-2026.json").write_text("{}")
    with pytest.raises(UserError, match="an experiment folder: pass one of its trial folders"):
        load_policy(tmp_path)
    (tmp_path / "trial").mkdir()
    (tmp_path / "trial" / "params.json").write_text('{"env": "CartPole-v1"}')
    with pytest.raises(UserError, match="this trial folder holds no checkpoint"):
        load_policy(tmp_path / "trial")
    (tmp_path / "trial" / "checkpoint_000003").mkdir()  # the oracle's kind: no learner.pkl
    with pytest.raises(UserError, match="checkpoint_000003: not a policy .*only ppo, dqn, sac and rllib"):
        load_policy(tmp_path / "trial")
