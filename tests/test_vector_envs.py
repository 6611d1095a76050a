"""Our vector envs against gymnasium's SyncVectorEnv (issue 18).

Our numpy-vectorized Pendulum-v1: the same seed gives the same starts, observations, truncations and (to float64
rounding) rewards, and our PPO trains bit for bit the same on either; it is picked by default, and an env_config
it does not take falls back. The worker processes (`processes` mode, a trial with several CPUs): the same numbers
as one SyncVectorEnv, any split of the envs; our PPO and DQN train bit for bit the same; a worker's error reaches
the learner in one line, and no worker outlives its env or the process that started it. Several seeds' CartPole or
Pendulum envs stepped as one (JointStep): each seed gets bit for bit what its envs give alone. EnvPool (where it is
installed; CI has not: pip install envpool): picked for an id only it vectorizes, its episodes statistically
those of gymnasium's envs, its autoreset our NEXT_STEP contract; where it is not, asking for it is refused.
"""

from __future__ import annotations

import importlib.util
import time

import gymnasium as gym
import numpy as np
import pytest

from tests.test_algos import same, same_weights
from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig
from tune_runner.algos.learner_envs import SeedEnvs, default_vectorize_mode, make_vec_env
from tune_runner.algos.process_envs import ProcessVectorEnv, env_step_seconds, processes_pay
from tune_runner.algos.vector_envs import JointCartPole, JointPendulum, PendulumVectorEnv, joint_step

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(not HAS_ENVPOOL, reason="EnvPool is not installed (pip install envpool)")


def gymnasiums(num_envs: int, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec("Pendulum-v1", num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"g": 9.81, "max_episode_steps": 50}], ids=["default", "g-and-limit"])
def test_the_same_seed_gives_gymnasiums_numbers(kwargs):
    theirs, ours = gymnasiums(6, **kwargs), PendulumVectorEnv(6, **kwargs)
    obs_a, _ = theirs.reset(seed=7)
    obs_b, _ = ours.reset(seed=7)
    assert np.array_equal(obs_a, obs_b)
    rng = np.random.default_rng(0)
    truncations = 0
    for _ in range(450):  # several episodes: autoresets included
        actions = rng.uniform(-3, 3, (6, 1)).astype(np.float32)  # beyond the bounds too: both clip
        a, b = theirs.step(actions), ours.step(actions)
        assert np.array_equal(a[0], b[0])  # observations (float32)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-9, atol=1e-12)  # rewards (float64; the sum's rounding)
        assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])
        truncations += int(b[3].sum())
    assert truncations >= 6 * 2


def test_our_ppo_trains_bit_for_bit_the_same_on_either_backend():
    config = {"lr": 1e-3, "gamma": 0.9, "num_epochs": 2, "minibatch_size": 128, "train_batch_size": 1024,
              "num_envs_per_env_runner": 8, "vf_clip_param": None, "seed": 3}
    theirs = PPO(PPOConfig.from_dict({**config, "gym_env_vectorize_mode": "sync"}), env_id="Pendulum-v1")
    ours = PPO(PPOConfig.from_dict(config), env_id="Pendulum-v1")
    assert isinstance(ours.env.envs[0].env, PendulumVectorEnv)
    assert isinstance(theirs.env.envs[0].env, gym.vector.SyncVectorEnv)
    for _ in range(3):
        assert same(theirs.train_iteration(), ours.train_iteration())
    assert same_weights(theirs, ours)


def test_pendulum_takes_ours_by_default_and_gymnasiums_for_a_key_ours_lacks():
    assert default_vectorize_mode("Pendulum-v1") == "vector_entry_point"
    assert default_vectorize_mode("Pendulum-v1", processes=4) == "vector_entry_point"
    assert default_vectorize_mode("Acrobot-v1") == ("envpool" if HAS_ENVPOOL else "sync")
    assert isinstance(make_vec_env("Pendulum-v1", env_config={"g": 5.0}, num_envs=2, seed=0).env, PendulumVectorEnv)
    fallback = make_vec_env("Pendulum-v1", env_config={"render_mode": "rgb_array"}, num_envs=2, seed=0)
    assert isinstance(fallback.env, gym.vector.SyncVectorEnv)


# ---- worker processes ----------------------------------------------------------------------------------------


