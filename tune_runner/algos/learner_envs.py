"""The envs a learner of ours steps: one seed's vector env (`VecEnv`, built by `make_vec_env`) and K seeds' stepped
as one (`SeedEnvs`).

Autoreset: every vector env runs in gymnasium's NEXT_STEP mode, the default of gymnasium 1.x
and the only mode that CartPole's numpy-vectorized env (`vector_entry_point`) supports. After
a step that ends env i's episode, `obs[i]` is that episode's final observation (so a truncated
episode can be bootstrapped from its value), and env i's next step ignores its action and
returns its first observation with reward 0. `VecEnv` marks that step as not a transition
(`valid` False); neither the step counters nor the losses count it.

No torch here: the config's checks read VECTORIZE_MODES before a search starts.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from tune_runner.algos.action_space import ActionSpace
from tune_runner.algos.envpool_envs import EnvPoolVectorEnv, envpool_has, envpool_refusal
from tune_runner.algos.process_envs import ProcessVectorEnv, env_step_seconds, processes_pay
from tune_runner.algos.vector_envs import NUMPY_VECTOR_ENVS, joint_step, numpy_vector_env
from tune_runner.errors import unknown_name

VECTORIZE_MODES = ("sync", "async", "processes", "vector_entry_point", "envpool")  # gym_env_vectorize_mode
ENV_BACKENDS = ("auto", "gymnasium", "torch")  # env_backend
# The ids with a torch version of ours (tune_runner.algos.classic_control), and the env_config keys it takes
TORCH_CLASSIC_CONTROL = {"CartPole-v1": ("sutton_barto_reward",), "Acrobot-v1": (),
                         "MountainCar-v0": ("goal_velocity",), "MountainCarContinuous-v0": ("goal_velocity",),
                         "Pendulum-v1": ("g",)}


class Step(NamedTuple):
    """What one vector step returns; `valid` is False for the autoreset steps (no transition)."""

    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray


def default_vectorize_mode(env_id: str, *, processes: int = 1, num_envs: int = 1,
                           env_config: Mapping[str, Any] | None = None) -> str:
    """The fastest way we know to step `env_id`: `vector_entry_point` where the env registers a numpy-vectorized
    version or we have one (tune_runner.algos.vector_envs); else `envpool` where EnvPool is installed and has the
    id (and no env_config is set); else `processes` when `processes` (the CPUs a seed's envs may use) is 2 or
    more and a throwaway instance's step is slow enough for worker processes to pay (process_envs.processes_pay);
    else `sync`."""
    if gym.spec(env_id).vector_entry_point or env_id in NUMPY_VECTOR_ENVS:
        return "vector_entry_point"
    if envpool_has(env_id, env_config or {}):
        return "envpool"
    workers = min(processes, num_envs)
    if workers >= 2 and processes_pay(env_step_seconds(env_id, env_config or {}), num_envs=num_envs,
                                      workers=workers):
        return "processes"
    return "sync"


def make_vec_env(env_id: str, *, env_config: Mapping[str, Any] | None, num_envs: int, seed: int,
                 vectorize_mode: str | None = None, processes: int = 1) -> VecEnv:
    """`num_envs` copies of `env_id` (NEXT_STEP autoreset), reset with `seed`; `processes` worker processes
    step them in `processes` mode (at most one per env; fewer than 2 is `sync`)."""
    from tune_runner.plugins import ensure_gym_id

    ensure_gym_id(env_id)
    mode = vectorize_mode or default_vectorize_mode(env_id, processes=processes, num_envs=num_envs,
                                                    env_config=env_config)
    if mode not in VECTORIZE_MODES:
        raise ValueError(unknown_name("gym_env_vectorize_mode", mode, VECTORIZE_MODES))
    kwargs = dict(env_config or {})
    if mode == "vector_entry_point" and not gym.spec(env_id).vector_entry_point:
        ours = numpy_vector_env(env_id, kwargs, num_envs)
        if ours is not None:
            return VecEnv(ours, make=lambda: numpy_vector_env(env_id, kwargs, num_envs), seed=seed)
        mode = "sync"  # an env_config key our version does not take: gymnasium's own envs
    workers = min(processes, num_envs)
    if mode == "processes" and workers < 2:
        mode = "sync"
    if mode == "envpool":
        refusal = envpool_refusal(env_id, kwargs) if vectorize_mode else None  # the default picked it: it can
        if refusal:
            raise ValueError(f"gym_env_vectorize_mode envpool: {refusal}")
        threads = max(1, processes)
        return VecEnv(EnvPoolVectorEnv(env_id, num_envs=num_envs, threads=threads),
                      make=lambda: EnvPoolVectorEnv(env_id, num_envs=num_envs, threads=threads), seed=seed)
    if mode != "vector_entry_point":
        kwargs["vector_kwargs"] = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
    if mode == "processes":
        def share(n: int) -> gym.vector.VectorEnv:
            return gym.make_vec(env_id, num_envs=n, vectorization_mode="sync", **kwargs)

        return VecEnv(ProcessVectorEnv(share, num_envs=num_envs, workers=workers),
                      make=lambda: ProcessVectorEnv(share, num_envs=num_envs, workers=workers), seed=seed)
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    autoreset = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if autoreset != gym.vector.AutoresetMode.NEXT_STEP:
        env.close()
        raise ValueError(f"{env_id}: our learners need NEXT_STEP autoreset, but the env uses {autoreset}")
    return VecEnv(env, make=lambda: gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs),
                  seed=seed)


def torch_env_ids() -> list[str]:
    """Every env id with a torch version: ours and those registered with `register_env(..., torch_env=...)`."""
    from tune_runner.plugins.envs import TORCH_ENVS

    return sorted({*TORCH_CLASSIC_CONTROL, *TORCH_ENVS})


def env_backend_refusal(env_id: str, env_config: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """Why `env_id` with `env_config` cannot run as a torch env and the fix, or None when it can. Apart, as a
    searched env_backend's refusal (tune_runner.trainables.env_check) gives another fix: drop that choice."""
    from tune_runner.plugins.envs import TORCH_ENVS

    if env_id in TORCH_ENVS:
        return None  # a user's torch env takes its env_config as it likes
    if env_id not in TORCH_CLASSIC_CONTROL:
        return (f"{env_id} has no torch version (the envs with one: {', '.join(torch_env_ids())})",
                f"set env_backend: gymnasium or auto, or register one with @register_env({env_id!r}, torch_env=...)")
    taken = {*TORCH_CLASSIC_CONTROL[env_id], "max_episode_steps"}
    unknown = sorted(set(env_config or {}) - taken)
    if unknown:
        return (f"the torch {env_id} takes the env_config keys {sorted(taken)}, got {unknown}",
                "drop them or set env_backend: gymnasium")
    return None


def pick_env_backend(env_id: str, *, backend: str, device: str, env_config: Mapping[str, Any] | None = None,
                     vectorize_mode: str | None = None) -> str:
    """`gymnasium` or `torch` for env_backend `backend`: auto is torch where the env has a torch version (that takes
    this env_config), the device is a GPU and no gym_env_vectorize_mode is asked for; a ValueError where `torch` is
    asked for and the env has none."""
    if backend not in ENV_BACKENDS:
        raise ValueError(unknown_name("env_backend", backend, ENV_BACKENDS))
    refusal = env_backend_refusal(env_id, env_config)
    if backend == "torch" and refusal:
        raise ValueError(f"env_backend torch: {'; '.join(refusal)}")
    if backend == "auto":
        on_gpu = str(device).startswith("cuda")
        return "torch" if on_gpu and refusal is None and vectorize_mode is None else "gymnasium"
    return backend


def split_obs(obs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A batch of observations as (float32 [batch, features], bool action mask or None)."""
    mask = None
    if isinstance(obs, Mapping):
        obs, mask = obs["observations"], np.asarray(obs["action_mask"]).astype(bool, copy=False)
    # C order always: CartPole's vector env hands out a transposed (Fortran-ordered) array, and
    # a matmul over other strides rounds differently, which would break exact restore.
    obs = np.ascontiguousarray(obs, dtype=np.float32)
    return obs.reshape(len(obs), -1), mask


class VecEnv:
    """A NEXT_STEP gymnasium vector env with the autoreset steps made explicit, and state snapshots.

    `obs` and `mask` always hold the latest observations (final ones for envs that just ended).
    """

    def __init__(self, env: gym.vector.VectorEnv, *, make: Callable[[], gym.vector.VectorEnv], seed: int) -> None:
        self.env, self._make = env, make
        try:
            self._start(env, seed)
        except Exception:  # a space we cannot train on: the env's processes and files go with the error
            env.close()
            raise

    def _start(self, env: gym.vector.VectorEnv, seed: int) -> None:
        self.num_envs = env.num_envs
        space = env.single_observation_space
        if isinstance(space, gym.spaces.Dict):
            if set(space.spaces) != {"observations", "action_mask"}:
                raise ValueError(f"a Dict observation space needs exactly the keys 'observations' and "
                                 f"'action_mask', got {sorted(space.spaces)}")
            space = space["observations"]
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"observations must be a Box (or a Dict of a Box and an action_mask), got {space}")
        self.obs_dim = int(np.prod(space.shape))
        self.obs_shape, self.obs_dtype = tuple(space.shape), space.dtype  # kept flat; a CNN views them as images
        self.actions = ActionSpace.of(env.single_action_space)
        # Discrete: actions to choose from; MultiDiscrete: logits, sum(nvec); Box: numbers in one action
        self.num_actions = self.actions.size
        self.resetting = np.zeros(self.num_envs, dtype=bool)
        self.obs, self.mask = split_obs(env.reset(seed=seed)[0])
        if self.actions.nvec and self.mask is not None:
            raise ValueError(f"our learners mask Discrete actions only; this env masks a {self.actions.kind} "
                             f"action space")

    @property
    def masked(self) -> bool:
        return self.mask is not None

    @property
    def backend(self) -> str:
        """How the envs are stepped, as gym_env_vectorize_mode names it."""
        kinds = {ProcessVectorEnv: "processes", EnvPoolVectorEnv: "envpool", gym.vector.AsyncVectorEnv: "async",
                 gym.vector.SyncVectorEnv: "sync"}
        return next((name for kind, name in kinds.items() if isinstance(self.env, kind)), "vector_entry_point")

    @property
    def continuous(self) -> bool:
        return self.actions.continuous

    def step(self, actions: np.ndarray) -> Step:
        """One step of every env; `self.obs`/`self.mask` move on. Box actions are [num_envs, size] and are
        clipped to the space's bounds here (the learner keeps what it sampled)."""
        return self.took(*self.env.step(self.actions.for_env(actions))[:4])

    def took(self, raw: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> Step:
        """Record what a step of the envs gave (also when several seeds' envs were stepped as one)."""
        valid = ~self.resetting
        self.resetting = terminated | truncated
        self.obs, self.mask = split_obs(raw)
        return Step(np.asarray(rewards, dtype=np.float32), terminated, truncated, valid)

    def get_state(self) -> dict[str, Any]:
        """Current observations, autoreset flags, and a pickled copy of the envs where that is exact."""
        return {"obs": self.obs.copy(), "mask": None if self.mask is None else self.mask.copy(),
                "resetting": self.resetting.copy(), "num_envs": self.num_envs, "snapshot": self._snapshot()}

    def set_state(self, state: Mapping[str, Any], *, seed: int) -> bool:
        """Restore `get_state`; True when exact, False when the envs were reset with `seed` instead."""
        restored = state["num_envs"] == self.num_envs and state["snapshot"] is not None
        if restored:
            self.env.close()
            self.env = self._restore(state["snapshot"], state["resetting"])
            self.obs, self.resetting = state["obs"].copy(), state["resetting"].copy()
            self.mask = None if state["mask"] is None else state["mask"].copy()
        else:
            self.resetting[:] = False
            self.obs, self.mask = split_obs(self.env.reset(seed=seed)[0])
        return restored

    def _snapshot(self) -> bytes | None:
        # EzPickle envs (Box2D, MuJoCo, ...) unpickle as freshly built ones, so a snapshot would lie.
        env = self.env
        if isinstance(env, gym.vector.SyncVectorEnv):
            subs = env.envs
            if any(isinstance(e.unwrapped, gym.utils.EzPickle) for e in subs):
                return None
            return _try_pickle(subs)
        if isinstance(env, gym.vector.AsyncVectorEnv | ProcessVectorEnv | EnvPoolVectorEnv) or isinstance(
                env.unwrapped, gym.utils.EzPickle):
            return None
        return _try_pickle(env)

    def _restore(self, snapshot: bytes, resetting: np.ndarray) -> gym.vector.VectorEnv:
        restored = pickle.loads(snapshot)
        if not isinstance(restored, list):
            return restored
        env = self._make()  # a SyncVectorEnv holds env factories (closures), so only its envs were pickled
        env.envs = restored
        env._autoreset_envs = resetting.copy()
        return env

    def close(self) -> None:
        self.env.close()


def _try_pickle(obj: Any) -> bytes | None:
    try:
        return pickle.dumps(obj)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


class SeedEnvs:
    """K seeds' vector envs stepped as one vector env of K * n envs: seed i owns envs i*n .. i*n + n - 1.

    Each seed keeps a vector env of its own (VecEnv): a numpy-vectorized env such as CartPole's
    draws every reset from one generator, so a shared env could not give each seed the envs it has
    alone. Where their class allows (CartPole, Pendulum: vector_envs.JointStep), one step of the class's
    code steps them all, each seed's resets drawn from its own generator; else they are stepped one by one.
    With K = 1 it is that one env's arrays, untouched.
    """

    def __init__(self, envs: Sequence[VecEnv]) -> None:
        self.envs = list(envs)
        first = self.envs[0]
        self.num_seeds, self.envs_per_seed = len(self.envs), first.num_envs
        self.num_envs = self.num_seeds * self.envs_per_seed
        self.obs_dim, self.num_actions, self.masked = first.obs_dim, first.num_actions, first.masked
        self.actions, self.continuous, self.nvec = first.actions, first.continuous, first.actions.nvec
        self.obs_shape, self.obs_dtype = first.obs_shape, first.obs_dtype
        self._joint = joint_step([env.env for env in self.envs])  # None: each seed's envs are stepped alone

    @property
    def backend(self) -> str:
        """How each seed's envs are stepped (VecEnv.backend)."""
        return self.envs[0].backend

    def _joined(self, name: str) -> Any:
        if self.num_seeds == 1:
            return getattr(self.envs[0], name)
        parts = [getattr(env, name) for env in self.envs]
        return None if parts[0] is None else np.concatenate(parts)

    @property
    def obs(self) -> np.ndarray:
        return self._joined("obs")

    @property
    def mask(self) -> np.ndarray | None:
        return self._joined("mask")

    @property
    def resetting(self) -> np.ndarray:
        return self._joined("resetting")

    @property
    def env(self) -> Any:
        """The gymnasium vector env of a one-seed learner (curriculum tasks are set on it)."""
        if self.num_seeds > 1:
            raise AttributeError(f"{self.num_seeds} seeds have one vector env each: use .envs[i].env")
        return self.envs[0].env

    def step(self, actions: np.ndarray) -> Step:
        """One step of every env of every seed; `actions` [K * n] (Box: [K * n, size]; MultiDiscrete: [K * n,
        len(nvec)])."""
        if self.num_seeds == 1:
            return self.envs[0].step(actions)
        n = self.envs_per_seed
        envs = [env.env for env in self.envs]  # a restored seed's env is a new object of the same class
        if self._joint is not None and self._joint.fits(envs) and self._joint.same_settings(envs):
            raw, rewards, terminated, truncated, _ = self._joint.step(envs, self.actions.for_env(actions))
            steps = [env.took(raw[i * n:(i + 1) * n], rewards[i * n:(i + 1) * n], terminated[i * n:(i + 1) * n],
                              truncated[i * n:(i + 1) * n]) for i, env in enumerate(self.envs)]
        else:
            steps = [env.step(actions[i * n:(i + 1) * n]) for i, env in enumerate(self.envs)]
        return Step(*(np.concatenate(part) for part in zip(*steps, strict=True)))

    def close(self) -> None:
        for env in self.envs:
            env.close()
