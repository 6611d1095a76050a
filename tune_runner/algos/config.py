"""Our learners' settings: `PPOConfig` and `DQNConfig`, each its own settings and those every learner has
(`LearnerConfig`). The checks they run on construction are tune_runner.algos.config_checks'.

No torch, numpy or gymnasium here: `tune-rl train --help` lists these fields (their docstrings
are the help text) without loading a learner. A config checks its model lazily, when built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tune_runner.algos.config_checks import (
    check_finite,
    check_integer,
    check_model,
    check_network,
    check_positive,
    check_schedule,
    check_sde,
    check_unit,
    check_vector_env,
)
from tune_runner.errors import unknown_name
from tune_runner.spec.seed_keys import AGGREGATES, SEED_STRIDE

if TYPE_CHECKING:
    from tune_runner.algos.replay import Prioritized

Config = TypeVar("Config")
BOX_ONLY = ("log_std_init", "use_sde", "sde_sample_freq")  # PPOConfig's settings that act on Box actions alone
OBSERVATION_FILTERS = ("NoFilter", "MeanStdFilter")  # RLlib's names (tune_runner.algos.normalize)
ALIASES = {"train_batch_size_per_learner": "train_batch_size", "lambda": "lambda_"}  # RLlib's names of our settings
SEED_AGGREGATES = AGGREGATES  # how K seeds' metrics become one (tune_runner.algos.seeds)
# The continuous settings in which the seeds of one batched learner may differ (`population`), by learner
PPO_POPULATION = ("lr", "gamma", "lambda_", "clip_param", "vf_loss_coeff", "entropy_coeff")
DQN_POPULATION = ("lr", "gamma")


@dataclass(frozen=True)
class LearnerConfig:
    """The settings every learner of ours has, and what a config does with them: one seed of a population
    (`member`), a config from a flat dict (`from_dict`), the checks of these fields.

    A learner's config lists its own settings first, as it always has: `class PPOConfig(LearnerConfig,
    PPOSettings)`, and a dataclass puts the fields of its last base first. Its `--help` (field docstrings,
    tune_runner.cli.train.field_docs) and every listing of settings keep that order."""

    metrics_num_episodes_for_smoothing: int = 100
    """Finished episodes that episode_return_mean averages over."""
    model: str = "mlp"
    """The network: our built-in `mlp` (sized by fcnet_*), or a name registered with @register_model."""
    model_config: Mapping[str, Any] = field(default_factory=dict)
    """Options of a registered model (its add_args); each is searchable as model_config.<option>."""
    gym_env_vectorize_mode: str | None = None
    """sync, async (gymnasium's: a process per env), processes (num_env_processes workers), vector_entry_point or
    envpool; None picks the fastest (tune_runner.algos.learner_envs.default_vectorize_mode)."""
    env_backend: str = "auto"
    """gymnasium (the env's own code, stepped on the host), torch (the env as tensors on the learner's device: the
    classic control ids and envs registered with a torch_env), or auto: torch where the env has a torch version and
    the learner's device is a GPU, else gymnasium."""
    num_env_processes: int | None = None
    """Worker processes (`processes` mode, each its share of the envs) or EnvPool threads stepping each seed's envs;
    None: in a trial, its CPUs shared among its seeds (tune_runner.trainables.agents), else 1."""
    seed: int = 0
    """Seeds the networks, the envs and every random draw of the learner (seed 0 of num_seeds)."""
    num_seeds: int = 1
    """Independent seeds trained side by side as one batched model; seed i is seed + 1,000,000 * i."""
    seed_aggregate: str = "iqm"
    """How the seeds' metrics become the plain-named ones when num_seeds > 1: iqm, mean, min or median."""
    population: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """Seeds that differ in continuous settings, a population of configs trained as one batch: {setting: [one value
    per seed]} for lr and gamma, and on ppo lambda_, clip_param, vf_loss_coeff and entropy_coeff too. Seed i trains
    exactly as a one-seed learner with its own values would (`member(i)`); the settings not listed are shared."""

    population_keys: ClassVar[tuple[str, ...]] = ()
    """The settings `population` may give each seed (PPO_POPULATION, DQN_POPULATION)."""
    from_dict_aliases: ClassVar[Mapping[str, str]] = {}
    """Other names from_dict takes for a setting (RLlib's `lambda`)."""

    def member(self: Config, seed: int) -> Config:
        """Seed `seed` as a one-seed config: its own seed, and its values of `population` in place of the shared
        ones (what it trains as in the batched learner)."""
        values = {key: values[seed] for key, values in self.population.items()}  # type: ignore[attr-defined]
        return dataclasses.replace(self, **values, seed=self.seed + SEED_STRIDE * seed,  # type: ignore[attr-defined]
                                   num_seeds=1, population={})

    @classmethod
    def from_dict(cls: type[Config], values: Mapping[str, Any]) -> Config:
        """A config from a flat dict; an unknown key is a ValueError naming the closest valid one."""
        aliases = cls.from_dict_aliases  # type: ignore[attr-defined]
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        kwargs = {}
        for key, value in values.items():
            key = aliases.get(key, key)
            if key not in names:
                raise ValueError(unknown_name(f"{cls.__name__} key", key, names))
            kwargs[key] = value
        return cls(**kwargs)

    def _check_model(self) -> None:
        object.__setattr__(self, "model_config", dict(self.model_config))
        check_model(self.model, self.model_config)

    def _check_seeds(self) -> None:
        check_integer(self, "num_seeds")
        if self.seed_aggregate not in SEED_AGGREGATES:
            raise ValueError(unknown_name(f"{type(self).__name__}.seed_aggregate", self.seed_aggregate,
                                          SEED_AGGREGATES))

    def _check_population(self) -> None:
        """`population` maps settings of `population_keys` to one value per seed, and every seed's values pass the
        settings' own checks (each seed's config, `member(i)`, is built once here); kept as lists (YAML's, JSON's)."""
        name, population, keys = type(self).__name__, self.population, self.population_keys
        if not isinstance(population, Mapping):
            raise ValueError(f"{name}.population must be a mapping {{setting: [a value per seed]}}, got "
                             f"population={population!r}")
        kept = {}
        for key, values in population.items():
            key = ALIASES.get(key, key)
            if key not in keys:
                raise ValueError(unknown_name(f"{name}.population setting", key, keys))
            if not isinstance(values, (list, tuple)) or len(values) != self.num_seeds:
                raise ValueError(f"{name}.population.{key} must list one value per seed ({self.num_seeds}, "
                                 f"num_seeds), got {key}={values!r}")
            kept[key] = list(values)
        object.__setattr__(self, "population", kept)
        for seed in range(self.num_seeds if kept else 0):
            try:
                self.member(seed)
            except ValueError as error:
                raise ValueError(f"{name}.population, seed {seed}: {error}") from None


@dataclass(frozen=True)
class PPOSettings:
    """PPO's own settings, in the order PPOConfig lists them before the ones every learner has."""

    lr: float | tuple[tuple[int, float], ...] = 3e-4
    """Adam learning rate, or a schedule [[env_steps, lr], ...] (RLlib's form; linear in between)."""
    gamma: float = 0.99
    """Discount factor."""
    lambda_: float = 0.95
    """GAE lambda (`lambda` is accepted by from_dict too)."""
    clip_param: float = 0.2
    """PPO's clip range of the probability ratio."""
    vf_clip_param: float | None = 10.0
    """Clip of the squared value error (RLlib's meaning); None disables."""
    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus."""
    normalize_advantage: bool = True
    """Scale each seed's advantages to mean 0 and std 1 over its train batch (RLlib does, always)."""
    num_epochs: int = 10
    """Passes over each train batch."""
    minibatch_size: int = 256
    """Transitions per gradient step."""
    train_batch_size: int = 4000
    """Env steps per iteration, rounded up to a multiple of num_envs_per_env_runner."""
    num_envs_per_env_runner: int = 8
    """Envs stepped together in one vector env."""
    fcnet_hiddens: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of both the policy and the value network."""
    fcnet_activation: str = "tanh"
    """tanh, relu, elu or silu."""
    grad_clip: float | None = 0.5
    """Max global gradient norm; None disables."""
    log_std_init: float = 0.0
    """Box actions: the Gaussian policy's log standard deviation at the start, one learned value per action
    number, independent of the observation (discrete actions ignore it)."""
    use_sde: bool = False
    """Box actions: generalized state-dependent exploration (gSDE, Stable-Baselines3's name and rule). The noise is
    the policy's last hidden features times a random matrix, drawn per env from N(0, exp(log_std)^2) with a learned
    log_std per (feature, action number), so the action's std depends on the observation; the built-in mlp only."""
    sde_sample_freq: int = -1
    """With use_sde: draw new noise matrices every this many vector steps; -1: once per rollout (SB3's default)."""
    observation_filter: str = "NoFilter"
    """MeanStdFilter: observations scaled by each seed's running mean and std, clipped to +-10 (RLlib's name);
    the statistics are saved in checkpoints and used by evaluate, load_policy and the MLflow model."""
    normalize_rewards: bool = False
    """Divide rewards by the running std of each env's discounted return, clipped to +-10 (Stable-Baselines3's
    VecNormalize norm_reward); only the value targets see it, the reported returns stay raw."""


@dataclass(frozen=True)
class PPOConfig(LearnerConfig, PPOSettings):
    """PPO settings, named as in RLlib's PPOConfig."""

    population_keys = PPO_POPULATION
    from_dict_aliases = {"lambda": "lambda_"}

    def __post_init__(self) -> None:
        check_network(self)
        self._check_model()
        check_schedule(self, "lr")
        check_vector_env(self)
        check_finite(self, "log_std_init")
        if self.observation_filter not in OBSERVATION_FILTERS:
            raise ValueError(unknown_name("PPOConfig.observation_filter", self.observation_filter, OBSERVATION_FILTERS))
        check_sde(self)
        if not isinstance(self.normalize_rewards, bool):
            raise ValueError(f"PPOConfig.normalize_rewards must be true or false, got "
                             f"normalize_rewards={self.normalize_rewards!r}")
        check_positive(self, "clip_param", "num_epochs", "minibatch_size", "train_batch_size",
                       "num_envs_per_env_runner", "metrics_num_episodes_for_smoothing", "num_seeds",
                       *self._optional())
        self._check_seeds()
        check_unit(self, "gamma", allow_zero=False)
        check_unit(self, "lambda_")
        if self.minibatch_size > self.train_batch_size:
            raise ValueError(f"PPOConfig.minibatch_size must be <= train_batch_size, got minibatch_size="
                             f"{self.minibatch_size!r} > train_batch_size={self.train_batch_size!r}")
        self._check_population()

    def _optional(self) -> list[str]:
        return [name for name in ("vf_clip_param", "grad_clip") if getattr(self, name) is not None]


@dataclass(frozen=True)
class DQNSettings:
    """DQN's own settings, in the order DQNConfig lists them before the ones every learner has."""

    lr: float | tuple[tuple[int, float], ...] = 1e-3
    """Adam learning rate, or a schedule [[env_steps, lr], ...] (RLlib's form; linear in between)."""
    gamma: float = 0.99
    """Discount factor."""
    train_batch_size: int = 64
    """Transitions per gradient step."""
    replay_buffer_config: Mapping[str, Any] = field(default_factory=lambda: {"capacity": 50000})
    """Only `capacity` (transitions) is read; RLlib's other keys are accepted and ignored."""
    num_steps_sampled_before_learning_starts: int = 1000
    """Env steps sampled before the first gradient step."""
    target_network_update_freq: int = 500
    """Env steps between copies of the Q network into the target network."""
    epsilon: float | tuple[tuple[int, float], ...] = ((0, 1.0), (10000, 0.05))
    """A constant, or [[env_step, value], ...] interpolated linearly (RLlib's format)."""
    initial_epsilon: float | None = None
    """With final_epsilon and epsilon_timesteps (RLlib's old EpsilonGreedy names), instead of `epsilon`: the
    schedule [[0, initial_epsilon], [epsilon_timesteps, final_epsilon]]."""
    final_epsilon: float | None = None
    """The exploration rate from epsilon_timesteps env steps on (see initial_epsilon)."""
    epsilon_timesteps: int | None = None
    """Env steps over which epsilon falls from initial_epsilon to final_epsilon (see initial_epsilon)."""
    use_target_network: bool = True
    """Bootstrap from a target network copied every target_network_update_freq env steps; false: from the
    Q network itself (no gradient through the target)."""
    training_intensity: float | None = None
    """Trained transitions per sampled env step; None: one gradient step per vector step."""
    n_step: int = 1
    """Steps of the n-step return."""
    double_q: bool = True
    """Pick the next action with the online network, value it with the target network."""
    dueling: bool = False
    """Separate value and advantage heads."""
    num_envs_per_env_runner: int = 8
    """Envs stepped together in one vector env."""
    fcnet_hiddens: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the Q network."""
    fcnet_activation: str = "relu"
    """tanh, relu, elu or silu."""
    grad_clip: float | None = 10.0
    """Max global gradient norm; None disables."""
    td_error_loss_fn: str = "huber"
    """huber or mse."""


@dataclass(frozen=True)
class DQNConfig(LearnerConfig, DQNSettings):
    """DQN settings, named as in RLlib's DQNConfig."""

    population_keys = DQN_POPULATION

    def __post_init__(self) -> None:
        check_network(self)
        self._check_model()
        object.__setattr__(self, "replay_buffer_config", dict(self.replay_buffer_config))
        self._epsilon_from_names()
        if not isinstance(self.epsilon, (int, float)):
            object.__setattr__(self, "epsilon", tuple((int(t), float(v)) for t, v in self.epsilon))
        optional = [n for n in ("training_intensity", "grad_clip") if getattr(self, n) is not None]
        check_schedule(self, "lr")
        check_vector_env(self)
        check_positive(self, "train_batch_size", "capacity", "target_network_update_freq", "n_step",
                       "num_envs_per_env_runner", "metrics_num_episodes_for_smoothing", "num_seeds", *optional)
        self._check_seeds()
        check_unit(self, "gamma", allow_zero=False)
        prioritized = self.prioritized
        if prioritized is not None and not (prioritized.alpha >= 0 and 0 <= prioritized.beta <= 1
                                            and prioritized.epsilon > 0):
            raise ValueError(f"DQNConfig.replay_buffer_config of a prioritized buffer needs alpha >= 0, beta in [0, 1] "
                             f"and epsilon > 0, got {dict(self.replay_buffer_config)!r}")
        if self.td_error_loss_fn not in ("huber", "mse"):
            raise ValueError(f"DQNConfig.td_error_loss_fn must be 'huber' or 'mse', got {self.td_error_loss_fn!r}")
        self._check_population()

    def _epsilon_from_names(self) -> None:
        """initial_epsilon, final_epsilon and epsilon_timesteps, all three, become `epsilon`'s schedule."""
        names = ("initial_epsilon", "final_epsilon", "epsilon_timesteps")
        given = [n for n in names if getattr(self, n) is not None]
        if not given:
            return
        if self.epsilon != DQNConfig.epsilon:
            raise ValueError(f"DQNConfig.epsilon and {given[0]} both set the exploration schedule; keep one")
        if len(given) < len(names):
            missing = [n for n in names if n not in given]
            raise ValueError(f"DQNConfig.{given[0]} needs {' and '.join(missing)} too (the schedule "
                             f"[[0, initial_epsilon], [epsilon_timesteps, final_epsilon]]); set all three, or epsilon")
        for name in names[:2]:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"DQNConfig.{name} must be a number in [0, 1], got {name}={value!r}")
        steps = self.epsilon_timesteps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"DQNConfig.epsilon_timesteps must be a positive whole number of env steps, got "
                             f"epsilon_timesteps={steps!r}")
        object.__setattr__(self, "epsilon", ((0, float(self.initial_epsilon)), (steps, float(self.final_epsilon))))

    @property
    def capacity(self) -> int:
        return int(self.replay_buffer_config.get("capacity", 50000))

    @property
    def prioritized(self) -> Prioritized | None:
        """Prioritized replay's settings where replay_buffer_config's `type` names a prioritized buffer (RLlib's
        PrioritizedEpisodeReplayBuffer), with its `alpha`, `beta` and `epsilon`; None: uniform replay."""
        from tune_runner.algos.replay import Prioritized

        if "prioritized" not in str(self.replay_buffer_config.get("type", "")).lower():
            return None
        defaults = Prioritized()
        return Prioritized(**{name: float(self.replay_buffer_config.get(name, getattr(defaults, name)))
                              for name in ("alpha", "beta", "epsilon")})

    def epsilon_at(self, env_steps: int) -> float:
        """The exploration rate after `env_steps` sampled env steps."""
        if isinstance(self.epsilon, (int, float)):
            return float(self.epsilon)
        steps, values = zip(*self.epsilon, strict=True)
        import numpy as np

        return float(np.interp(env_steps, steps, values))
