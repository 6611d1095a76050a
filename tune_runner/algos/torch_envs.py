"""Envs as tensors on the learner's device (issue 44): N copies of one env stepped by a few torch ops, K seeds'
envs in one object, with no Python loop over seeds or envs in a step.

`TorchVectorEnv` is the base a torch env subclasses (ours: tune_runner.algos.classic_control; a user's: the
`torch_env=` of @register_env). It keeps gymnasium's NEXT_STEP autoreset: after the step that ends env i's
episode, its observation is the final one, and its next step ignores the action and returns its first
observation with reward 0 and both flags False. The time limit (`max_episode_steps`) truncates as gymnasium's
TimeLimit does (truncated also when the last step terminates).

**Randomness.** A reset draws its start state from uniforms that are a hash of (the env's seed, its index among
that seed's envs, its reset count, the number's index): integer tensor ops only, so every device gives the same
numbers, and one call draws every env's. Seed i's envs thus start where they would alone, whatever the other
seeds do, and the env state is four tensors (state, steps, ending flags, reset counts) plus the keys. The starts
are drawn for `POOL` resets of every env at once and refilled every POOL // 2 steps (an env resets at most every
other step), so a step costs one gather, not a hash; seeding or restoring envs draws their starts alone and leaves
the pool to the next step.

`TorchSeedEnvs` is what our learners step: learner_envs.SeedEnvs' interface (numpy observations and a `Step`),
with one `TorchSeedPart` per seed for its checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from tune_runner.algos.action_space import ActionSpace
from tune_runner.algos.learner_envs import Step

POOL = 16  # resets drawn ahead per env; refilled every POOL // 2 steps
_MASK32 = 0xFFFFFFFF


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) of int64 values in [0, 2**32).

    x * c mod 2**32 is the int64 product masked: it wraps mod 2**64 (on every device torch runs on), which keeps
    its low 32 bits. In place on a fresh tensor: a pool of 65,536 envs hashes 8 M words, and splitting c into
    16-bit halves, one fresh tensor per op, made that most of building 1024 seeds' learner (2026-11-28)."""
    x = x ^ (x >> 16)
    x.mul_(0x7FEB352D).bitwise_and_(_MASK32)
    x ^= x >> 15
    x.mul_(0x846CA68B).bitwise_and_(_MASK32)
    x ^= x >> 16
    return x


