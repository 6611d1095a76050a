"""Image observations (issue 18): our PPO and DQN build a CNN for image-shaped Box observations (MinAtar's net for
small images, the Nature DQN's for large ones), train it for K seeds (one call per seed) as they would alone, learn a
task that only a look at the image solves, and a loaded policy acts as the learner did."""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.test_algos import small_dqn, small_ppo
from tests.test_seeds_ppo import weights_close
from tune_runner.algos import DQN, PPO, PPOConfig
from tune_runner.algos.batched import StackedModule
from tune_runner.algos.networks import CNN, MLP, image_model, is_image

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
SPOT, PIXELS = "TuneRlSpotTest-v0", "TuneRlPixelsTest-v0"


class Spot(gym.Env):
    """MinAtar-shaped observations (10, 10, 4), bool: one lit cell in channel 0; action 0 pays 1 when it lies in
    the left half, action 1 when in the right half. 20 steps an episode: a random policy earns about 10."""

    observation_space = gym.spaces.Box(0, 1, (10, 10, 4), bool)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def _draw(self) -> np.ndarray:
        self.col = int(self.np_random.integers(10))
        obs = np.zeros((10, 10, 4), bool)
        obs[int(self.np_random.integers(10)), self.col, 0] = True
        return obs

    def step(self, action):
        reward = float(int(action) == int(self.col >= 5))
        self.t += 1
        return self._draw(), reward, False, self.t >= 20, {}


