"""Our PPO on MultiDiscrete and MultiBinary action spaces (issue 18): one categorical per number of the action,
their log-probabilities summed and their entropies added; actions reach the env in its own shape and dtype; K
seeds train as they would alone; a checkpoint's policy, evaluate and the MLflow model's data act as the learner
does. DQN refuses them, naming ppo."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.test_algos import same, same_weights, small_dqn, small_ppo
from tests.test_seeds_ppo import train_side_by_side
from tune_runner.algos import DQN, PPO
from tune_runner.algos.action_space import ActionSpace
from tune_runner.algos.distributions import segments_argmax, segments_gather, segments_log_softmax

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
DIALS, SWITCHES = "TuneRlDialsTest-v0", "TuneRlSwitchesTest-v0"
NVEC = (3, 4)


class Dials(gym.Env):
    """Set each dial to the target shown (one-hot per dial): MultiDiscrete([3, 4]) actions, or with
    `binary` three switches, MultiBinary(3) (int8). Reward: the share of dials set right, 8 steps an episode, so
    a random policy earns about 2.3 (dials) or 4 (switches) and a perfect one 8. It records each action."""

    def __init__(self, binary: bool = False) -> None:
        self.nvec = (2, 2, 2) if binary else NVEC
        self.action_space = gym.spaces.MultiBinary(3) if binary else gym.spaces.MultiDiscrete(NVEC)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (sum(self.nvec),), np.float32)
        self.received: list[np.ndarray] = []

    def _show(self) -> np.ndarray:
        self.target = np.array([self.np_random.integers(n) for n in self.nvec])
        return np.concatenate([np.eye(n, dtype=np.float32)[t] for n, t in zip(self.nvec, self.target, strict=True)])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._show(), {}

    def step(self, action):
        self.received.append(np.array(action, copy=True))
        reward = float(np.mean(np.asarray(action) == self.target))
        self.t += 1
        return self._show(), reward, False, self.t >= 8, {}


def env_id(binary: bool) -> str:
    name = SWITCHES if binary else DIALS
    if name not in gym.registry:
        gym.register(name, entry_point=Dials, kwargs={"binary": binary})
    return name


def test_each_number_is_its_own_categorical():
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    actions = torch.tensor([[0, 3], [2, 1], [1, 0], [2, 2], [0, 0]])
    logp_all = segments_log_softmax(logits, NVEC)
    parts = [torch.distributions.Categorical(logits=part) for part in logits.split(list(NVEC), dim=-1)]
    expected = parts[0].log_prob(actions[:, 0]) + parts[1].log_prob(actions[:, 1])
    torch.testing.assert_close(segments_gather(logp_all, actions, NVEC), expected)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    torch.testing.assert_close(entropy, parts[0].entropy() + parts[1].entropy())
    picks = segments_argmax(logits, NVEC)
    assert picks.tolist() == [[int(p.logits[i].argmax()) for p in parts] for i in range(5)]
    # Without nvec: one Discrete choice, as before
    torch.testing.assert_close(segments_gather(torch.log_softmax(logits, -1), actions[:, 0], ()),
                               torch.distributions.Categorical(logits=logits).log_prob(actions[:, 0]))


def test_the_spaces_our_learners_read():
    binary = ActionSpace.of(gym.spaces.MultiBinary((2, 3)))
    assert (binary.nvec, binary.size, binary.shape, binary.dtype, binary.kind) == ((2,) * 6, 12, (2, 3), "int8",
                                                                                   "MultiBinary")
    dials = ActionSpace.of(gym.spaces.MultiDiscrete(NVEC))
    assert (dials.nvec, dials.size, dials.kind, dials.continuous) == (NVEC, 7, "MultiDiscrete", False)
    assert binary.for_env(np.ones((4, 6), np.int64)).shape == (4, 2, 3)
    square = ActionSpace.of(gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32))  # a Box keeps its shape too, clipped
    assert square.for_env(np.full((4, 4), 3.0, np.float32)).tolist() == [[[1.0, 1.0], [1.0, 1.0]]] * 4
    with pytest.raises(ValueError, match="MultiDiscrete action space starting at 0"):
        ActionSpace.of(gym.spaces.MultiDiscrete(NVEC, start=[1, 0]))


def test_ppo_learns_to_set_every_switch_and_the_env_gets_its_own_dtype(binary=True):
    """MultiBinary (int8 actions); a user's MultiDiscrete env learns in a real search (tests/test_plugins_e2e.py)."""
    learner = PPO(small_ppo(lr=1e-2, num_epochs=4, metrics_num_episodes_for_smoothing=20), env_id=env_id(binary))
    try:
        first = learner.train_iteration()["episode_return_mean"]
        for _ in range(19):  # 5k env steps
            last = learner.train_iteration()["episode_return_mean"]
        random_level = 4.0 if binary else 8 * np.mean([1 / n for n in NVEC])
        assert first < random_level + 1.0 and last > 6.5, (first, last)  # 8: every dial set right
        dials = learner.env.envs[0].env.envs[0].unwrapped
        received = dials.received[-1]
        space = learner.env.actions
        assert received.dtype == np.dtype(space.dtype) and received.shape == space.shape
        assert dials.action_space.contains(received)
    finally:
        learner.close()


