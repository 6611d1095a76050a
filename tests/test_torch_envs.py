"""Classic control as torch envs (issue 44) against gymnasium's own envs.

Dynamics: each torch env and gymnasium's (SyncVectorEnv, NEXT_STEP autoreset, the id's TimeLimit), from the same
start states and under the same 10,000 random actions, give the same observations (to 1e-5), rewards, terminations
and truncations; on an autoreset step both give reward 0 and no flag, the torch env a start in gymnasium's reset
range (reset noise differs: the torch env then takes gymnasium's start). Acrobot's double pendulum is chaotic: a
last-bit difference of a sin (torch's against libm's) grows past 1e-5 within a long episode, so its torch env
takes gymnasium's state before every step, and each step is held to gymnasium's from the same state.
Randomness: the hashed uniforms are uniform, and seed i's envs start as they do alone. State: a restored env
continues exactly.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tune_runner.algos.classic_control import CLASSIC_CONTROL
from tune_runner.algos.torch_envs import TorchSeedEnvs, env_keys, hashed_uniform

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
NUM_ENVS, STEPS = 8, 1250  # 10,000 actions
# gymnasium's reset ranges of each state number (Acrobot's after its float32 rounding)
CHAOTIC = {"Acrobot-v1"}  # compared step by step from gymnasium's state
START_RANGES = {"CartPole-v1": [(-0.05, 0.05)] * 4, "Acrobot-v1": [(-0.1, 0.1)] * 4,
                "MountainCar-v0": [(-0.6, -0.4), (0, 0)], "MountainCarContinuous-v0": [(-0.6, -0.4), (0, 0)],
                "Pendulum-v1": [(-np.pi, np.pi), (-1, 1)]}


def gym_state(env: gym.Env) -> np.ndarray:
    return np.asarray(env.unwrapped.state, dtype=np.float64)


def random_actions(space: gym.Space, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, n)
    return rng.uniform(1.2 * space.low, 1.2 * space.high, (n, *space.shape)).astype(np.float32)  # both clip


def pumping(env_id: str, obs: np.ndarray) -> np.ndarray | None:
    """Actions that swing up the envs that random actions never end (push along the velocity, Acrobot's second
    joint's); None for the others."""
    column = {"Acrobot-v1": 5, "MountainCar-v0": 1, "MountainCarContinuous-v0": 1}.get(env_id)
    if column is None:
        return None
    velocity = obs[:, column]
    if env_id == "MountainCarContinuous-v0":
        return np.where(velocity >= 0, 1.1, -1.1).astype(np.float32)[:, None]
    return np.where(velocity >= 0, 2, 0)


def run_both(env_id: str, *, seed: int = 0) -> dict[str, int]:
    """Step gymnasium's env and ours side by side; counts of what happened (asserting as it goes)."""
    theirs = gym.make_vec(env_id, num_envs=NUM_ENVS, vectorization_mode="sync",
                          vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP})
    ours = CLASSIC_CONTROL[env_id](NUM_ENVS)
    obs, _ = theirs.reset(seed=seed)
    ours.set_state({**ours.get_state(), "state": torch.tensor(np.stack([gym_state(e) for e in theirs.envs]))})
    np.testing.assert_allclose(ours.obs.numpy(), obs, atol=1e-5, rtol=0)
    rng, counts = np.random.default_rng(seed), {"terminated": 0, "truncated": 0, "autoresets": 0}
    ranges = np.array(START_RANGES[env_id])
    for t in range(STEPS):
        actions = random_actions(theirs.single_action_space, rng, NUM_ENVS)
        pump = pumping(env_id, obs)
        if pump is not None:  # half the envs pump, the others act at random: both kinds of ending happen
            actions = np.where((np.arange(NUM_ENVS) % 2 == 0).reshape(-1, *[1] * (actions.ndim - 1)), pump, actions)
        resetting = ours.ending.numpy().copy()
        if env_id in CHAOTIC:
            ours.state = torch.tensor(np.stack([gym_state(e) for e in theirs.envs]))
        obs, rew_a, term_a, trunc_a, _ = theirs.step(actions)
        obs_b, rew_b, term_b, trunc_b = (x.numpy() for x in ours.step(actions))
        where = f"{env_id} step {t}"
        assert np.array_equal(term_a, term_b), where
        assert np.array_equal(trunc_a, trunc_b), where
        np.testing.assert_allclose(rew_b, rew_a, atol=1e-5, rtol=1e-6, err_msg=where)
        stepped = ~resetting
        np.testing.assert_allclose(obs_b[stepped], obs[stepped], atol=1e-5, rtol=0, err_msg=where)
        if resetting.any():
            assert not (rew_b[resetting].any() or term_b[resetting].any() or trunc_b[resetting].any()), where
            start = ours.state.numpy()[resetting]
            assert ((start >= ranges[:, 0]) & (start <= ranges[:, 1])).all(), where
            state = ours.get_state()
            state["state"][resetting] = torch.tensor(np.stack([gym_state(theirs.envs[i])
                                                               for i in np.flatnonzero(resetting)]))
            ours.set_state(state)
        counts["terminated"] += int(term_a.sum())
        counts["truncated"] += int(trunc_a.sum())
        counts["autoresets"] += int(resetting.sum())
    theirs.close()
    return counts


