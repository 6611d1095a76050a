"""Our SAC's settings (`SACConfig`), named as in RLlib's SACConfig where it has the setting. No torch here, as in
tune_runner.algos.config: `tune-rl train --help` lists these fields (their docstrings are the help text) without
loading the learner."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tune_runner.algos.config import OBSERVATION_FILTERS, LearnerConfig
from tune_runner.algos.config_checks import check_network, check_positive, check_schedule, check_unit, check_vector_env
from tune_runner.errors import unknown_name

SAC_POPULATION = ("lr", "gamma", "tau", "alpha_lr")  # the settings in which a population's seeds may differ


@dataclass(frozen=True)
class SACSettings:
    """SAC's own settings, in the order SACConfig lists them before the ones every learner has."""

    lr: float | tuple[tuple[int, float], ...] = 3e-4
    """Adam learning rate of the policy and the Q networks, or a schedule [[env_steps, lr], ...] (linear in
    between)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target Q networks: target <- (1 - tau) * target + tau * Q after every gradient step."""
    alpha_lr: float | None = None
    """Adam learning rate of the entropy temperature's log (automatic entropy tuning, target entropy -action
    numbers); None: lr."""
    initial_alpha: float = 1.0
    """The entropy temperature at the start."""
    train_batch_size: int = 256
    """Transitions per gradient step."""
    replay_buffer_config: Mapping[str, Any] = field(default_factory=lambda: {"capacity": 1000000})
    """Only `capacity` (transitions per seed) is read; RLlib's other keys are accepted and ignored."""
    num_steps_sampled_before_learning_starts: int = 1000
    """Env steps sampled (uniformly random actions) before the first gradient step."""
    training_intensity: float | None = None
    """Trained transitions per sampled env step; None: one gradient step per env step."""
    num_envs_per_env_runner: int = 1
    """Envs stepped together in one vector env."""
    fcnet_hiddens: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the policy and of each Q network."""
    fcnet_activation: str = "relu"
    """tanh, relu, elu or silu."""
    observation_filter: str = "NoFilter"
    """MeanStdFilter: observations scaled by each seed's running mean and std, clipped to +-10 (RLlib's name);
    the statistics are saved in checkpoints and used by evaluate, load_policy and the MLflow model."""


@dataclass(frozen=True)
class SACConfig(LearnerConfig, SACSettings):
    """SAC settings: a tanh-squashed Gaussian policy, twin Q networks with polyak target networks, automatic
    entropy tuning; Box actions only."""

    population_keys = SAC_POPULATION

    def __post_init__(self) -> None:
        check_network(self)
        self._check_model()
        if self.model != "mlp":
            raise ValueError(f"SACConfig.model must be the built-in mlp, got model={self.model!r}; sac builds its "
                             f"policy and Q networks itself: set fcnet_hiddens instead")
        object.__setattr__(self, "replay_buffer_config", dict(self.replay_buffer_config))
        check_schedule(self, "lr")
        check_vector_env(self)
        if self.observation_filter not in OBSERVATION_FILTERS:
            raise ValueError(unknown_name("SACConfig.observation_filter", self.observation_filter, OBSERVATION_FILTERS))
        optional = [n for n in ("training_intensity", "alpha_lr") if getattr(self, n) is not None]
        check_positive(self, "train_batch_size", "capacity", "num_envs_per_env_runner", "initial_alpha",
                       "metrics_num_episodes_for_smoothing", "num_seeds", *optional)
        self._check_seeds()
        check_unit(self, "gamma", allow_zero=False)
        check_unit(self, "tau", allow_zero=False)
        self._check_population()

    @property
    def capacity(self) -> int:
        return int(self.replay_buffer_config.get("capacity", 1000000))

    @property
    def prioritized(self) -> None:
        """SAC replays uniformly (a shared replay actor asks)."""
        return None
