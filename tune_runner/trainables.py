"""Trainables by name: `rllib/<ALGO>` wraps any RLlib algorithm in a lean Tune trainable.

The wrapper (not RLlib's own Tune integration) is what keeps results small: a trial
reports our metric names (tune_runner.metrics), never RLlib's several-hundred-key
result and config.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ray import tune

from tune_runner import metrics
from tune_runner.errors import UserError, closest, unknown_name

RLLIB_PREFIX = "rllib/"
# Keys of our trial config that are not RLlib AlgorithmConfig attributes.
ENV_KEYS = ("env", "env_config")


def rllib_algorithms() -> list[str]:
    """The algorithm names RLlib registers (PPO, DQN, SAC, ...)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    return sorted(ALGORITHMS)


def trainable_names() -> list[str]:
    """Every trainable name a space file may use."""
    return [RLLIB_PREFIX + name for name in rllib_algorithms()]


def algorithm_name(trainable: str) -> str:
    """`rllib/PPO` → `PPO`, with a did-you-mean answer for anything else."""
    if trainable.startswith(RLLIB_PREFIX):
        algo = trainable[len(RLLIB_PREFIX):]
        known = rllib_algorithms()
        if algo in known:
            return algo
        upper = {name.upper(): name for name in known}
        if algo.upper() in upper:
            raise UserError(f"unknown trainable {trainable!r}; did you mean "
                            f"{RLLIB_PREFIX + upper[algo.upper()]!r}? (names are case-sensitive)")
    raise UserError(unknown_name("trainable", trainable, trainable_names()))


def rllib_config(algo: str, config: dict[str, Any]) -> Any:
    """An RLlib AlgorithmConfig from our flat trial config (dotted keys nest)."""
    from ray.rllib.algorithms.registry import _get_algorithm_class

    algo_config = _get_algorithm_class(algo).get_default_config()
    algo_config.environment(config["env"], env_config=dict(config.get("env_config") or {}))
    algo_config.update_from_dict(nest({k: v for k, v in config.items() if k not in ENV_KEYS}))
    return algo_config


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1, "c": 2}` → `{"a": {"b": 1}, "c": 2}`."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def check_settings(algo: str, keys: Iterable[str]) -> list[tuple[str, str]]:
    """(key, message) for every key that is not a setting of the RLlib algorithm.

    RLlib's `update_from_dict` silently sets unknown attributes, so a typo like
    `lrr` would otherwise be dropped without a word.
    """
    from ray.rllib.algorithms.registry import _get_algorithm_class

    default = _get_algorithm_class(algo).get_default_config()
    valid = [name for name in vars(default) if not name.startswith("_")]
    problems = []
    for key in keys:
        top = key.split(".")[0]
        translated = default._translate_special_keys(top, warn_deprecated=False)
        if top in ENV_KEYS or hasattr(default, translated):
            continue
        near = closest(top, valid)
        hint = f"did you mean {near!r}?" if near else "see RLlib's AlgorithmConfig for its settings"
        problems.append((key, f"not a setting of rllib/{algo}; {hint}"))
    return problems


def check_config(algo: str, config: dict[str, Any]) -> str | None:
    """RLlib's own validation of one concrete config, before launch; the problem's first line."""
    try:
        rllib_config(algo, config).validate()
    except (ValueError, TypeError) as exc:
        return str(exc).strip().splitlines()[0]
    return None


class RLlibTrainable(tune.Trainable):
    """One RLlib Algorithm per trial, reporting tune-rl's metric names."""

    algo_name = "PPO"

    def setup(self, config: dict[str, Any]) -> None:
        self.algo = rllib_config(self.algo_name, config).build_algo()
        self._last: dict[str, float] = {}

    def step(self) -> dict[str, float]:
        result = metrics.from_rllib(self.algo.train(), previous=self._last)
        self._last = result
        return result

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Reuse this actor for the next trial (saves a process start and RLlib's imports)."""
        self.algo.stop()
        self.setup(new_config)
        self.config = new_config
        return True

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.algo.save_to_path(checkpoint_dir)

    def load_checkpoint(self, checkpoint: str) -> None:
        self.algo.restore_from_path(checkpoint)
        self._last = {"env_steps": self.algo.metrics.peek("num_env_steps_sampled_lifetime", default=0),
                      "episode_return_mean": math.nan}

    def cleanup(self) -> None:
        self.algo.stop()

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """RLlib's own request for this config (driver + env runners + learners)."""
        from ray.rllib.algorithms.registry import _get_algorithm_class

        return _get_algorithm_class(cls.algo_name).default_resource_request(
            rllib_config(cls.algo_name, config))


def trainable_class(trainable: str) -> type[tune.Trainable]:
    """The Tune trainable class for a trainable name (named after the algorithm)."""
    algo = algorithm_name(trainable)
    return type(algo, (RLlibTrainable,), {"algo_name": algo, "__module__": __name__})