def env_keys(seeds: Sequence[int], envs_per_seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[len(seeds) * envs_per_seed] keys: env j of seed s gets a hash of (s, j), a function of s and j alone."""
    words = torch.tensor([[int(s) & _MASK32, (int(s) >> 32) & _MASK32] for s in seeds], dtype=torch.int64,
                         device=device)
    seed_key = mix32(mix32(words[:, 0] ^ 0x9E3779B9) ^ words[:, 1])
    index = torch.arange(envs_per_seed, dtype=torch.int64, device=device)
    return mix32(seed_key[:, None] ^ mix32(index + 0x85EBCA6B & _MASK32)[None]).reshape(-1)


def hashed_uniform(keys: torch.Tensor, counts: torch.Tensor, size: int) -> torch.Tensor:
    """float64 uniforms in [0, 1) shaped [*counts.shape, size], 53 random bits each: number d of reset `counts` of
    the env with `keys` (broadcast against counts)."""
    reset = mix32(keys ^ mix32(counts & _MASK32) ^ mix32((counts >> 32) + 0x27D4EB2F & _MASK32))
    words = mix32(reset[..., None] ^ mix32(torch.arange(1, 2 * size + 1, dtype=torch.int64, device=keys.device)))
    high = (words[..., 0::2] >> 5).mul_(67108864).add_(words[..., 1::2] >> 6)  # 27 and 26 bits
    return high.to(torch.float64).div_(9007199254740992.0)


def f32(x: torch.Tensor) -> torch.Tensor:
    """float64 values rounded to float32 and back: where gymnasium holds or computes a float32."""
    return x.float().double()


class TorchVectorEnv:
    """`num_envs` copies of one env as tensors on `device`, NEXT_STEP autoreset, and a time limit.

    A subclass sets `state_size`, `draws` (uniforms per reset), `max_episode_steps`, the single spaces, and
    `start` (uniforms to start states), `dynamics` (one step of every env) and `observe`. It takes its settings
    (env_config keys, as gymnasium.make takes them) as keyword arguments; `settings` lists the ones it takes.
    """

    state_size: ClassVar[int]
    draws: ClassVar[int]
    max_episode_steps: int
    settings: ClassVar[tuple[str, ...]] = ()
    single_observation_space: gym.spaces.Box
    single_action_space: gym.Space

    def __init__(self, num_envs: int, *, device: torch.device | str = "cpu", max_episode_steps: int | None = None,
                 **settings: Any) -> None:
        unknown = sorted(set(settings) - set(self.settings))
        if unknown:
            raise ValueError(f"{type(self).__name__} takes the env_config keys {list(self.settings)} and "
                             f"max_episode_steps, got {unknown}")
        for name, value in settings.items():
            setattr(self, name, value)
        self.num_envs, self.device = num_envs, torch.device(device)
        if max_episode_steps is not None:
            self.max_episode_steps = int(max_episode_steps)
        self.seed([0], num_envs)

    # ---- a subclass's dynamics ----------------------------------------------------------------

    def start(self, uniforms: torch.Tensor) -> torch.Tensor:
        """Start states [..., state_size] (float64) from reset uniforms [..., draws]."""
        raise NotImplementedError

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                             torch.Tensor]:
        """(next state, reward (float64 or float32) and terminated) of every env from `state` [N, state_size]."""
        raise NotImplementedError

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        """float32 observations [N, obs_dim] of `state`."""
        raise NotImplementedError

    def prepare_actions(self, actions: Any) -> torch.Tensor:
        """What a step gets: Discrete actions as int64 [N], Box ones as float32 [N, size]."""
        dtype = torch.float32 if isinstance(self.single_action_space, gym.spaces.Box) else torch.int64
        actions = torch.as_tensor(actions, device=self.device).to(dtype)
        return actions.reshape(self.num_envs, -1) if dtype is torch.float32 else actions.reshape(self.num_envs)

    # ---- stepping ----------------------------------------------------------------------------

    def seed(self, seeds: Sequence[int], envs_per_seed: int) -> torch.Tensor:
        """Reset every env: seed i's envs are envs i * envs_per_seed ...; their first observations."""
        if len(seeds) * envs_per_seed != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds of {envs_per_seed} envs are not this env's {self.num_envs} envs")
        self.keys = env_keys(seeds, envs_per_seed, self.device)
        self.resets = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.state = self.start(hashed_uniform(self.keys, self.resets, self.draws))
        self._stale()
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.ending = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self.obs = self.observe(self.state)
        return self.obs

    def reset(self, *, seed: int = 0) -> torch.Tensor:
        """Every env from a fresh start drawn with `seed`; the observations."""
        return self.seed([seed], self.num_envs)

    def _stale(self) -> None:
        """The pool no longer fits the envs: the next step refills it (a function of keys and reset counts alone, so
        building or restoring envs need not draw POOL resets of every env, and twice)."""
        self._since = POOL // 2

    def _refill(self) -> None:
        counts = self.resets[:, None] + torch.arange(POOL, device=self.device)
        self._pool = self.start(hashed_uniform(self.keys[:, None], counts, self.draws))
        self._base, self._since = self.resets, 0

    def step(self, actions: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of every env: (observations, rewards float32, terminated, truncated), gymnasium's NEXT_STEP."""
        if self._since >= POOL // 2:
            self._refill()
        self._since += 1
        resetting = self.ending
        state, reward, terminated = self.dynamics(self.state, self.prepare_actions(actions))
        elapsed = self.elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        starts = self._pool.gather(1, (self.resets - self._base).view(-1, 1, 1).expand(-1, 1, self.state_size))
        self.state = torch.where(resetting[:, None], starts[:, 0], state)
        self.elapsed = torch.where(resetting, 0, elapsed)
        self.resets = self.resets + resetting
        stepping = ~resetting
        terminated, truncated = terminated & stepping, truncated & stepping
        reward = torch.where(resetting, 0.0, reward.to(torch.float32))
        self.ending = terminated | truncated
        self.obs = self.observe(self.state)
        return self.obs, reward, terminated, truncated

    # ---- state ---------------------------------------------------------------------------------

    def reseed(self, envs: slice, *, seed: int) -> None:
        """Envs `envs` start afresh as the envs of one seed `seed` do."""
        keys = env_keys([seed], len(range(self.num_envs)[envs]), self.device)
        resets = torch.zeros_like(keys)
        self.set_state({"state": self.start(hashed_uniform(keys, resets, self.draws)), "elapsed": resets,
                        "ending": resets.bool(), "resets": resets, "keys": keys}, envs)

    STATE = ("state", "elapsed", "ending", "resets", "keys")

    def get_state(self, envs: slice = slice(None)) -> dict[str, torch.Tensor]:
        """CPU copies of envs `envs`' tensors: everything their next steps depend on."""
        return {name: getattr(self, name)[envs].detach().cpu().clone() for name in self.STATE}

    def set_state(self, state: Mapping[str, Any], envs: slice = slice(None)) -> None:
        """Envs `envs` continue from `get_state`'s output."""
        for name in self.STATE:
            tensor = getattr(self, name).clone()
            tensor[envs] = torch.as_tensor(state[name]).to(self.device)
            setattr(self, name, tensor)
        self._stale()
        self.obs = self.observe(self.state)


class TorchSeedPart:
    """Seed i's envs of a TorchSeedEnvs, as learner_envs.VecEnv answers for them: state, restore, backend."""

    backend = "torch"

    def __init__(self, owner: TorchSeedEnvs, seed: int) -> None:
        self.owner, self.num_envs = owner, owner.envs_per_seed
        self.envs = slice(seed * self.num_envs, (seed + 1) * self.num_envs)

    @property
    def env(self) -> TorchVectorEnv:
        return self.owner.torch_env

    def get_state(self) -> dict[str, Any]:
        """The seed's env tensors (`torch`), and its observations and autoreset flags as VecEnv saves them."""
        owner = self.owner
        return {"obs": owner.obs[self.envs].copy(), "mask": None, "resetting": owner.resetting[self.envs].copy(),
                "num_envs": self.num_envs, "snapshot": None, "torch": owner.torch_env.get_state(self.envs)}

    def set_state(self, state: Mapping[str, Any], *, seed: int) -> bool:
        """Restore `get_state` (exact); a state of another backend or env count: the seed's envs reset with `seed`."""
        env = self.owner.torch_env
        if state.get("torch") is not None and state["num_envs"] == self.num_envs:
            env.set_state(state["torch"], self.envs)
            exact = True
        else:
            env.reseed(self.envs, seed=seed)
            exact = False
        self.owner.sync()
        return exact

    def close(self) -> None:
        pass


class TorchSeedEnvs:
    """K seeds' envs as one TorchVectorEnv of K * n envs (seed i owns envs i*n .. i*n + n - 1), with
    learner_envs.SeedEnvs' interface: numpy `obs`, `resetting`, and `step` giving a numpy `Step`."""

    backend = "torch"
    masked = False
    mask = None

    def __init__(self, env: TorchVectorEnv, *, seeds: Sequence[int]) -> None:
        self.torch_env = env
        self.num_seeds, self.num_envs = len(seeds), env.num_envs
        self.envs_per_seed = env.num_envs // len(seeds)
        space = env.single_observation_space
        self.obs_shape, self.obs_dtype, self.obs_dim = tuple(space.shape), space.dtype, int(np.prod(space.shape))
        self.actions = ActionSpace.of(env.single_action_space)
        self.num_actions, self.continuous, self.nvec = self.actions.size, self.actions.continuous, self.actions.nvec
        env.seed(list(seeds), self.envs_per_seed)
        self.envs = [TorchSeedPart(self, i) for i in range(self.num_seeds)]
        self.sync()

    def sync(self) -> None:
        """Read the observations and autoreset flags of the torch env."""
        env = self.torch_env
        self.obs = env.obs.cpu().numpy()
        self.resetting = env.ending.cpu().numpy()

    @property
    def env(self) -> TorchVectorEnv:
        return self.torch_env

    def step(self, actions: np.ndarray) -> Step:
        """One step of every env of every seed; `actions` [K * n] (Box: [K * n, size])."""
        valid = ~self.resetting
        obs, rewards, terminated, truncated = self.torch_env.step(self.actions.clip(actions))
        self.obs, self.resetting = obs.cpu().numpy(), self.torch_env.ending.cpu().numpy()
        return Step(rewards.cpu().numpy(), terminated.cpu().numpy(), truncated.cpu().numpy(), valid)

    def close(self) -> None:
        pass
