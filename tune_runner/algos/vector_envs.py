"""Vector envs of our own, for our learners (issue 18): numpy-vectorized versions of gymnasium envs that ship
none, and envs stepped in worker processes.

gymnasium vectorizes CartPole itself (`vector_entry_point`); for Pendulum-v1 its SyncVectorEnv steps
n Python envs one by one, which cost our PPO about a third of its time there. `PendulumVectorEnv`
steps them as arrays, with gymnasium's dynamics and dtypes op for op, NEXT_STEP autoreset and the
200-step limit. Each env keeps its own generator, seeded as SyncVectorEnv seeds its envs (seed + i),
so both draw the same starting states; tests/test_vector_envs.py holds the two to the same numbers.

`EnvPoolVectorEnv` steps EnvPool's C++ envs (pip install envpool) in its own threads, one per CPU of the
trial; it is picked for an id EnvPool has where neither gymnasium nor we vectorize it with numpy. Its envs are
EnvPool's own implementations, seeded its own way: the same seed does not give gymnasium's numbers, only the
same dynamics (tests/test_vector_envs.py compares their episodes statistically).

`ProcessVectorEnv` is for a trial with several CPUs and an env without a numpy version: one worker
process per CPU, each a SyncVectorEnv of its contiguous share of the envs, seeded as that share's envs
are in one SyncVectorEnv. gymnasium's AsyncVectorEnv starts a process per env (16 for 16 envs on 2 CPUs)
and pays a pipe round trip for each of them on every step: slower than one process for every env we
measured. A round trip to a worker costs more than a cheap env's step, though (here, a 2-vCPU VM: about
300 us a worker, where Acrobot-v1 steps in 100 us), so `processes_pay` decides from a throwaway
instance's measured step time (`env_step_seconds`) whether the workers would be faster.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

VECTORIZE_MODES = ("sync", "async", "processes", "vector_entry_point", "envpool")  # gym_env_vectorize_mode
MAX_SPEED, MAX_TORQUE, DT, MASS, LENGTH = 8.0, 2.0, 0.05, 1.0, 1.0
START = np.array([np.pi, 1.0])  # gymnasium's DEFAULT_X, DEFAULT_Y: uniform in [-START, START]


class PendulumVectorEnv(gym.vector.VectorEnv):
    """`num_envs` Pendulum-v1 envs as arrays; `g` and `max_episode_steps` as gymnasium.make takes them."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int, *, g: float = 10.0, max_episode_steps: int = 200) -> None:
        self.num_envs, self.g, self.max_episode_steps = num_envs, g, max_episode_steps
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low=-high, high=high, dtype=np.float32)
        self.single_action_space = gym.spaces.Box(low=-MAX_TORQUE, high=MAX_TORQUE, shape=(1,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.state = np.zeros((num_envs, 2))
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.ending = np.zeros(num_envs, dtype=bool)  # ended on the last step: the next one resets it
        self.generators = [seeding.np_random(None)[0] for _ in range(num_envs)]

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self.generators = [seeding.np_random(seed + i)[0] for i in range(self.num_envs)]
        for i in range(self.num_envs):
            self._start(i)
        self.ending[:] = False
        return self._obs(), {}

    def _start(self, i: int) -> None:
        self.state[i] = self.generators[i].uniform(low=-START, high=START)
        self.elapsed[i] = 0

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        resetting, stepping = self.ending.copy(), ~self.ending
        th, thdot = self.state[:, 0], self.state[:, 1]
        u = np.clip(np.asarray(actions).reshape(self.num_envs, -1)[:, 0], -MAX_TORQUE, MAX_TORQUE)
        costs = _angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        newthdot = thdot + (3 * self.g / (2 * LENGTH) * np.sin(th) + 3.0 / (MASS * LENGTH**2) * u) * DT
        newthdot = np.clip(newthdot, -MAX_SPEED, MAX_SPEED)
        newth = th + newthdot * DT
        rewards = np.where(stepping, -costs, 0.0)
        self.state[stepping] = np.stack([newth, newthdot], axis=1)[stepping]
        self.elapsed += stepping
        truncated = stepping & (self.elapsed >= self.max_episode_steps)
        for i in np.flatnonzero(resetting):
            self._start(i)
        self.ending = truncated.copy()
        return self._obs(), rewards, np.zeros(self.num_envs, dtype=bool), truncated, {}

    def _obs(self) -> np.ndarray:
        th, thdot = self.state[:, 0], self.state[:, 1]
        return np.stack([np.cos(th), np.sin(th), thdot], axis=1).astype(np.float32)


def _angle_normalize(x: np.ndarray) -> np.ndarray:
    return ((x + np.pi) % (2 * np.pi)) - np.pi


class JointStep:
    """K seeds' numpy-vectorized envs of one class and the same settings, stepped as one env of all their envs
    (issue 16: at K = 8 stepping CartPole's vector env once per seed was 15% of a DQN iteration).

    The envs stay the record: each step joins their arrays into one env of the class, steps it with the
    class's own code, and hands each env back its share (views), so a seed's env is checkpointed, restored
    or stepped alone as before. A seed's resets come from its own generator, drawn as that env alone draws
    them, so every seed gets bit for bit the numbers it gets alone (tests/test_vector_envs.py).
    `joint_step(envs)` gives one for envs it can join, else None.
    """

    settings: tuple[str, ...] = ()  # attributes that must be equal across the envs; the joint env takes them
    arrays: tuple[tuple[str, int], ...] = ()  # per-env arrays and the axis the envs lie along

    def __init__(self, envs: list[gym.vector.VectorEnv]) -> None:
        self.bounds = np.cumsum([0, *(env.num_envs for env in envs)])  # seed i's envs: bounds[i] to bounds[i + 1]
        self.joint = self.build(envs[0], int(self.bounds[-1]))
        self._key = attrgetter(*self.settings)
        self._applied: tuple = ()

    @classmethod
    def fits(cls, envs: list[gym.vector.VectorEnv]) -> bool:
        raise NotImplementedError

    def build(self, env: gym.vector.VectorEnv, num_envs: int) -> gym.vector.VectorEnv:
        raise NotImplementedError

    def same_settings(self, envs: list[gym.vector.VectorEnv]) -> bool:
        first = self._key(envs[0])
        return all(self._key(env) == first for env in envs[1:])

    def step(self, envs: list[gym.vector.VectorEnv], actions: np.ndarray) -> tuple[Any, ...]:
        joint, key = self.joint, self._key(envs[0])
        if key != self._applied:  # a curriculum may have changed them (on every env alike: same_settings)
            for name, value in zip(self.settings, key, strict=True):
                setattr(joint, name, value)
            self._applied = key
        for name, axis in self.arrays:
            setattr(joint, name, np.concatenate([getattr(env, name) for env in envs], axis=axis))
        self.before(joint, envs)
        out = joint.step(actions)
        for env, start, stop in zip(envs, self.bounds[:-1], self.bounds[1:], strict=True):
            for name, axis in self.arrays:
                part = getattr(joint, name)
                setattr(env, name, part[:, start:stop] if axis else part[start:stop])
        self.after(joint)
        return out

    def before(self, joint: gym.vector.VectorEnv, envs: list[gym.vector.VectorEnv]) -> None:
        """Give the joint env the seeds' generators."""

    def after(self, joint: gym.vector.VectorEnv) -> None:
        """Take them back: the joint env holds no seed's generator between steps."""


class JointCartPole(JointStep):
    """gymnasium's CartPoleVectorEnv: its step draws the resets of the envs that ended on the last step from
    its one generator, `np_random.uniform(low, high, size=(4, ended))`; here that call is answered from each
    seed's generator for that seed's ended envs, in env order."""

    settings = ("gravity", "masscart", "masspole", "total_mass", "length", "polemass_length", "force_mag", "tau",
                "kinematics_integrator", "theta_threshold_radians", "x_threshold", "low", "high",
                "max_episode_steps", "_sutton_barto_reward", "render_mode")
    arrays = (("state", 1), ("steps", 0), ("prev_done", 0))

    @classmethod
    def fits(cls, envs: list[gym.vector.VectorEnv]) -> bool:
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        return all(type(env) is CartPoleVectorEnv and env.state is not None for env in envs)

    def build(self, env: gym.vector.VectorEnv, num_envs: int) -> gym.vector.VectorEnv:
        return type(env)(num_envs=num_envs)

    def before(self, joint: gym.vector.VectorEnv, envs: list[gym.vector.VectorEnv]) -> None:
        joint._np_random = _SeedDraws(envs, np.add.reduceat(joint.prev_done, self.bounds[:-1]))

    def after(self, joint: gym.vector.VectorEnv) -> None:
        joint._np_random = None


class _SeedDraws:
    """CartPoleVectorEnv's `np_random` for one joint step: its reset draw, made by each seed's generator."""

    def __init__(self, envs: list[gym.vector.VectorEnv], ended: np.ndarray) -> None:
        self.envs, self.ended = envs, ended  # per seed, its envs that ended on the last step

    def uniform(self, low: float, high: float, size: tuple[int, int]) -> np.ndarray:
        parts = [self.envs[i].np_random.uniform(low=low, high=high, size=(size[0], int(self.ended[i])))
                 for i in np.flatnonzero(self.ended)]
        out = np.concatenate(parts, axis=1) if parts else np.empty((size[0], 0))
        if out.shape != tuple(size):
            raise RuntimeError(f"CartPoleVectorEnv asked for {size} reset numbers where its seeds' envs had "
                               f"{out.shape}: a gymnasium whose CartPole draws its resets otherwise")
        return out


class JointPendulum(JointStep):
    """Our PendulumVectorEnv: each env already has its own generator; the joint env takes them all."""

    settings = ("g", "max_episode_steps")
    arrays = (("state", 0), ("elapsed", 0), ("ending", 0))

    @classmethod
    def fits(cls, envs: list[gym.vector.VectorEnv]) -> bool:
        return all(type(env) is PendulumVectorEnv for env in envs)

    def build(self, env: gym.vector.VectorEnv, num_envs: int) -> gym.vector.VectorEnv:
        return PendulumVectorEnv(num_envs)

    def before(self, joint: gym.vector.VectorEnv, envs: list[gym.vector.VectorEnv]) -> None:
        joint.generators = [generator for env in envs for generator in env.generators]

    def after(self, joint: gym.vector.VectorEnv) -> None:
        joint.generators = []


def joint_step(envs: list[gym.vector.VectorEnv]) -> JointStep | None:
    """A JointStep for these envs (2 or more, of one class we can join), or None: step them one by one."""
    if len(envs) < 2:
        return None
    kind = next((kind for kind in (JointCartPole, JointPendulum) if kind.fits(envs)), None)
    return kind(envs) if kind is not None else None


# Env ids with a class here, and the env_config keys it takes; any other key leaves the env to gymnasium.
NUMPY_VECTOR_ENVS: dict[str, tuple[type[gym.vector.VectorEnv], tuple[str, ...]]] = {
    "Pendulum-v1": (PendulumVectorEnv, ("g", "max_episode_steps")),
}


def numpy_vector_env(env_id: str, env_config: Mapping[str, Any], num_envs: int) -> gym.vector.VectorEnv | None:
    """Our numpy-vectorized `env_id` with `env_config`, or None when there is none for it (or for those keys)."""
    entry = NUMPY_VECTOR_ENVS.get(env_id)
    if entry is None or not set(env_config) <= set(entry[1]):
        return None
    return entry[0](num_envs, **env_config)


def envpool_refusal(env_id: str | None, env_config: Mapping[str, Any]) -> str | None:
    """Why EnvPool cannot step `env_id` with `env_config` here, with the fix; None when it can. With env_id None,
    only whether EnvPool is installed."""
    import importlib.util

    leave = "leave gym_env_vectorize_mode unset"
    if importlib.util.find_spec("envpool") is None:
        return f"EnvPool is not installed; pip install envpool, or {leave}"
    if env_config:  # EnvPool takes its own keys, not gymnasium's
        return f"EnvPool takes no env_config here (got {sorted(env_config)}); {leave}"
    if env_id is None:
        return None
    import envpool

    if env_id not in envpool.list_all_envs():
        return f"EnvPool has no env {env_id!r} (envpool.list_all_envs()); {leave}"
    return None


def envpool_has(env_id: str, env_config: Mapping[str, Any]) -> bool:
    """Whether EnvPool is installed and has `env_id`, for an env without env_config."""
    return envpool_refusal(env_id, env_config) is None


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """EnvPool's `num_envs` envs of `env_id` as a NEXT_STEP vector env, stepped by `threads` C++ threads.

    EnvPool resets an env on the step after its episode ended (that step's reward 0, its action ignored): the
    NEXT_STEP contract. Its seeds are fixed when it is built (it ignores reset's seed), so a reset with a seed
    builds it again with that seed.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, env_id: str, *, num_envs: int, threads: int = 1) -> None:
        import envpool

        self.env_id, self.num_envs, self.threads, self.closed = env_id, num_envs, threads, False
        self._make = lambda seed: envpool.make_gymnasium(env_id, num_envs=num_envs, num_threads=threads, seed=seed)
        self.pool = self._make(0)
        self.single_observation_space, self.single_action_space = self.pool.observation_space, self.pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            self.pool.close()
            self.pool = self._make(seed)
        return self.pool.reset()[0], {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if isinstance(self.single_action_space, gym.spaces.Discrete):
            actions = np.asarray(actions, dtype=np.int32)
        obs, rewards, terminated, truncated, _ = self.pool.step(actions)
        return obs, rewards, terminated, truncated, {}

    def close(self, **kwargs: Any) -> None:
        if not self.closed:
            self.closed = True
            self.pool.close()


# The cost model of `processes_pay`, measured with tests' busy-waiting envs and Acrobot-v1 on this project's 2-vCPU
# machine (bench/vector_envs.py): a vector step in workers costs each worker's share of the env steps, 15% slower
# than in one process, plus a pipe round trip per worker; the workers must win by 20% to be worth their processes.
ROUND_TRIP_S = 330e-6
WORKER_SLOWDOWN = 1.15
REQUIRED_GAIN = 0.8


def processes_pay(step_s: float, *, num_envs: int, workers: int) -> bool:
    """Whether `workers` processes would step `num_envs` envs of `step_s` seconds a step clearly faster than one."""
    one = step_s * num_envs
    split = step_s * WORKER_SLOWDOWN * -(-num_envs // workers) + ROUND_TRIP_S * workers
    return workers >= 2 and split < REQUIRED_GAIN * one


def env_step_seconds(env_id: str, env_config: Mapping[str, Any], *, budget_s: float = 0.05,
                     max_steps: int = 50) -> float:
    """Seconds a step of a throwaway instance of the env takes (random actions, after one untimed step; the median
    of at most `max_steps` steps within `budget_s`, so a preemption or a GC pause does not count): what
    `processes_pay` weighs. The instance and its seed are its own; the trial's envs are not touched."""
    env = gym.make(env_id, **env_config)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        times: list[float] = []
        first, start = True, time.perf_counter()
        while len(times) < max_steps and (len(times) < 3 or time.perf_counter() - start < budget_s):
            begin = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if not first:
                times.append(time.perf_counter() - begin)
            first = False
            if terminated or truncated:
                env.reset()
        return float(np.median(times))
    finally:
        env.close()


class ProcessVectorEnv(gym.vector.VectorEnv):
    """`num_envs` envs in `workers` processes; `make(n)` builds one worker's SyncVectorEnv of n envs (NEXT_STEP).

    Worker w steps envs [start_w, stop_w) and is reset with seed + start_w, so every env gets the seed it has
    in one SyncVectorEnv of all `num_envs`, and the joined results are that env's, number for number. Infos
    are not sent back (our learners read none). The workers are forked: they inherit the trial's registered
    envs and loaded plugins, and only step envs. A worker's error is raised here with its own message.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, make: Callable[[int], gym.vector.VectorEnv], *, num_envs: int, workers: int) -> None:
        if not 1 <= workers <= num_envs:
            raise ValueError(f"ProcessVectorEnv needs 1 to num_envs ({num_envs}) workers, got {workers}")
        context = multiprocessing.get_context("fork")
        bounds = np.linspace(0, num_envs, workers + 1).round().astype(int)
        self.num_envs, self.starts = num_envs, bounds[:-1].tolist()
        self.pipes, self.processes, self.closed = [], [], False
        for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            pipe, child = context.Pipe()
            # A forked worker holds copies of the trial's ends of every pipe so far: it closes them, or it would
            # never see its pipe end when the trial's process dies.
            process = context.Process(target=_serve, args=(child, make, stop - start, [*self.pipes, pipe]),
                                      daemon=True, name=f"tune-rl-envs-{start}-{stop - 1}")
            process.start()
            child.close()
            self.pipes.append(pipe)
            self.processes.append(process)
        try:
            spaces = self._gather()
        except Exception:
            self.close()
            raise
        self.single_observation_space, self.single_action_space, autoreset = spaces[0]
        if autoreset != gym.vector.AutoresetMode.NEXT_STEP:
            self.close()
            raise ValueError(f"our learners need NEXT_STEP autoreset, but the env uses {autoreset}")
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _gather(self) -> list[Any]:
        """Every worker's answer, in order; RuntimeError with the first error a worker sent (or its death)."""
        answers, error = [], None
        for pipe, process in zip(self.pipes, self.processes, strict=True):
            try:
                status, value = pipe.recv()
            except EOFError:
                status, value = "error", f"env worker {process.name} exited with status {process.exitcode}"
            if status == "error" and error is None:
                error = value
            answers.append(value)
        if error is not None:
            raise RuntimeError(error)
        return answers

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict]:
        for pipe, start in zip(self.pipes, self.starts, strict=True):
            pipe.send(("reset", (None if seed is None else seed + start, options)))
        return _joined(self._gather()), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        bounds = [*self.starts, self.num_envs]
        for i, pipe in enumerate(self.pipes):
            pipe.send(("step", actions[bounds[i]:bounds[i + 1]]))
        parts = self._gather()
        obs, rewards, terminated, truncated = (list(field) for field in zip(*parts, strict=True))
        return (_joined(obs), np.concatenate(rewards), np.concatenate(terminated), np.concatenate(truncated), {})

    def close(self, **kwargs: Any) -> None:
        """Stop the workers: each closes its envs; one that does not answer within 5 s is killed."""
        if self.closed:
            return
        self.closed = True
        for pipe in self.pipes:
            try:
                pipe.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for pipe, process in zip(self.pipes, self.processes, strict=True):
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
            pipe.close()


def _joined(parts: list[Any]) -> Any:
    """Workers' observations as one batch (a dict of batches for Dict spaces)."""
    if isinstance(parts[0], Mapping):
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    return np.concatenate(parts)


def _serve(pipe: Any, make: Callable[[int], gym.vector.VectorEnv], num_envs: int, trial_ends: list[Any]) -> None:
    """A worker: build its envs, then answer reset/step/close until closed or the trial is gone."""
    for end in trial_ends:
        end.close()
    try:
        env = make(num_envs)
        pipe.send(("ok", (env.single_observation_space, env.single_action_space, env.metadata.get("autoreset_mode"))))
    except Exception as exc:  # noqa: BLE001 - sent to the trial, which raises it
        pipe.send(("error", _describe(exc)))
        return
    while True:
        try:
            command, argument = pipe.recv()
        except (EOFError, KeyboardInterrupt):  # the trial's process ended: nothing left to step for
            env.close()
            return
        try:
            if command == "close":
                env.close()
                pipe.send(("ok", None))
                return
            if command == "reset":
                seed, options = argument
                answer = env.reset(seed=seed, options=options)[0]
            else:
                obs, rewards, terminated, truncated, _ = env.step(argument)
                answer = (obs, rewards, terminated, truncated)
            pipe.send(("ok", answer))
        except Exception as exc:  # noqa: BLE001
            pipe.send(("error", _describe(exc)))


def _describe(exc: BaseException) -> str:
    """One line for the trial's error: the exception and where in the env it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"env worker: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}{where}"