class Pixels(gym.Env):
    """Atari-like frames, uint8 (4, 40, 40) channels first; any action, reward 0."""

    observation_space = gym.spaces.Box(0, 255, (4, 40, 40), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


for _id, _entry in ((SPOT, Spot), (PIXELS, Pixels)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry, max_episode_steps=20)


def test_image_shapes_are_told_from_vectors_and_get_the_cnn_with_their_scale():
    assert is_image((10, 10, 4)) and is_image((4, 84, 84)) and is_image((84, 84, 1))
    assert not is_image((4,)) and not is_image((3, 2, 5)) and not is_image((32, 32, 32))
    assert image_model("mlp", {}, obs_shape=(4,), obs_dtype=np.float32) == ("mlp", {})
    assert image_model("mlp", {}, obs_shape=(4, 84, 84), obs_dtype=np.uint8) == \
        ("cnn", {"obs_shape": [4, 84, 84], "input_scale": 1 / 255})
    assert image_model("cnn", {"hidden": 64}, obs_shape=(10, 10, 4), obs_dtype=bool)[1]["hidden"] == 64


def test_the_cnn_shapes_on_minatar_and_atari_sized_observations():
    from tune_runner.algos.networks import build_model

    small = build_model("cnn", num_inputs=400, num_outputs=6, model_config={"obs_shape": [10, 10, 4]})
    assert small.channels_last and small.conv[0].in_channels == 4 and small.conv[0].out_channels == 16
    assert small.head[0].in_features == 16 * 8 * 8 and small.head[0].out_features == 128
    assert small(torch.zeros(5, 400)).shape == (5, 6) and small(torch.zeros(2, 5, 400)).shape == (2, 5, 6)
    # channels last: a lit cell of channel 0 at (row 2, column 7) reaches the convolution as [channel, row, col]
    obs = np.zeros((10, 10, 4), np.float32)
    obs[2, 7, 0] = 1.0
    seen = []
    small.conv[0].register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    small(torch.tensor(obs.reshape(1, -1)))
    assert seen[0].shape == (1, 4, 10, 10) and seen[0][0, 0, 2, 7] == 1.0 and seen[0].sum() == 1.0
    large = build_model("cnn", num_inputs=4 * 40 * 40, num_outputs=3,
                        model_config={"obs_shape": [4, 40, 40], "input_scale": 1 / 255})
    assert not large.channels_last and len(large.conv) == 6 and large.head[0].out_features == 512
    assert large(torch.full((3, 6400), 255.0)).shape == (3, 3)
    with pytest.raises(ValueError, match="obs_shape of 3 numbers whose product is the observation size 400"):
        build_model("cnn", num_inputs=400, num_outputs=2, model_config={"obs_shape": [10, 10]})


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_our_learners_build_the_cnn_for_images_and_keep_the_mlp_otherwise(algo):
    make = (lambda env, **kw: PPO(small_ppo(**kw), env_id=env)) if algo == "ppo" else \
        (lambda env, **kw: DQN(small_dqn(**kw), env_id=env))
    learner = make(SPOT)
    net = learner.pi if algo == "ppo" else learner.q
    assert isinstance(net.module, CNN) and net.module.shape == (10, 10, 4)
    pixels = make(PIXELS, num_seeds=2)  # two seeds: the CNN through vmap
    net = pixels.pi if algo == "ppo" else pixels.q
    out = net(torch.zeros(2, 3, 6400))
    assert out.shape == (2, 3, 3)
    if algo == "ppo":  # (DQN's iteration fills a replay first: seconds; StackedModule ran a backward through vmap)
        pixels.train_iteration()
    assert not isinstance(getattr(make("CartPole-v1"), "pi" if algo == "ppo" else "q"), type(net))


def test_k_cnns_run_one_call_per_seed_on_its_own_weights_exactly_as_alone():
    """Our CNN sets seeds_in_a_loop: on a CPU, K seeds' copies run one call per seed on the seed's slice of the
    stacked weights (a convolution under vmap took 1.4x the time of K calls on one core): each seed's output is its
    copy's alone, bit for bit (vmap's differ in the last bits), and one seed's loss reaches only its own gradients.
    A GPU, and a model without the flag, still go through vmap."""
    torch.manual_seed(0)
    copies = [CNN(400, 3, argparse.Namespace(obs_shape=[10, 10, 4], input_scale=1.0, hidden=0)) for _ in range(3)]
    stacked = StackedModule(copies, num_inputs=400, name="cnn")
    assert stacked.loops_on(torch.device("cpu")) and not stacked.loops_on(torch.device("cuda"))  # a GPU keeps vmap
    x = torch.rand(3, 5, 400)
    out = stacked(x)
    for i, alone in enumerate(copies):
        assert torch.equal(out[i], alone(x[i])), i
    out[1].square().sum().backward()
    for param in stacked.params:
        assert param.grad[1].abs().sum() > 0 and not param.grad[0].any() and not param.grad[2].any()
    mlps = [MLP(4, 2, argparse.Namespace(fcnet_hiddens=[8], fcnet_activation="tanh")) for _ in range(2)]
    assert not StackedModule(mlps, num_inputs=4, name="mlp").loops_on(torch.device("cpu"))


def test_two_image_seeds_train_as_they_would_alone():
    config = {**vars(small_ppo(seed=8, minibatch_size=64, train_batch_size=128)), "num_envs_per_env_runner": 2}
    del config["num_seeds"]
    together = PPO(PPOConfig.from_dict({**config, "num_seeds": 2}), env_id=SPOT)
    alone = [PPO(PPOConfig.from_dict({**config, "seed": s}), env_id=SPOT) for s in together.seeds]
    for _ in range(2):
        result = together.train_iteration()
        for i, learner in enumerate(alone):
            assert result[f"seed_{i}/policy_loss"] == pytest.approx(learner.train_iteration()["policy_loss"],
                                                                    rel=1e-3, abs=1e-6)
    for i, learner in enumerate(alone):
        weights_close(together, i, learner)  # tests/test_seeds_ppo.py: at most 1e-5 apart


@pytest.mark.e2e  # trains for about 10 s
def test_ppo_learns_where_the_lit_cell_is():
    """Three seeds in one learner: each ends far above a coin flip a step (10 of 20; the mean of 40 such episodes
    has a standard deviation of about 0.35), not one lucky seed (seed 1 alone reached 15.8 at 13k env steps once
    PPO's minibatch order changed, 775d5bb; seeds 2-8 18.4-19.5)."""
    from tune_runner.spec.seed_keys import per_seed

    learner = PPO(small_ppo(seed=1, lr=3e-3, train_batch_size=1024, minibatch_size=256, num_epochs=4, num_seeds=3,
                            num_envs_per_env_runner=8, metrics_num_episodes_for_smoothing=40), env_id=SPOT)
    first = per_seed(learner.train_iteration(), "episode_return_mean")
    assert all(6 < value < 14 for value in first), first  # a coin flip a step
    while learner.env_steps < 13_000:
        result = learner.train_iteration()
    last = per_seed(result, "episode_return_mean")
    assert all(value > 14 for value in last), (first, last)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_loaded_image_policy_and_its_mlflow_model_act_as_the_learner(algo, tmp_path):
    """load_policy and the MLflow model's own loader (tune_rl_policy: torch and numpy only) on a CNN policy: the
    learner's greedy actions, from flat observations as MLflow's signature takes them."""
    from tests.test_policy import write_trial
    from tune_runner import tune_rl_policy
    from tune_runner.results import pyfunc_model as model
    from tune_runner.results.policy import load_policy
    from tune_runner.trainables.agents import build_learner

    config = {"env": SPOT, "env_config": {}, "num_envs_per_env_runner": 4, "seed": 5,
              **({"train_batch_size_per_learner": 256, "minibatch_size": 64, "num_epochs": 2} if algo == "ppo" else
                 {"num_steps_sampled_before_learning_starts": 64, "train_batch_size_per_learner": 32})}
    learner = build_learner(algo, config)
    while learner.env_steps < 300:  # past DQN's warm-up: the Q-network has been trained
        learner.train_iteration()
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():  # PPO's small-gain head picks one action everywhere this early: shake its weights
        for weight in (learner.pi if algo == "ppo" else learner.q).parameters():
            weight.add_(torch.randn(weight.shape, generator=noise) * 0.3)
    checkpoint = write_trial(tmp_path / "exp" / f"Own{algo.upper()}_spot_00000", learner, config)
    obs = np.stack([Spot().reset(seed=s)[0] for s in range(64)])
    expected = learner.compute_actions(obs)
    assert len(set(expected.tolist())) > 1  # actions that depend on the image: a wrong view of it would show
    np.testing.assert_array_equal(load_policy(checkpoint).compute_actions(obs), expected)
    folder = model.save_policy(checkpoint, learner=algo, config=config, folder=tmp_path / "policy")
    logged = tune_rl_policy.Policy(folder)
    assert logged.spec["cnn"]["obs_shape"] == [10, 10, 4] and logged.spec["cnn"]["convs"] == [[4, 16, 3, 1]]
    np.testing.assert_array_equal(logged.predict(obs.reshape(64, -1).astype(np.float32)), expected)
    assert tuple(model.signature(logged.spec).inputs.to_dict()[0]["tensor-spec"]["shape"]) == (-1, 400)
    learner.close()


def test_minatar_breakout_registers_itself_and_trains_through_the_cnn():
    from tune_runner.tuning.preflight import unknown_env

    assert unknown_env("MinAtar/Breakout-v1") is None  # registered on first use (the minatar test extra)
    learner = PPO(small_ppo(seed=2, train_batch_size=256, num_envs_per_env_runner=4), env_id="MinAtar/Breakout-v1")
    assert isinstance(learner.pi.module, CNN) and learner.pi.module.shape == (10, 10, 4)
    assert learner.pi.module.conv[0].in_channels == 4 and learner.env.num_actions == 3  # v1: the minimal set
    result = learner.train_iteration()
    assert result["env_steps"] > 200 and np.isfinite(result["policy_loss"])  # autoreset steps are not steps
    obs = learner.env.envs[0].env.envs[0].unwrapped.game.state()[None]
    assert learner.compute_actions(obs).shape == (1,)


def test_an_env_family_whose_package_is_missing_is_named_with_its_pip_line(monkeypatch):
    from tune_runner import plugins
    from tune_runner.tuning.preflight import unknown_env

    monkeypatch.setitem(plugins.NAMESPACES, "Nowhere/", ("tune_rl_no_such_module", "register", "no-such-games"))
    assert unknown_env("Nowhere/Thing-v0") == "Nowhere/Thing-v0 needs the no-such-games package: " \
                                              "pip install no-such-games"


def test_a_video_of_minatar_shows_its_frames_scaled_and_enlarged(tmp_path):
    """MinAtar renders 10x10 float frames in [0, 1]: cast to uint8 as they came, every video of the shipped Breakout
    space was black and 10 pixels a side. A video holds them scaled to 0-255 and enlarged to 160 pixels a side
    (each cell a 16x16 block); uint8 frames of a usual size go in as they are."""
    import imageio.v2 as imageio

    from tune_runner.plugins import register_namespace
    from tune_runner.results.evaluate import Recorder, video_frame

    register_namespace("MinAtar/Breakout-v1")
    env = gym.make("MinAtar/Breakout-v1", render_mode="rgb_array")
    env.reset(seed=0)
    frames = []
    for _ in range(5):
        frames.append(env.render())
        env.step(1)
    assert frames[0].dtype == np.float64 and frames[0].shape == (10, 10, 3) and frames[0].max() <= 1
    recorder = Recorder(tmp_path / "breakout.mp4", fps=10)
    for frame in frames:
        recorder.add(frame)
    recorder.close(keep=True)
    with imageio.get_reader(tmp_path / "breakout.mp4") as reader:
        written = [np.asarray(frame) for frame in reader]
    expected = video_frame(frames[0], unit_floats=True)
    assert len(written) == 5 and written[0].shape == expected.shape == (160, 160, 3)
    assert np.array_equal(expected[::16, ::16], np.rint(frames[0] * 255).astype(np.uint8))
    assert np.abs(written[0].astype(int) - expected.astype(int)).mean() < 8 and written[0].max() > 150  # H.264: lossy
    usual = np.random.default_rng(0).integers(0, 256, (400, 600, 3), dtype=np.uint8)
    assert np.array_equal(video_frame(usual, unit_floats=False), usual)
    assert video_frame(np.full((200, 200, 3), 300.0), unit_floats=False).max() == 255
