"""Pieces shared by our PPO and DQN learners: the vector env, episode stats, MLPs, RNG state.

Autoreset: every vector env runs in gymnasium's NEXT_STEP mode, the default of gymnasium 1.x
and the only mode that CartPole's numpy-vectorized env (`vector_entry_point`) supports. After
a step that ends env i's episode, `obs[i]` is that episode's final observation (so a truncated
episode can be bootstrapped from its value), and env i's next step ignores its action and
returns its first observation with reward 0. `VecEnv` marks that step as not a transition
(`valid` False); neither the step counters nor the losses count it.
"""

from __future__ import annotations

import math
import pickle
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from tune_runner import tune_rl_policy
from tune_runner.algos.envpool_envs import EnvPoolVectorEnv, envpool_has, envpool_refusal
from tune_runner.algos.process_envs import ProcessVectorEnv, env_step_seconds, processes_pay
from tune_runner.algos.vector_envs import NUMPY_VECTOR_ENVS, VECTORIZE_MODES, numpy_vector_env
from tune_runner.errors import unknown_name

ACTIVATIONS: dict[str, type[nn.Module]] = tune_rl_policy.ACTIVATIONS  # one tanh for learners and logged policies


def scheduled(value: float | tuple[tuple[int, float], ...], env_steps: int) -> float:
    """A constant, or a schedule's value at `env_steps`: linear between points, flat after the last."""
    if not isinstance(value, tuple):
        return float(value)
    for (t0, v0), (t1, v1) in zip(value, value[1:], strict=False):
        if env_steps < t1:
            return v0 + (v1 - v0) * (max(env_steps, t0) - t0) / (t1 - t0)
    return value[-1][1]