def sync_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP})



def seed_envs(env_id: str, seeds: list[int], num_envs: int) -> SeedEnvs:
    return SeedEnvs([make_vec_env(env_id, env_config={}, num_envs=num_envs, seed=seed) for seed in seeds])


@pytest.mark.parametrize(("env_id", "kind"), [("CartPole-v1", JointCartPole), ("Pendulum-v1", JointPendulum)])
def test_seeds_stepped_as_one_env_get_what_their_envs_give_alone(env_id, kind):
    """Three seeds' envs in one joint step, against each seed's envs stepped alone: the same observations,
    rewards and ends, bit for bit, over enough steps for every env to reset several times, each seed's resets
    from its own generator (in CartPole, one generator per seed draws all its envs' resets)."""
    seeds, n, steps = [3, 11, 40], 5, 700
    together = seed_envs(env_id, seeds, n)
    assert isinstance(together._joint, kind)  # else this compares the one-by-one path with itself
    alone = [make_vec_env(env_id, env_config={}, num_envs=n, seed=seed) for seed in seeds]
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(steps):
        actions = (rng.integers(0, 2, size=len(seeds) * n) if env_id == "CartPole-v1"
                   else rng.uniform(-2, 2, size=(len(seeds) * n, 1)).astype(np.float32))
        joint = together.step(actions)
        parts = [env.step(actions[i * n:(i + 1) * n]) for i, env in enumerate(alone)]
        for field, got in zip(joint._fields, joint, strict=True):
            np.testing.assert_array_equal(got, np.concatenate([getattr(part, field) for part in parts]), field)
        np.testing.assert_array_equal(together.obs, np.concatenate([env.obs for env in alone]))
        ends += int((joint.terminated | joint.truncated).sum())
    assert ends >= 3 * len(seeds) * n, ends
    for env in together.envs + alone:
        env.close()


def test_seeds_whose_envs_differ_are_stepped_one_by_one_with_their_own_settings():
    """A curriculum set one seed's gravity: the joint step would give it the others'; each seed steps alone."""
    seeds, n = [1, 2], 4
    together, alone = seed_envs("CartPole-v1", seeds, n), [make_vec_env("CartPole-v1", env_config={}, num_envs=n,
                                                                        seed=seed) for seed in seeds]
    together.envs[1].env.gravity = alone[1].env.gravity = 30.0
    assert not together._joint.same_settings([env.env for env in together.envs])
    for _ in range(60):
        actions = np.zeros(len(seeds) * n, dtype=np.int64)
        joint = together.step(actions)
        np.testing.assert_array_equal(joint.terminated, np.concatenate(
            [env.step(actions[i * n:(i + 1) * n]).terminated for i, env in enumerate(alone)]))
        np.testing.assert_array_equal(together.obs, np.concatenate([env.obs for env in alone]))
    assert joint_step([together.envs[0].env]) is None  # one seed: its own env's step, untouched


@pytest.mark.parametrize(("env_id", "num_envs", "workers"), [("CartPole-v1", 7, 3), ("Acrobot-v1", 4, 2)])
def test_worker_processes_give_one_sync_envs_numbers(env_id, num_envs, workers):
    theirs = sync_env(env_id, num_envs)
    ours = ProcessVectorEnv(lambda n: sync_env(env_id, n), num_envs=num_envs, workers=workers)
    try:
        assert len(ours.processes) == workers and ours.starts == sorted(set(ours.starts))
        assert np.array_equal(theirs.reset(seed=11)[0], ours.reset(seed=11)[0])
        rng, ends = np.random.default_rng(0), 0
        for _ in range(600):  # CartPole's random episodes last ~20 steps: autoresets in every share
            actions = rng.integers(0, theirs.single_action_space.n, num_envs)
            a, b = theirs.step(actions), ours.step(actions)
            for x, y in zip(a[:4], b[:4], strict=True):
                assert np.array_equal(x, y)
            ends += int((b[2] | b[3]).sum())
        assert ends >= num_envs
    finally:
        theirs.close()
        ours.close()
    assert not any(p.is_alive() for p in ours.processes)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_our_learners_train_bit_for_bit_the_same_in_worker_processes(algo):
    common = {"seed": 5, "num_envs_per_env_runner": 6}
    if algo == "ppo":
        cls, config = PPO, PPOConfig.from_dict({**common, "train_batch_size": 600, "minibatch_size": 200,
                                                "num_epochs": 2})
    else:
        cls, config = DQN, DQNConfig.from_dict({**common, "num_steps_sampled_before_learning_starts": 200,
                                                "train_batch_size": 32, "fcnet_hiddens": [32]})
    sync = cls(config.__class__.from_dict({**config.__dict__, "gym_env_vectorize_mode": "sync"}),
               env_id="Acrobot-v1")
    workers = cls(config.__class__.from_dict({**config.__dict__, "num_env_processes": 2,
                                              "gym_env_vectorize_mode": "processes"}), env_id="Acrobot-v1")
    try:
        assert isinstance(workers.env.envs[0].env, ProcessVectorEnv)
        for _ in range(2):
            assert same(sync.train_iteration(), workers.train_iteration())
        assert same_weights(sync, workers)
    finally:
        sync.close()
        workers.close()


