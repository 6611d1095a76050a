"""Action masking on RLlib's new API stack: our PPO and DQN modules never pick a forbidden action.

The modules are built from the RLModuleSpec that rllib_config installs, and driven with torch
batches directly; no Ray.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from tune_runner.errors import UserError
from tune_runner.trainables import masking
from tune_runner.trainables.catalog import backend
from tune_runner.trainables.rllib import rllib_config

MASKED_ENV = "TuneRlMaskTest-v0"
# Row 0 allows actions 0 and 3, row 1 only action 1, row 2 nothing (a final observation: left alone).
MASK = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.int8)
ALLOWED = MASK.bool() | ~MASK.bool().any(-1, keepdim=True)


class MaskEnv(gym.Env):
    observation_space = gym.spaces.Dict({"observations": gym.spaces.Box(-1, 1, (3,), np.float32),
                                         "action_mask": gym.spaces.MultiBinary(4)})
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


@pytest.fixture(autouse=True, scope="module")
def _mask_env():
    if MASKED_ENV not in gym.registry:
        gym.register(MASKED_ENV, entry_point=MaskEnv)


@pytest.fixture(autouse=True)
def _no_ray(forbid_ray):
    """These tests drive modules, env runners and learners in this process: none may start Ray."""


def build(algo: str, **settings):
    """The module RLlib would build on a Learner, from our flat trial config."""
    config = rllib_config(algo, {"env": MASKED_ENV, "env_config": {}, "fcnet_hiddens": [16], **settings})
    config.validate()
    module = config.get_rl_module_spec(env=gym.make(MASKED_ENV)).build()
    torch.manual_seed(0)
    return module


def batch(mask: torch.Tensor = MASK, obs: torch.Tensor | None = None) -> dict:
    obs = torch.randn(len(mask), 3, generator=torch.Generator().manual_seed(1)) if obs is None else obs
    return {Columns.OBS: {"observations": obs, "action_mask": mask}}


def test_rllib_config_installs_our_module_only_for_masked_envs():
    assert rllib_config("PPO", {"env": MASKED_ENV}).rl_module_spec.module_class \
        is masking.MaskedPPOTorchModule
    assert rllib_config("DQN", {"env": MASKED_ENV}).rl_module_spec.module_class \
        is masking.MaskedDQNTorchModule
    plain = rllib_config("PPO", {"env": "CartPole-v1"}).rl_module_spec.module_class
    assert not issubclass(plain, masking.MaskedPPOTorchModule)


def test_an_algorithm_we_cannot_mask_is_refused_before_launch():
    with pytest.raises(UserError, match="rllib/APPO cannot mask actions.*use one of rllib/PPO, rllib/DQN"):
        rllib_config("APPO", {"env": MASKED_ENV})
    assert "rllib/APPO cannot mask actions" in backend("rllib/APPO").check_config({"env": MASKED_ENV})


def test_ppo_never_samples_or_picks_a_masked_action():
    module = build("PPO")
    logits = module.forward_exploration(batch())[Columns.ACTION_DIST_INPUTS]
    dist = module.get_exploration_action_dist_cls().from_logits(logits)
    samples = torch.stack([dist.sample() for _ in range(2000)])  # [draws, rows]
    for row in range(len(MASK)):
        taken = set(samples[:, row].tolist())
        assert taken <= set(ALLOWED[row].nonzero().flatten().tolist()), (row, taken)
    assert set(samples[:, 0].tolist()) == {0, 3}  # both allowed actions still explored
    greedy = module.get_inference_action_dist_cls().from_logits(
        module.forward_inference(batch())[Columns.ACTION_DIST_INPUTS]).to_deterministic().sample()
    assert ALLOWED[torch.arange(len(MASK)), greedy].all()


def test_ppo_trains_on_the_masked_distribution_and_its_value_ignores_the_mask():
    module = build("PPO")
    out = module.forward_train(batch())
    logits = out[Columns.ACTION_DIST_INPUTS]
    assert torch.isfinite(logits).all()
    assert (logits[~ALLOWED] == torch.finfo(logits.dtype).min).all()
    dist = module.get_train_action_dist_cls().from_logits(logits)
    assert torch.isfinite(dist.entropy()).all() and torch.isfinite(dist.kl(dist)).all()
    assert torch.isfinite(dist.logp(torch.tensor([3, 1, 2]))).all()
    logits[ALLOWED].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)
    values = module.compute_values(batch())
    assert torch.equal(values, module.compute_values(batch(mask=torch.ones_like(MASK))))


def test_dqn_explores_and_exploits_only_allowed_actions():
    module = build("DQN", epsilon=[[0, 1.0], [10, 1.0]])  # every exploration action is random
    random_actions = torch.stack([module.forward_exploration(batch(), t=0)[Columns.ACTIONS] for _ in range(500)])
    for row in range(2):  # the all-zero row may take anything: its action is never used
        assert set(random_actions[:, row].tolist()) == set(MASK[row].nonzero().flatten().tolist()), row
    greedy = module.forward_inference(batch())[Columns.ACTIONS]
    assert ALLOWED[torch.arange(len(MASK)), greedy].all()


def test_dqn_targets_use_the_next_observations_mask():
    module = build("DQN")
    module.make_target_networks()  # a Learner does this
    data = batch()
    data[Columns.NEXT_OBS] = batch(mask=MASK.flip(0))[Columns.OBS]
    out = module.forward_train(data)
    q, q_next = out["qf_preds"], out["qf_target_next_preds"]
    assert torch.isfinite(q[ALLOWED]).all() and torch.isinf(q[~ALLOWED]).all()
    allowed_next = ALLOWED.flip(0)
    assert torch.isfinite(q_next[allowed_next]).all() and torch.isinf(q_next[~allowed_next]).all()


def test_the_module_rebuilds_from_itself_with_the_dict_space():
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    module = build("PPO")
    again = RLModuleSpec.from_module(module).build()  # what restoring a checkpoint does
    assert masking.is_masked(again.observation_space)
    again.load_state_dict(module.state_dict())
    assert torch.equal(module.forward_inference(batch())[Columns.ACTION_DIST_INPUTS],
                       again.forward_inference(batch())[Columns.ACTION_DIST_INPUTS])


class StrictMaskEnv(MaskEnv):
    """Fails the moment a forbidden action is taken."""

    def _obs(self):
        self.mask = self.np_random.random(4) < 0.5
        self.mask[self.np_random.integers(4)] = True
        return {"observations": self.np_random.uniform(-1, 1, 3).astype(np.float32),
                "action_mask": self.mask.astype(np.int8)}

    def reset(self, *, seed=None, options=None):
        gym.Env.reset(self, seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.mask[action], f"masked action {action} taken; mask {self.mask}"
        self.t += 1
        return self._obs(), float(action == 0), self.t >= 8, False, {}


@pytest.mark.e2e  # RLlib's env runner and learner, in-process: Ray's stack, so with the e2e tests (issue 15)
@pytest.mark.parametrize("algo, settings", [
    ("PPO", {"train_batch_size_per_learner": 64, "minibatch_size": 32, "num_epochs": 2}),
    ("DQN", {"epsilon": [[0, 0.5], [1000, 0.5]], "train_batch_size_per_learner": 32}),
])
def test_a_local_env_runner_and_learner_sample_and_learn_without_masked_actions(algo, settings):
    """RLlib's own EnvRunner and Learner objects in this process (Ray forbidden): sampling runs through
    RLlib's connectors into our module and the env; learning through the loss."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    if "TuneRlStrictMaskTest-v0" not in gym.registry:
        gym.register("TuneRlStrictMaskTest-v0", entry_point=StrictMaskEnv)
    config = rllib_config(algo, {"env": "TuneRlStrictMaskTest-v0", "env_config": {},
                                            "num_envs_per_env_runner": 2, "fcnet_hiddens": [16], **settings})
    runner = SingleAgentEnvRunner(config=config)
    learner = config.build_learner(env=runner.env)
    assert isinstance(runner.module, masking.MaskedPPOTorchModule if algo == "PPO" else masking.MaskedDQNTorchModule)
    runner.sample(num_timesteps=32, explore=False)
    episodes = runner.sample(num_timesteps=64, explore=True)
    if algo == "PPO":
        results = learner.update(episodes=episodes, num_epochs=2, minibatch_size=32)
    else:  # DQN learns from replayed episodes, as its training step does
        replay = EpisodeReplayBuffer(capacity=1000)
        replay.add(episodes)
        results = learner.update(episodes=replay.sample(num_items=32, n_step=1, gamma=0.99, sample_episodes=True))
    loss = results["default_policy"]["total_loss"]
    assert np.isfinite(loss.peek() if hasattr(loss, "peek") else loss)
    runner.stop()