def test_two_dial_seeds_train_as_they_would_alone():
    both = PPO(small_ppo(num_seeds=2, seed=5), env_id=env_id(False))
    alone = [PPO(small_ppo(seed=seed), env_id=env_id(False)) for seed in both.seeds]
    try:
        train_side_by_side(both, alone, 3)
    finally:
        for learner in (both, *alone):
            learner.close()


@pytest.mark.parametrize("binary", [False, True], ids=["multidiscrete", "multibinary"])
def test_a_checkpoint_continues_exactly_and_keeps_the_space(binary):
    original = PPO(small_ppo(), env_id=env_id(binary))
    for _ in range(2):
        original.train_iteration()
    state = pickle.loads(pickle.dumps(original.get_state()))
    assert state["action_space"] == ({"nvec": [2, 2, 2], "shape": (3,), "dtype": "int8"} if binary
                                     else {"nvec": list(NVEC), "shape": (2,), "dtype": "int64"})
    restored = PPO(small_ppo(), env_id=env_id(binary))
    restored.set_state(state)
    for _ in range(2):
        assert same(original.train_iteration(), restored.train_iteration())
    assert same_weights(original, restored)
    for learner in (original, restored):
        learner.close()


@pytest.fixture(scope="module")
def dials_checkpoint(tmp_path_factory):
    from tests.test_policy import write_trial
    from tune_runner.trainables.agents import build_learner

    config = {"env": env_id(False), "env_config": {}, "num_envs_per_env_runner": 4, "train_batch_size_per_learner": 256,
              "minibatch_size": 64, "num_epochs": 2, "fcnet_hiddens": [16, 16], "seed": 3}
    learner = build_learner("ppo", config)
    for _ in range(3):
        learner.train_iteration()
    trial = tmp_path_factory.mktemp("dials") / "exp" / "OwnPPO_dials_00000"
    yield learner, config, write_trial(trial, learner, config)
    learner.close()


def observations(n: int = 100) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack([np.concatenate([np.eye(k, dtype=np.float32)[rng.integers(k)] for k in NVEC])
                     for _ in range(n)])


def test_a_loaded_policy_and_the_mlflow_model_data_act_as_the_learner(dials_checkpoint, tmp_path):
    from tune_runner import tune_rl_policy
    from tune_runner.results import evaluate
    from tune_runner.results import pyfunc_model as model
    from tune_runner.results.policy import OwnPolicy, load_policy

    learner, config, checkpoint = dials_checkpoint
    obs = observations()
    expected = learner.compute_actions(obs)
    assert expected.shape == (100, 2) and expected.dtype == np.int64 and len(np.unique(expected[:, 1])) > 1
    policy = load_policy(checkpoint)
    assert isinstance(policy, OwnPolicy) and policy.box is None and policy.actions.nvec == NVEC
    np.testing.assert_array_equal(policy.compute_actions(obs), expected)
    assert evaluate.evaluate(policy, episodes=2, seed=0).lengths == (8, 8)
    loaded = tune_rl_policy.Policy(model.save_policy(checkpoint, learner="ppo", config=config, folder=tmp_path / "m"))
    actions = loaded.predict(obs)  # the pyfunc loader: torch and numpy only
    assert actions.dtype == np.int64
    np.testing.assert_array_equal(actions, expected)
    signature = model.signature(loaded.spec).to_dict()
    assert '"int64"' in signature["outputs"] and "[-1, 2]" in signature["outputs"]