class Steps(gym.Env):
    """An env whose step busy-waits `seconds` (a slow simulator) or returns at once."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return np.zeros(2, np.float32), 1.0, False, False, {}


gym.register("tests/Slow-v0", entry_point=Steps, kwargs={"seconds": 0.003})
gym.register("tests/Instant-v0", entry_point=Steps)


def test_workers_are_picked_where_their_round_trips_pay_and_only_with_two_cpus():
    assert default_vectorize_mode("tests/Slow-v0", processes=2, num_envs=8) == "processes"
    assert default_vectorize_mode("tests/Slow-v0", processes=1, num_envs=8) == "sync"
    assert default_vectorize_mode("tests/Slow-v0", processes=2, num_envs=1) == "sync"
    assert default_vectorize_mode("tests/Instant-v0", processes=2, num_envs=8) == "sync"  # its round trips cost more
    assert default_vectorize_mode("CartPole-v1", processes=2, num_envs=8) == "vector_entry_point"
    assert env_step_seconds("tests/Slow-v0", {}) >= 0.003
    # the cost model: 16 envs of 100 us a step (Acrobot's here) in 2 workers lose to their round trips; 1 ms wins
    assert not processes_pay(100e-6, num_envs=16, workers=2) and processes_pay(1e-3, num_envs=16, workers=2)
    assert not processes_pay(1.0, num_envs=16, workers=1)


def test_the_processes_mode_needs_two_workers_and_takes_at_most_one_per_env():
    one_env = make_vec_env("Acrobot-v1", env_config=None, num_envs=1, seed=0, vectorize_mode="processes", processes=2)
    one_cpu = make_vec_env("Acrobot-v1", env_config=None, num_envs=4, seed=0, vectorize_mode="processes")
    for env in (one_env, one_cpu):
        assert isinstance(env.env, gym.vector.SyncVectorEnv) and env.backend == "sync"
        env.close()
    many = make_vec_env("Acrobot-v1", env_config=None, num_envs=3, seed=0, vectorize_mode="processes", processes=8)
    assert len(many.env.processes) == 3 and many.backend == "processes"
    assert many.get_state()["snapshot"] is None  # restored by a reset with the seed, as for AsyncVectorEnv
    many.close()


class BreaksOnStep(gym.Env):
    """An env that fails on its 5th step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps == 5:
            raise ArithmeticError("the simulator diverged")
        return np.zeros(2, np.float32), 1.0, False, False, {}


def test_a_workers_error_reaches_the_learner_in_one_line_and_no_worker_is_left():
    gym.register("tests/BreaksOnStep-v0", entry_point=BreaksOnStep)
    env = make_vec_env("tests/BreaksOnStep-v0", env_config=None, num_envs=4, seed=0, vectorize_mode="processes",
                       processes=2)
    processes = env.env.processes
    try:
        with pytest.raises(RuntimeError) as info:
            for _ in range(5):
                env.step(np.zeros(4, dtype=np.int64))
        (line,) = str(info.value).splitlines()
        assert "ArithmeticError: the simulator diverged" in line and "test_vector_envs.py" in line
    finally:
        env.close()
    assert not any(p.is_alive() for p in processes)


