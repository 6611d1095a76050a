"""Our learners' settings: `PPOConfig` and `DQNConfig`, and the checks they run on construction.

No torch, numpy or gymnasium here: `tune-rl train --help` lists these fields (their docstrings
are the help text) without loading a learner. A config checks its model lazily, when built.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import TYPE_CHECKING, Any, TypeVar

from tune_runner.errors import unknown_name
from tune_runner.spec.seeds import AGGREGATES, SEED_STRIDE

if TYPE_CHECKING:
    from tune_runner.algos.replay import Prioritized

Config = TypeVar("Config")
MASKED = "masked Dict"  # the kind of a Dict of exactly `observations` and `action_mask` (trainables.masking)
BOX_ONLY = ("log_std_init", "use_sde", "sde_sample_freq")  # PPOConfig's settings that act on Box actions alone
MASK_KEYS = frozenset({"observations", "action_mask"})


def is_masked(space: Any) -> bool:
    """Whether observations are a Dict of exactly 'observations' and 'action_mask' (MASKED)."""
    import gymnasium as gym

    return isinstance(space, gym.spaces.Dict) and set(space.spaces) == MASK_KEYS


def inner_space(space: Any) -> Any:
    """The 'observations' part of a masked space (what a model reads); any other space as it is."""
    return space["observations"] if is_masked(space) else space


# What our PPO and DQN train on (learner_envs.VecEnv and their networks), as gymnasium space class names. Here,
# without torch: the env check reads them before Ray and torch load (tune_runner.trainables.backends: `trains`).
ACTION_SPACES = ("Discrete",)  # DQN's
PPO_ACTION_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary", "Box")  # a Box: a diagonal Gaussian policy
OBSERVATION_SPACES = ("Box", MASKED)
MASKABLE_ACTIONS = ("Discrete",)  # an action_mask in the observations masks one Discrete choice
OBSERVATION_FILTERS = ("NoFilter", "MeanStdFilter")  # RLlib's names (tune_runner.algos.normalize)
ALIASES = {"train_batch_size_per_learner": "train_batch_size", "lambda": "lambda_"}  # RLlib's names of our settings
SEED_AGGREGATES = AGGREGATES  # how K seeds' metrics become one (tune_runner.algos.seeds)
# The continuous settings in which the seeds of one batched learner may differ (`population`), by learner
PPO_POPULATION = ("lr", "gamma", "lambda_", "clip_param", "vf_loss_coeff", "entropy_coeff")
DQN_POPULATION = ("lr", "gamma")


def check_model(name: str, model_config: Mapping[str, Any]) -> None:
    """`tune_runner.algos.networks.check_model`, imported when a config is built: the registered networks need
    torch. The built-in mlp without a model_config (the default) has nothing to check: the checks before a
    search start no torch for it (2-4 s of the driver's CPU)."""
    from tune_runner.plugins import BUILT_IN_MODEL

    if name == BUILT_IN_MODEL and not model_config:
        return
    from tune_runner.algos.networks import check_model as check

    check(name, model_config)


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


def check_population(config: Any, keys: tuple[str, ...]) -> None:
    """`population` maps settings of `keys` to one value per seed, and every seed's values pass the settings' own
    checks (each seed's config, `member(i)`, is built once here); kept as lists (YAML's, JSON's)."""
    name, population = type(config).__name__, config.population
    if not isinstance(population, Mapping):
        raise ValueError(f"{name}.population must be a mapping {{setting: [a value per seed]}}, got "
                         f"population={population!r}")
    kept = {}
    for key, values in population.items():
        key = ALIASES.get(key, key)
        if key not in keys:
            raise ValueError(unknown_name(f"{name}.population setting", key, keys))
        if not isinstance(values, (list, tuple)) or len(values) != config.num_seeds:
            raise ValueError(f"{name}.population.{key} must list one value per seed ({config.num_seeds}, num_seeds), "
                             f"got {key}={values!r}")
        kept[key] = list(values)
    object.__setattr__(config, "population", kept)
    for seed in range(config.num_seeds if kept else 0):
        try:
            config.member(seed)
        except ValueError as error:
            raise ValueError(f"{name}.population, seed {seed}: {error}") from None


def member_config(config: Config, seed: int) -> Config:
    """Seed `seed` of a config as a one-seed config: its own seed, and its values of `population` in place of the
    shared ones (what it trains as in the batched learner)."""
    values = {key: values[seed] for key, values in config.population.items()}  # type: ignore[attr-defined]
    return dataclasses.replace(config, **values, seed=config.seed + SEED_STRIDE * seed,  # type: ignore[attr-defined]
                               num_seeds=1, population={})


def config_from_dict(cls: type[Config], values: Mapping[str, Any], *,
                     aliases: Mapping[str, str] | None = None) -> Config:
    """`cls(**values)`, but an unknown key is a ValueError naming the closest valid key."""
    aliases = aliases or {}
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs = {}
    for key, value in values.items():
        key = aliases.get(key, key)
        if key not in names:
            raise ValueError(unknown_name(f"{cls.__name__} key", key, names))
        kwargs[key] = value
    return cls(**kwargs)


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
    """ValueError naming gym_env_vectorize_mode or num_env_processes when either is not one we can run."""
    from tune_runner.algos.envpool_envs import envpool_refusal
    from tune_runner.algos.learner_envs import VECTORIZE_MODES

    name = type(config).__name__
    mode = config.gym_env_vectorize_mode
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


@dataclass(frozen=True)
class PPOConfig:
    """PPO settings, named as in RLlib's PPOConfig."""

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
    metrics_num_episodes_for_smoothing: int = 100
    """Finished episodes that episode_return_mean averages over."""
    model: str = "mlp"
    """The network: our built-in `mlp` (sized by fcnet_*), or a name registered with @register_model."""
    model_config: Mapping[str, Any] = field(default_factory=dict)
    """Options of a registered model (its add_args); each is searchable as model_config.<option>."""
    gym_env_vectorize_mode: str | None = None
    """sync, async (gymnasium's: a process per env), processes (num_env_processes workers), vector_entry_point or
    envpool; None picks the fastest (tune_runner.algos.learner_envs.default_vectorize_mode)."""
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
    per seed]} for lr, gamma, lambda_, clip_param, vf_loss_coeff and entropy_coeff. Seed i trains exactly as a
    one-seed learner with its own values would (`member(i)`); the settings not listed are shared."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fcnet_hiddens", tuple(int(h) for h in self.fcnet_hiddens))
        object.__setattr__(self, "model_config", dict(self.model_config))
        check_model(self.model, self.model_config)
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
        check_integer(self, "num_seeds")
        if self.seed_aggregate not in SEED_AGGREGATES:
            raise ValueError(unknown_name("PPOConfig.seed_aggregate", self.seed_aggregate, SEED_AGGREGATES))
        check_unit(self, "gamma", allow_zero=False)
        check_unit(self, "lambda_")
        if self.minibatch_size > self.train_batch_size:
            raise ValueError(f"PPOConfig.minibatch_size must be <= train_batch_size, got minibatch_size="
                             f"{self.minibatch_size!r} > train_batch_size={self.train_batch_size!r}")
        check_population(self, PPO_POPULATION)

    def member(self, seed: int) -> PPOConfig:
        """Seed `seed` as a one-seed config (`member_config`)."""
        return member_config(self, seed)

    def _optional(self) -> list[str]:
        return [name for name in ("vf_clip_param", "grad_clip") if getattr(self, name) is not None]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PPOConfig:
        """A config from a flat dict; an unknown key is a ValueError naming the closest valid one."""
        return config_from_dict(cls, values, aliases={"lambda": "lambda_"})