def mlp(sizes: list[int] | tuple[int, ...], activation: str, *, activate_last: bool = False) -> nn.Sequential:
    """Linear layers of `sizes[i] -> sizes[i + 1]` with `activation` between them."""
    if activation not in ACTIVATIONS:
        raise ValueError(unknown_name("activation", activation, ACTIVATIONS))
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or activate_last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class FlatAdam:
    """Adam (torch.optim.Adam's update, no weight decay) over parameters re-homed into one flat buffer.

    Every parameter and its gradient becomes a view into one flat tensor, so a step, gradient
    clipping and zeroing are each a few ops on one tensor, where torch.optim's default loops
    over the tensors, about eight small ops each. It also keeps torch.optim out: building the
    first torch.optim optimizer imports torch._dynamo, 1.5-4 s on one CPU thread, which is as
    long as a whole CartPole run of our PPO. Build it after the modules reach their device;
    `load_state_dict` and `.data` copies keep the views, reassigning `.data` would break them.
    """

    def __init__(self, params: Iterable[nn.Parameter], *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        first = self.params[0]
        size = sum(p.numel() for p in self.params)
        self.flat = torch.empty(size, dtype=first.dtype, device=first.device)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                self.flat[offset:offset + n].copy_(p.reshape(-1))
                p.data = self.flat[offset:offset + n].view_as(p)
                p.grad = self.grad[offset:offset + n].view_as(p)  # backward adds into it in place
                offset += n
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.steps = 0

    def zero_grad(self) -> None:
        self.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Scale the gradient down to global 2-norm `max_norm` (torch.nn.utils.clip_grad_norm_'s rule)."""
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        self.exp_avg.lerp_(self.grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.grad, self.grad, value=1 - beta2)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.steps)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1 ** self.steps))

    def state_dict(self) -> dict[str, Any]:
        """Moments and step count (CPU copies); the parameters themselves live in the modules' state."""
        return {"steps": self.steps, "exp_avg": self.exp_avg.detach().cpu().clone(),
                "exp_avg_sq": self.exp_avg_sq.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict`; the learning rate stays this optimizer's own."""
        if state["exp_avg"].shape != self.flat.shape:
            raise ValueError(f"optimizer state for {state['exp_avg'].numel()} parameters, this one has "
                             f"{self.flat.numel()}: the network sizes differ")
        self.steps = int(state["steps"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Logits (or Q-values) with the actions that `mask` forbids set to -inf.

    A row that forbids every action is left alone: final observations of finished episodes
    often carry an all-zero mask, and their action is never used.
    """
    if mask is None:
        return logits
    keep = mask | ~mask.any(dim=-1, keepdim=True)
    return torch.where(keep, logits, torch.tensor(-torch.inf, dtype=logits.dtype, device=logits.device))


def to_tensor(data: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """`data` as a C-contiguous tensor in torch's own memory, never a view of a numpy array.

    CPU kernels pick their path by strides and alignment (numpy aligns to 16 bytes, torch to
    64), so the same numbers laid out differently can round differently in the last bit, and
    exact restore would drift.
    """
    if isinstance(data, torch.Tensor):
        return data.to(device).contiguous()
    return torch.tensor(np.ascontiguousarray(data), device=device)


def state_dict_copy(module: nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of a module's tensors, so a saved state does not move on with training."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


class Rngs:
    """The random generators a learner owns; none of them is global, so learners never disturb each other."""

    def __init__(self, seed: int) -> None:
        self.torch = torch.Generator().manual_seed(seed)
        self.numpy = np.random.default_rng(seed)
        self.python = random.Random(seed)

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue every stream exactly."""
        return {"torch": self.torch.get_state(), "numpy": self.numpy.bit_generator.state,
                "python": self.python.getstate()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `get_state`'s output."""
        self.torch.set_state(state["torch"])
        self.numpy.bit_generator.state = state["numpy"]
        self.python.setstate(state["python"])


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


def split_obs(obs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A batch of observations as (float32 [batch, features], bool action mask or None)."""
    mask = None
    if isinstance(obs, Mapping):
        obs, mask = obs["observations"], np.asarray(obs["action_mask"]).astype(bool, copy=False)
    # C order always: CartPole's vector env hands out a transposed (Fortran-ordered) array, and
    # a matmul over other strides rounds differently, which would break exact restore.
    obs = np.ascontiguousarray(obs, dtype=np.float32)
    return obs.reshape(len(obs), -1), mask


@dataclass(frozen=True)
class ActionSpace:
    """What our learners need of an env's action space: `Discrete(n)` from 0 (choose one of `size`); a
    `MultiDiscrete` or `MultiBinary` one (`nvec`: one choice of nvec[i] per number, `size` = sum(nvec) logits,
    `shape` the space's own); or a bounded or unbounded `Box` (`size` numbers per action, flat; `low`/`high` as
    float32 [size])."""

    size: int
    shape: tuple[int, ...] = ()
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    nvec: tuple[int, ...] = ()
    dtype: str = "int64"
    kind: str = "Discrete"
    """The gymnasium space's class name: Discrete, MultiDiscrete, MultiBinary or Box."""

    @classmethod
    def of(cls, space: gym.Space) -> ActionSpace:
        """ValueError naming the space when our learners cannot act in it."""
        if isinstance(space, gym.spaces.Discrete) and space.start == 0:
            return cls(size=int(space.n))
        if isinstance(space, gym.spaces.MultiBinary):
            return cls.multi((2,) * int(np.prod(space.shape)), shape=tuple(space.shape), dtype=str(space.dtype),
                             kind="MultiBinary")
        if isinstance(space, gym.spaces.MultiDiscrete) and not np.any(space.start):
            return cls.multi(tuple(int(n) for n in np.ravel(space.nvec)), shape=tuple(space.shape),
                             dtype=str(space.dtype))
        if isinstance(space, gym.spaces.Box) and space.shape and np.issubdtype(space.dtype, np.floating):
            low = np.asarray(space.low, dtype=np.float32).reshape(-1)
            high = np.asarray(space.high, dtype=np.float32).reshape(-1)
            return cls(size=int(np.prod(space.shape)), shape=tuple(space.shape), low=low, high=high, kind="Box")
        raise ValueError(f"our learners need a Discrete or MultiDiscrete action space starting at 0, a MultiBinary "
                         f"one or a float Box, got {space}")

    @classmethod
    def multi(cls, nvec: tuple[int, ...], *, shape: tuple[int, ...], dtype: str = "int64",
              kind: str = "MultiDiscrete") -> ActionSpace:
        """A MultiDiscrete (or MultiBinary: every nvec 2) space of `shape`; ValueError for an empty one."""
        if not nvec or min(nvec) < 1:
            raise ValueError(f"a {kind} action space needs at least one number of at least 1 choice, "
                             f"got nvec {list(nvec)}")
        return cls(size=sum(nvec), shape=shape, nvec=nvec, dtype=dtype, kind=kind)

    @property
    def continuous(self) -> bool:
        """A Box: a Gaussian policy's numbers, not choices."""
        return self.kind == "Box"

    def clip(self, actions: np.ndarray) -> np.ndarray:
        """Box actions [batch, size] clipped to the bounds (float32); discrete ones as they are."""
        if not self.continuous:
            return actions
        return np.clip(actions, self.low, self.high).astype(np.float32, copy=False)

    def for_env(self, actions: np.ndarray) -> np.ndarray:
        """What a gymnasium vector env's step takes: Box actions clipped, MultiDiscrete ones in the space's own
        shape and dtype; Discrete ones as they are."""
        if self.nvec:
            return actions.reshape(len(actions), *self.shape).astype(self.dtype, copy=False)
        if not self.continuous:
            return actions
        return self.clip(actions).reshape(len(actions), *self.shape)


def segments_log_softmax(logits: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """log_softmax over the last axis, or, with `nvec`, over each of its segments of nvec[i] logits: each
    number of a MultiDiscrete action is its own categorical. The entropy, -sum(p log p) over the last axis, is
    then the sum of the numbers' entropies."""
    if not nvec:
        return torch.log_softmax(logits, dim=-1)
    return torch.cat([torch.log_softmax(part, dim=-1) for part in logits.split(list(nvec), dim=-1)], dim=-1)


def segments_argmax(scores: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """argmax over the last axis, or, with `nvec`, within each segment: [..., len(nvec)] choices."""
    if not nvec:
        return scores.argmax(-1)
    return torch.stack([part.argmax(-1) for part in scores.split(list(nvec), dim=-1)], dim=-1)


def segments_gather(logp_all: torch.Tensor, actions: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """The log-probability of each action from `segments_log_softmax`'s output: one choice ([...]), or with
    `nvec` the sum over the numbers' choices ([..., len(nvec)] actions)."""
    if not nvec:
        return logp_all.gather(-1, actions[..., None]).squeeze(-1)
    offsets = torch.as_tensor(np.cumsum([0, *nvec[:-1]]), dtype=actions.dtype, device=actions.device)
    return logp_all.gather(-1, actions + offsets).sum(-1)


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


class EpisodeStats:
    """Per-env running returns and lengths, and a window of the last finished episodes."""

    def __init__(self, num_envs: int, *, window: int = 100) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0

    def update(self, step: Step) -> tuple[np.ndarray, np.ndarray]:
        """Add one vector step; returns the (returns, lengths) of the episodes it finished."""
        self.returns += np.where(step.valid, step.rewards, 0.0)
        self.lengths += step.valid
        done = np.flatnonzero((step.terminated | step.truncated) & step.valid)
        finished = self.returns[done].copy(), self.lengths[done].copy()
        self.add_finished(*finished)
        self.returns[done], self.lengths[done] = 0.0, 0
        return finished

    def add_finished(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Count episodes that finished elsewhere (a rollout worker's envs) into the window."""
        self.recent_returns.extend(np.asarray(returns, dtype=np.float64).tolist())
        self.recent_lengths.extend(np.asarray(lengths, dtype=np.int64).tolist())
        self.episodes += len(returns)

    def drop_running(self) -> None:
        """Forget the episodes in progress (after the envs were reset under them)."""
        self.returns[:], self.lengths[:] = 0.0, 0

    def return_mean(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")

    def len_mean(self) -> float:
        return float(np.mean(self.recent_lengths)) if self.recent_lengths else float("nan")

    def get_state(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "lengths": self.lengths.copy(), "episodes": self.episodes,
                "recent_returns": list(self.recent_returns), "recent_lengths": list(self.recent_lengths)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore `get_state`; a different window size keeps the newest episodes."""
        if len(state["returns"]) == len(self.returns):
            self.returns[:], self.lengths[:] = state["returns"], state["lengths"]
        else:
            self.drop_running()
        self.recent_returns.clear()
        self.recent_lengths.clear()
        self.recent_returns.extend(state["recent_returns"])
        self.recent_lengths.extend(state["recent_lengths"])
        self.episodes = int(state["episodes"])
