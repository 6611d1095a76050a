"""The checks our learners' configs run on construction, each ValueError naming the config class, the setting
and its value. No torch here: a search's checks run them in the driver."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from tune_runner.errors import unknown_name


def check_model(name: str, model_config: Mapping[str, Any]) -> None:
    """`tune_runner.algos.networks.check_model`, imported when a config is built: the registered networks need
    torch. The built-in mlp without a model_config (the default) has nothing to check: the checks before a
    search start no torch for it (2-4 s of the driver's CPU)."""
    from tune_runner.plugins import BUILT_IN_MODEL, MODELS

    if not isinstance(name, str):  # `model: {fcnet_hiddens: [16, 16]}`, RLlib's form, reads as a name here
        raise ValueError(f"{unknown_name('model', name, MODELS)}; model is the name of a registered network, and "
                         f"the built-in mlp's sizes are settings of their own, e.g. fcnet_hiddens: [64, 64] beside "
                         f"it")
    if name == BUILT_IN_MODEL and not model_config:
        return
    from tune_runner.algos.networks import check_model as check

    check(name, model_config)


ACTIVATIONS = ("elu", "relu", "silu", "tanh")
"""The names of tune_runner.tune_rl_policy.ACTIVATIONS (which imports torch), checked here before a trial starts."""


def check_network(config: Any) -> None:
    """fcnet_hiddens is a list of whole layer sizes >= 1 (kept as a tuple), fcnet_activation one of ACTIVATIONS by
    name: a mapping or a number there is named with its setting, not met as "unhashable" or "not iterable"."""
    name, sizes = type(config).__name__, config.fcnet_hiddens
    whole = isinstance(sizes, (list, tuple)) and all(
        isinstance(h, Real) and not isinstance(h, bool) and math.isfinite(h) and h == int(h) and h >= 1 for h in sizes)
    if not whole:
        raise ValueError(f"{name}.fcnet_hiddens must be a list of layer sizes like [64, 64], got "
                         f"fcnet_hiddens={sizes!r}")
    object.__setattr__(config, "fcnet_hiddens", tuple(int(h) for h in sizes))
    if config.fcnet_activation not in ACTIVATIONS:  # a tuple's `in`: a list or a mapping simply is not in it
        raise ValueError(unknown_name(f"{name}.fcnet_activation", config.fcnet_activation, ACTIVATIONS))


def check_sde(config: Any) -> None:
    """use_sde is a switch, sde_sample_freq -1 or a whole number >= 1, and gSDE needs our built-in mlp's features."""
    if not isinstance(config.use_sde, bool):
        raise ValueError(f"{type(config).__name__}.use_sde must be true or false, got use_sde={config.use_sde!r}")
    freq = config.sde_sample_freq
    if isinstance(freq, bool) or not isinstance(freq, int) or (freq < 1 and freq != -1):
        raise ValueError(f"{type(config).__name__}.sde_sample_freq must be -1 (once per rollout) or a whole number "
                         f">= 1 of vector steps, got sde_sample_freq={freq!r}")
    if config.use_sde and config.model != "mlp":
        raise ValueError(f"{type(config).__name__}.use_sde needs the built-in model 'mlp' (its last hidden layer is "
                         f"the noise's features), got model={config.model!r}; set use_sde: false for this model")


def _number(config: Any, name: str) -> float:
    """The value of `name`, or a ValueError naming it when it is not a real number."""
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, Real):  # numpy's scalars are Real too
        raise ValueError(f"{type(config).__name__}.{name} must be a number, got {name}={value!r} "
                         f"(a {type(value).__name__})")
    return value


def check_positive(config: Any, *names: str) -> None:
    """ValueError naming the first of `names` that is not > 0."""
    for name in names:
        value = _number(config, name)
        if not value > 0:
            raise ValueError(f"{type(config).__name__}.{name} must be > 0, got {name}={value!r}")