def test_a_worker_whose_learner_is_gone_exits():
    env = ProcessVectorEnv(lambda n: sync_env("CartPole-v1", n), num_envs=4, workers=2)
    for pipe in env.pipes:  # as when the trial's process is killed: its ends of the pipes close
        pipe.close()
    for process in env.processes:
        process.join(timeout=10)
        assert process.exitcode == 0
    env.closed = True


def test_a_bad_mode_or_process_count_is_refused_by_the_config():
    with pytest.raises(ValueError, match=r"PPOConfig.gym_env_vectorize_mode 'proceses'.*processes"):
        PPOConfig.from_dict({"gym_env_vectorize_mode": "proceses"})
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"DQNConfig.num_env_processes"):
            DQNConfig.from_dict({"num_env_processes": bad})


# ---- EnvPool ------------------------------------------------------------------------------------------------------



@pytest.mark.skipif(HAS_ENVPOOL, reason="EnvPool is installed here")
def test_asking_for_envpool_without_it_is_refused_with_the_pip_line():
    with pytest.raises(ValueError, match=r"PPOConfig.gym_env_vectorize_mode envpool: EnvPool is not installed; "
                                         r"pip install envpool"):
        PPOConfig.from_dict({"gym_env_vectorize_mode": "envpool"})
    with pytest.raises(ValueError, match=r"EnvPool is not installed; pip install envpool"):
        make_vec_env("Acrobot-v1", env_config=None, num_envs=2, seed=0, vectorize_mode="envpool")
    assert default_vectorize_mode("Acrobot-v1", processes=1, num_envs=8) == "sync"


def episode_lengths(env, episodes: int, seed: int) -> np.ndarray:
    """Lengths of the first `episodes` episodes a uniformly random policy plays in a NEXT_STEP vector env."""
    rng, lengths = np.random.default_rng(seed), []
    env.reset(seed=seed)
    running = np.zeros(env.num_envs, dtype=int)
    resetting = np.zeros(env.num_envs, dtype=bool)
    while len(lengths) < episodes:
        _, rewards, terminated, truncated, _ = env.step(rng.integers(0, 2, env.num_envs))
        assert not rewards[resetting].any()  # the autoreset step: reward 0, no transition
        running += ~resetting
        ended = terminated | truncated
        lengths += running[ended].tolist()
        running[ended] = 0
        resetting = ended
    return np.array(lengths[:episodes])


@needs_envpool
def test_envpool_is_picked_where_only_it_vectorizes_and_its_episodes_are_gymnasiums():
    assert default_vectorize_mode("Acrobot-v1", processes=1, num_envs=8) == "envpool"
    assert default_vectorize_mode("CartPole-v1", processes=1, num_envs=8) == "vector_entry_point"
    assert default_vectorize_mode("Acrobot-v1", num_envs=8, env_config={"max_episode_steps": 50}) == "sync"
    with pytest.raises(ValueError, match=r"EnvPool has no env 'tests/Instant-v0'"):
        make_vec_env("tests/Instant-v0", env_config=None, num_envs=2, seed=0, vectorize_mode="envpool")
    envpools = make_vec_env("CartPole-v1", env_config=None, num_envs=16, seed=3, vectorize_mode="envpool")
    assert envpools.backend == "envpool"
    ours = episode_lengths(envpools.env, 2000, seed=3)
    envpools.close()
    theirs = episode_lengths(sync_env("CartPole-v1", 16), 2000, seed=3)
    # Random CartPole episodes last ~22 steps (sd ~12): their means within 4 standard errors of the difference.
    se = np.sqrt(ours.var() / len(ours) + theirs.var() / len(theirs))
    assert abs(ours.mean() - theirs.mean()) < 4 * se, (ours.mean(), theirs.mean(), se)
    assert 15 < ours.mean() < 30


@needs_envpool
def test_our_ppo_learns_on_envpools_envs():
    config = PPOConfig.from_dict({"num_envs_per_env_runner": 8, "train_batch_size": 1024, "minibatch_size": 256,
                                  "num_epochs": 4, "lr": 3e-3, "seed": 0})
    learner = PPO(config, env_id="Acrobot-v1")  # no numpy version: EnvPool by default
    assert learner.env.backend == "envpool"
    while learner.env_steps < 40_000:
        result = learner.train_iteration()
    learner.close()
    assert result["episode_return_mean"] > -300  # a random policy's episodes run out at 500 steps: -500