def test_dqn_refuses_multidiscrete_actions_and_the_env_check_names_ppo():
    from tune_runner.trainables.catalog import backend
    from tune_runner.trainables.env_check import space_problem
    from tune_runner.trainables.trial import Spaces

    with pytest.raises(ValueError, match="DQN needs a Discrete action space.*MultiDiscrete of 2 number"):
        DQN(small_dqn(), env_id=env_id(False))
    with pytest.raises(ValueError, match="DQN needs a Discrete action space.*MultiBinary of 3 number"):
        DQN(small_dqn(), env_id=env_id(True))
    spaces = Spaces(observation=gym.spaces.Box(0, 1, (7,)), action=gym.spaces.MultiDiscrete(NVEC))
    assert space_problem("ppo", DIALS, backend("ppo").trains, spaces) is None
    problem = space_problem("dqn", DIALS, backend("dqn").trains, spaces)
    assert problem is not None and "dqn needs a Discrete action space" in problem and "ppo" in problem


def test_preflight_refuses_a_masked_multidiscrete_env_and_actions_that_do_not_start_at_0():
    """Before Ray: what VecEnv would refuse inside the trial."""
    from tune_runner.trainables.catalog import backend
    from tune_runner.trainables.env_check import space_problem
    from tune_runner.trainables.trial import Spaces

    ppo = backend("ppo").trains
    masked = gym.spaces.Dict({"observations": gym.spaces.Box(0, 1, (7,)), "action_mask": gym.spaces.MultiBinary(7)})
    problem = space_problem("ppo", "dials", ppo, Spaces(observation=masked, action=gym.spaces.MultiDiscrete(NVEC)))
    assert problem is not None and problem.startswith("ppo masks a Discrete action space only; dials masks "
                                                      "MultiDiscrete([3 4])"), problem
    assert space_problem("ppo", "dials", ppo, Spaces(observation=masked, action=gym.spaces.Discrete(7))) is None
    for action in (gym.spaces.Discrete(3, start=1), gym.spaces.MultiDiscrete(NVEC, start=[0, 2])):
        problem = space_problem("ppo", "e", ppo, Spaces(observation=gym.spaces.Box(0, 1, (7,)), action=action))
        assert problem is not None and "needs discrete actions that start at 0" in problem, problem


class MaskedDials(Dials):
    """Dials whose observations carry an action_mask: our learners mask Discrete actions only."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Dict({"observations": gym.spaces.Box(0.0, 1.0, (7,), np.float32),
                                                  "action_mask": gym.spaces.MultiBinary(7)})

    def _show(self):
        return {"observations": super()._show(), "action_mask": np.ones(7, np.int8)}


CLOSED: list[str] = []


class ClosingMaskedDials(MaskedDials):
    def close(self):
        CLOSED.append("closed")


def test_the_learner_refuses_a_masked_multidiscrete_env_and_closes_it():
    if "TuneRlMaskedDialsTest-v0" not in gym.registry:
        gym.register("TuneRlMaskedDialsTest-v0", entry_point=ClosingMaskedDials)
    CLOSED.clear()
    with pytest.raises(ValueError, match="our learners mask Discrete actions only; this env masks a MultiDiscrete") \
            as raised:
        PPO(small_ppo(num_envs_per_env_runner=2), env_id="TuneRlMaskedDialsTest-v0")
    assert CLOSED == ["closed", "closed"]  # closed by the refusal, not by the garbage collector: the traceback
    del raised                             # still holds the env until here
