"""Envs stepped in worker processes, for a trial with several CPUs and an env without a numpy version (issue 18):
`ProcessVectorEnv`, and whether its workers would pay (`processes_pay`).

One worker process per CPU, each a SyncVectorEnv of its contiguous share of the envs, seeded as that share's envs
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
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

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
