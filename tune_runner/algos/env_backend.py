"""The envs a learner of ours trains on, by its `env_backend` (issue 44): gymnasium's vector envs stepped on the host
(learner_envs.SeedEnvs) or one torch env of every seed's envs on the learner's device (torch_envs.TorchSeedEnvs).
Which one `auto` picks, and why an env cannot be a torch env, is learner_envs.pick_env_backend's (no torch there:
the config's checks read it before a search starts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tune_runner.algos.classic_control import CLASSIC_CONTROL
from tune_runner.algos.learner_envs import SeedEnvs, make_vec_env, pick_env_backend
from tune_runner.algos.torch_envs import TorchSeedEnvs, TorchVectorEnv

SPACE_REPR_NUMBERS = 64


def torch_env_class(env_id: str) -> type[TorchVectorEnv]:
    """The torch version of `env_id`: one registered with `register_env(..., torch_env=...)`, else ours."""
    from tune_runner.plugins.envs import TORCH_ENVS

    cls = TORCH_ENVS.get(env_id) or CLASSIC_CONTROL[env_id]
    if not (isinstance(cls, type) and issubclass(cls, TorchVectorEnv)):
        raise ValueError(f"register_env({env_id!r}, torch_env={cls!r}): a torch env is a subclass of "
                         f"tune_runner.algos.torch_envs.TorchVectorEnv")
    return cls


def make_seed_envs(env_id: str, *, env_config: Mapping[str, Any] | None, seeds: Sequence[int], num_envs: int,
                   backend: str = "auto", device: Any = "cpu", vectorize_mode: str | None = None,
                   processes: int = 1) -> SeedEnvs | TorchSeedEnvs:
    """Every seed's `num_envs` envs of `env_id`: a SeedEnvs of gymnasium vector envs, or with the torch backend
    (pick_env_backend) one torch env of all of them on `device`, seed i's the i-th block."""
    from tune_runner.plugins import ensure_gym_id

    ensure_gym_id(env_id)
    if pick_env_backend(env_id, backend=backend, device=str(device), env_config=env_config,
                        vectorize_mode=vectorize_mode) == "gymnasium":
        # gymnasium's Box writes out its bounds for its repr when it is made: every number of every vector env's
        # batched space, 0.9 s of building 256 CartPole seeds here (2026-11-28). Arrays over SPACE_REPR_NUMBERS
        # numbers print summarised; a single env's space prints whole.
        with np.printoptions(threshold=SPACE_REPR_NUMBERS):
            return SeedEnvs([make_vec_env(env_id, env_config=env_config, seed=seed, num_envs=num_envs,
                                          vectorize_mode=vectorize_mode, processes=processes) for seed in seeds])
    cls = torch_env_class(env_id)
    return TorchSeedEnvs(cls(len(seeds) * num_envs, device=device, **dict(env_config or {})), seeds=seeds)