@pytest.mark.parametrize("env_id", sorted(CLASSIC_CONTROL))
def test_the_torch_env_steps_as_gymnasiums(env_id):
    counts = run_both(env_id)
    assert counts["autoresets"] >= NUM_ENVS, counts  # episodes ended and restarted
    if env_id != "Pendulum-v1":
        assert counts["terminated"] >= NUM_ENVS, counts
    if env_id != "CartPole-v1":
        assert counts["truncated"] >= 2, counts  # the time limit of each id


def test_the_hashed_uniforms_are_uniform_and_each_seeds_own():
    keys = env_keys([0, 1_000_000, 2_000_000], 1000)
    u = hashed_uniform(keys[:, None], torch.arange(10)[None], 3)  # [3000 envs, 10 resets, 3 numbers]
    assert u.dtype == torch.float64 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005 and abs(u.var().item() - 1 / 12) < 0.002
    assert len(torch.unique(u)) == u.numel()  # no two envs, resets or numbers share a draw
    alone = env_keys([1_000_000], 1000)
    assert torch.equal(alone, keys[1000:2000])  # a seed's keys do not depend on the others
    assert not torch.equal(env_keys([1], 1000), alone)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_each_seed_steps_as_it_does_alone(env_id):
    seeds, n, rng = [5, 1_000_005, 2_000_005], 3, np.random.default_rng(0)
    cls = CLASSIC_CONTROL[env_id]
    together = TorchSeedEnvs(cls(len(seeds) * n), seeds=seeds)
    alone = [TorchSeedEnvs(cls(n), seeds=[seed]) for seed in seeds]
    for _ in range(600):  # several episodes each
        actions = random_actions(cls.single_action_space, rng, len(seeds) * n)
        joint = together.step(actions)
        for i, env in enumerate(alone):
            own = env.step(actions[i * n:(i + 1) * n])
            for a, b in zip(joint, own, strict=True):
                assert np.array_equal(a[i * n:(i + 1) * n], b)
            assert np.array_equal(together.obs[i * n:(i + 1) * n], env.obs)


def test_a_restored_seed_continues_exactly_and_an_unfit_state_reseeds():
    cls, rng = CLASSIC_CONTROL["CartPole-v1"], np.random.default_rng(1)
    env = TorchSeedEnvs(cls(8), seeds=[3, 1_000_003])
    for _ in range(100):
        env.step(rng.integers(0, 2, 8))
    saved = env.envs[1].get_state()
    actions = rng.integers(0, 2, (300, 8))  # many resets: each seed's reset counts and keys carry on
    after = [env.step(a) for a in actions]
    other = TorchSeedEnvs(cls(8), seeds=[3, 7])
    assert other.envs[1].set_state(saved, seed=0)
    again = [other.step(a) for a in actions]
    for a, b in zip(after, again, strict=True):
        assert all(np.array_equal(x[4:], y[4:]) for x, y in zip(a, b, strict=True))
    fresh = TorchSeedEnvs(cls(4), seeds=[9])
    assert not other.envs[0].set_state(fresh.envs[0].get_state() | {"torch": None}, seed=9)
    assert np.array_equal(other.obs[:4], fresh.obs) and not other.resetting[:4].any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_draws_and_steps_as_the_cpu():
    cls, rng = CLASSIC_CONTROL["CartPole-v1"], np.random.default_rng(0)
    cpu, cuda = cls(64), cls(64, device="cuda")
    for _ in range(300):
        actions = rng.integers(0, 2, 64)
        a, b = cpu.step(actions), cuda.step(actions)
        assert torch.equal(a[2], b[2].cpu()) and torch.equal(a[3], b[3].cpu())
        torch.testing.assert_close(a[0], b[0].cpu(), atol=1e-5, rtol=0)
    assert torch.equal(cpu.resets, cuda.resets.cpu())