def check_integer(config: Any, *names: str) -> None:
    """ValueError naming the first of `names` that is not a whole number."""
    for name in names:
        value = _number(config, name)
        if value != int(value):
            raise ValueError(f"{type(config).__name__}.{name} must be a whole number, got {name}={value!r}")
        object.__setattr__(config, name, int(value))


def check_finite(config: Any, *names: str) -> None:
    """ValueError naming the first of `names` that is not a finite number."""
    for name in names:
        value = _number(config, name)
        if not math.isfinite(value):
            raise ValueError(f"{type(config).__name__}.{name} must be a finite number, got {name}={value!r}")


def check_unit(config: Any, *names: str, allow_zero: bool = True) -> None:
    """ValueError naming the first of `names` that is not in [0, 1] ((0, 1] without `allow_zero`)."""
    for name in names:
        value = _number(config, name)
        above_low = value >= 0.0 if allow_zero else value > 0.0
        if not (above_low and value <= 1.0):  # NaN fails both
            interval = "[0, 1]" if allow_zero else "(0, 1]"
            raise ValueError(f"{type(config).__name__}.{name} must be in {interval}, got {name}={value!r}")


def check_vector_env(config: Any) -> None:
    """ValueError naming env_backend, gym_env_vectorize_mode or num_env_processes when one is not one we can run."""
    from tune_runner.algos.envpool_envs import envpool_refusal
    from tune_runner.algos.learner_envs import ENV_BACKENDS, VECTORIZE_MODES

    name = type(config).__name__
    if config.env_backend not in ENV_BACKENDS:
        raise ValueError(unknown_name(f"{name}.env_backend", config.env_backend, ENV_BACKENDS))
    mode = config.gym_env_vectorize_mode
    if config.env_backend == "torch" and mode is not None:
        raise ValueError(f"{name}.env_backend torch steps the envs as tensors, and gym_env_vectorize_mode={mode!r} "
                         f"picks how gymnasium's are stepped; unset gym_env_vectorize_mode, or set env_backend: "
                         f"gymnasium")
    if mode is not None and mode not in VECTORIZE_MODES:
        raise ValueError(unknown_name(f"{name}.gym_env_vectorize_mode", mode, VECTORIZE_MODES))
    refusal = envpool_refusal(None, {}) if mode == "envpool" else None  # which env is not known here
    if refusal:
        raise ValueError(f"{name}.gym_env_vectorize_mode envpool: {refusal}")
    if config.num_env_processes is not None:
        check_positive(config, "num_env_processes")
        check_integer(config, "num_env_processes")


def check_schedule(config: Any, name: str) -> None:
    """`name` is a number > 0, or RLlib's schedule form `[[env_steps, value], ...]`.

    A schedule starts at env step 0, its steps rise strictly, its values are >= 0 and the
    first is > 0 (ending at 0 is the usual linear decay).
    """
    value = getattr(config, name)
    if not isinstance(value, (list, tuple)):
        check_positive(config, name)
        return
    where = f"{type(config).__name__}.{name}"
    pairs = [tuple(p) for p in value if isinstance(p, (list, tuple)) and len(p) == 2]
    numbers = all(not isinstance(x, bool) and isinstance(x, (int, float)) for p in pairs for x in p)
    if not value or len(pairs) != len(value) or not numbers:
        raise ValueError(f"{where} must be a number or a schedule [[env_steps, value], ...], got {name}={value!r}")
    steps = [p[0] for p in pairs]
    if steps[0] != 0 or any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ValueError(f"{where}: a schedule's env steps start at 0 and rise, got {name}={value!r}")
    if pairs[0][1] <= 0 or any(v < 0 for _, v in pairs):
        raise ValueError(f"{where}: a schedule's values are >= 0 and the first > 0, got {name}={value!r}")
    object.__setattr__(config, name, tuple((int(t), float(v)) for t, v in pairs))