@dataclass(frozen=True)
class DQNConfig:
    """DQN settings, named as in RLlib's DQNConfig."""

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
    metrics_num_episodes_for_smoothing: int = 100
    """Finished episodes that episode_return_mean averages over."""
    model: str = "mlp"
    """The network: our built-in `mlp` (sized by fcnet_*), or a name registered with @register_model."""
    model_config: Mapping[str, Any] = field(default_factory=dict)
    """Options of a registered model (its add_args); each is searchable as model_config.<option>."""
    gym_env_vectorize_mode: str | None = None
    """sync, async (gymnasium's: a process per env), processes (num_env_processes workers), vector_entry_point or
    envpool; None picks the fastest (tune_runner.algos.learner_envs.default_vectorize_mode)."""
    num_env_processes: int | None = None
    """Worker processes (`processes` mode, each its share of the envs) or EnvPool threads stepping each seed's envs;
    None: in a trial, its CPUs shared among its seeds (tune_runner.trainables.agents), else 1."""
    seed: int = 0
    """Seeds the network, the envs and every random draw of the learner (seed 0 of num_seeds)."""
    num_seeds: int = 1
    """Independent seeds trained side by side as one batched model; seed i is seed + 1,000,000 * i."""
    seed_aggregate: str = "iqm"
    """How the seeds' metrics become the plain-named ones when num_seeds > 1: iqm, mean, min or median."""
    population: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """Seeds that differ in lr or gamma, a population of configs trained as one batch: {setting: [one value per
    seed]}. Seed i trains exactly as a one-seed learner with its own values would (`member(i)`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fcnet_hiddens", tuple(int(h) for h in self.fcnet_hiddens))
        object.__setattr__(self, "model_config", dict(self.model_config))
        check_model(self.model, self.model_config)
        object.__setattr__(self, "replay_buffer_config", dict(self.replay_buffer_config))
        self._epsilon_from_names()
        if not isinstance(self.epsilon, (int, float)):
            object.__setattr__(self, "epsilon", tuple((int(t), float(v)) for t, v in self.epsilon))
        optional = [n for n in ("training_intensity", "grad_clip") if getattr(self, n) is not None]
        check_schedule(self, "lr")
        check_vector_env(self)
        check_positive(self, "train_batch_size", "capacity", "target_network_update_freq", "n_step",
                       "num_envs_per_env_runner", "metrics_num_episodes_for_smoothing", "num_seeds", *optional)
        check_integer(self, "num_seeds")
        if self.seed_aggregate not in SEED_AGGREGATES:
            raise ValueError(unknown_name("DQNConfig.seed_aggregate", self.seed_aggregate, SEED_AGGREGATES))
        check_unit(self, "gamma", allow_zero=False)
        prioritized = self.prioritized
        if prioritized is not None and not (prioritized.alpha >= 0 and 0 <= prioritized.beta <= 1
                                            and prioritized.epsilon > 0):
            raise ValueError(f"DQNConfig.replay_buffer_config of a prioritized buffer needs alpha >= 0, beta in [0, 1] "
                             f"and epsilon > 0, got {dict(self.replay_buffer_config)!r}")
        if self.td_error_loss_fn not in ("huber", "mse"):
            raise ValueError(f"DQNConfig.td_error_loss_fn must be 'huber' or 'mse', got {self.td_error_loss_fn!r}")
        check_population(self, DQN_POPULATION)

    def member(self, seed: int) -> DQNConfig:
        """Seed `seed` as a one-seed config (`member_config`)."""
        return member_config(self, seed)

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

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> DQNConfig:
        """A config from a flat dict; an unknown key is a ValueError naming the closest valid one."""
        return config_from_dict(cls, values)
