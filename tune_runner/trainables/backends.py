"""Each kind of trainable as one record: our learners, a user's agent, the oracle, and `rllib/<Algo>`.

A `Backend` says what a search needs to know of a trainable before it starts (its settings, what it
reports and what schedulers may count time in, the env spaces it trains, whether it checkpoints) and
how to build its Ray Tune class. `tune_runner.trainables.catalog.backend(name)` resolves a name to its
record once; the checks before launch, the runner and the results then ask the record, never the name.

A record is plain data: making one imports neither Ray nor torch (the checks that refuse a search
before Ray starts read it); its methods import what they need when called.

`oracle` trains nothing: its return is a known function of the config (tune_runner.trainables.oracle),
for trying searchers and schedulers; `oracle/stateless` has no checkpoints and `oracle/stale-restore`
restores stale hyperparameters (PBT's audit catches it). Every backend reports our metric names
(tune_runner.trainables.metrics): the RLlib wrapper (not RLlib's own Tune integration) keeps results small.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tune_runner.errors import UserError, closest
from tune_runner.spec.reserved import AGGREGATE_KEY, MIN_TIME_KEY, RESOURCE_KEYS, RUNNERS_KEY, SEEDS_KEY, TASK_FN_KEY
from tune_runner.trainables import metrics
from tune_runner.trainables.trial import ENV_KEYS, env_config_of

if TYPE_CHECKING:
    from ray import tune

RLLIB_PREFIX = "rllib/"
# Result keys every trainable reports that a scheduler may count time in (env_steps is the default).
TIME_ATTRS = ("env_steps", "training_iteration", "time_total_s")


@dataclass(frozen=True)
class Trains:
    """The env spaces a trainable trains on: gymnasium space class names (or env_check.MASKED); None: any.
    `masks`: the action kinds it can mask (None: any it trains); `from_zero`: its discrete actions must start at 0
    (a Discrete or MultiDiscrete `start` other than 0 is refused); `float_observations`: its models take Box
    observations of a float dtype only (RLlib's default encoders: an int, uint8 or bool Box fails in every trial's
    first forward pass)."""

    actions: tuple[str, ...] | None = None
    observations: tuple[str, ...] | None = None
    masks: tuple[str, ...] | None = None
    from_zero: bool = False
    float_observations: bool = False


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One trainable. `trains` None: it builds no env (the oracle)."""

    kind: ClassVar[str]
    exports_policy: ClassVar[bool] = False  # its best policy is logged as an MLflow model (results.model)
    settings_need_ray: ClassVar[bool] = False  # check_settings imports Ray (RLlib's AlgorithmConfig)
    # What a local Ray's idle workers import as they start, before a trial actor is placed on one
    worker_modules: ClassVar[tuple[str, ...]] = ("ray.tune", "torch", "gymnasium")

    name: str
    reports: tuple[str, ...]  # result keys besides Tune's own (training_iteration, time_total_s, ...)
    trains: Trains | None
    can_checkpoint: bool  # saves and restores its state (PBT's exploit, pausing schedulers and resume need it)
    seeds: bool = False  # trains seeds_per_trial > 1 seeds of a config as one learner (tune_runner.spec.seed_keys)
    replay: bool = False  # keeps a replay buffer: a population member's memory is its capacity's
    member_keys: tuple[str, ...] = ()
    """The settings a population trial (configs_per_trial) may give each member; () for a trainable that trains
    one config per trial (tune_runner.searchers.population)."""

    @property
    def time_attrs(self) -> tuple[str, ...]:
        """Result keys a scheduler may count time in."""
        return TIME_ATTRS + (("episodes",) if "episodes" in self.reports else ())

    def check_settings(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        """(key, message) for every key that is not a setting of this trainable."""
        raise NotImplementedError

    def check_config(self, config: dict[str, Any]) -> str | None:
        """The backend's own validation of one concrete config, before launch; the problem's first line."""
        raise NotImplementedError

    def trainable_class(self) -> type[tune.Trainable]:
        """The Ray Tune class a trial of it runs."""
        raise NotImplementedError

    def resolved_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Every value the trainable uses for `config`: its defaults filled in."""
        raise NotImplementedError

    def trial_resources(self, *, cpus: float | None, gpus: float | None) -> dict[str, float]:
        """The fixed settings that give each trial `cpus` CPUs and `gpus` GPUs (None: left as is)."""
        return {k: v for k, v in zip(RESOURCE_KEYS, (cpus, gpus), strict=True) if v is not None}


ORACLE_REPORTS = ("episode_return_mean", "env_steps", "peak")
# Learner config fields that a trial fills in from the spec's seed settings (tune_runner.spec.seed_keys), never a space.
BY_THE_TRIAL = {"num_seeds": SEEDS_KEY, "seed_aggregate": AGGREGATE_KEY}
USER_REPORTS = ("episode_return_mean", "env_steps")  # a user's agent declares more with `reports = (...)`


@dataclass(frozen=True, kw_only=True)
class OwnBackend(Backend):
    """One of our learners (tune_runner.algos.records), run by OwnTrainable; its policy is exported as a model."""

    kind: ClassVar[str] = "own"
    exports_policy: ClassVar[bool] = True

    def setting_names(self) -> list[str]:
        """Every top-level key a space file may set (our config dataclass: no torch)."""
        return own_setting_names(self.name)

    def check_settings(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        valid = self.setting_names()
        problems = []
        for key in keys:
            top = key.split(".")[0]
            if top in BY_THE_TRIAL:
                problems.append((key, f"set by the trial from the space's top-level {BY_THE_TRIAL[top]}; "
                                      f"write {BY_THE_TRIAL[top]}: there instead"))
            elif top not in valid and top not in ENV_KEYS:
                owner = self._other_owner(top)
                near = closest(top, valid)
                hint = f"did you mean {near!r}?" if near else f"its settings: {', '.join(sorted(valid))}"
                problems.append((key, f"a setting of {owner}, not of {self.name}; drop it, or use trainable {owner}"
                                      if owner else f"not a setting of {self.name}; {hint}"))
        return problems

    def _other_owner(self, key: str) -> str | None:
        """Another of our learners that has `key` as a setting (a space moved from ppo to dqn keeps lambda_)."""
        from tune_runner.algos.records import ours

        return next((name for name in ours() if name != self.name and key in own_setting_names(name)), None)

    def check_config(self, config: dict[str, Any]) -> str | None:
        from tune_runner.trainables.own import check_config

        return check_curriculum(config) or check_config(self.name, config)

    def trainable_class(self) -> type[tune.Trainable]:
        from tune_runner.trainables.own import own_trainable_class

        return own_trainable_class(self.name)

    def resolved_config(self, config: dict[str, Any]) -> dict[str, Any]:
        from tune_runner.trainables.agents import trial_config

        settings = trial_config(self.name, config)
        values = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(vars(settings))
        values[RUNNERS_KEY] = config.get(RUNNERS_KEY, 0)
        values.update({TASK_FN_KEY: config[TASK_FN_KEY]} if config.get(TASK_FN_KEY) else {})
        if not values.get("population", True):  # none: the resolved config stays as before populations existed
            del values["population"]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items() if k not in BY_THE_TRIAL}


def own_setting_names(name: str) -> list[str]:
    """Every top-level key a space file may set for our learner `name` (its config dataclass: no torch)."""
    from tune_runner.algos.config import ALIASES
    from tune_runner.trainables import agents

    fields = [f.name for f in dataclasses.fields(agents.config_class(name)) if f.name not in BY_THE_TRIAL]
    aliases = [alias for alias, target in ALIASES.items() if target in fields]  # RLlib's `lambda` only where lambda_ is
    return [*fields, *aliases, RUNNERS_KEY, MIN_TIME_KEY, *RESOURCE_KEYS, TASK_FN_KEY]


@dataclass(frozen=True, kw_only=True)
class AgentBackend(OwnBackend):
    """A user's agent (`@register_agent`), run by OwnTrainable like ours; its facts are its class's."""

    kind: ClassVar[str] = "agent"
    exports_policy: ClassVar[bool] = False

    @classmethod
    def of(cls, name: str) -> AgentBackend:
        """The record of registered agent `name`: what its class declares (tune_runner.trainables.agents)."""
        from tune_runner.plugins import AGENTS
        from tune_runner.trainables import agents

        agent = AGENTS.get(name)
        return cls(name=name, reports=tuple(getattr(agent, "reports", USER_REPORTS)),
                   trains=Trains(getattr(agent, "action_spaces", None), getattr(agent, "observation_spaces", None)),
                   can_checkpoint=agents.checkpoints(name), seeds=getattr(agent, "seeds_per_trial", False) is True)

    def setting_names(self) -> list[str]:
        """Its add_args options; an agent taking our learner constructor has a config dataclass like ours."""
        from tune_runner.trainables import agents

        if agents.is_ours(self.name):
            return super().setting_names()
        return [*agents.config_class(self.name).names(), MIN_TIME_KEY, *RESOURCE_KEYS, TASK_FN_KEY]


ORACLE_CLASSES = {"oracle": "Oracle", "oracle/stateless": "stateless_oracle",
                  "oracle/stale-restore": "OracleStaleRestore"}  # in tune_runner.trainables.oracle


@dataclass(frozen=True, kw_only=True)
class OracleBackend(Backend):
    """An oracle: any hyperparameter is a setting; check_config asks for its optimum."""

    kind: ClassVar[str] = "oracle"
    worker_modules: ClassVar[tuple[str, ...]] = ("ray.tune",)  # no torch, no env

    def check_settings(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        return []

    def check_config(self, config: dict[str, Any]) -> str | None:
        from tune_runner.trainables.oracle import check_config

        return check_config(config)

    def trainable_class(self) -> type[tune.Trainable]:
        from tune_runner.trainables import oracle

        return getattr(oracle, ORACLE_CLASSES[self.name])

    def resolved_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k not in ENV_KEYS}


# RLlib 2.60's action heads: the default Catalog's distributions for the actor-critic and imitation
# algorithms; DQN's Q-head needs Discrete; SAC's Box or Discrete; CQL and IQL continuous (RLlib's
# algorithm table). Its observations are left to RLlib (check_config builds the masked ones).
RLLIB_CATALOG_ACTIONS = ("Box", "Discrete", "MultiDiscrete", "Tuple", "Dict")
RLLIB_ACTIONS = {"DQN": ("Discrete",), "SAC": ("Box", "Discrete"), "CQL": ("Box",), "IQL": ("Box",),
                 "DreamerV3": ("Box", "Discrete"), **dict.fromkeys(("PPO", "APPO", "IMPALA", "BC", "MARWIL"),
                                                                   RLLIB_CATALOG_ACTIONS)}


@dataclass(frozen=True, kw_only=True)
class RLlibBackend(Backend):
    """`rllib/<algo>`: an RLlib algorithm in our RLlibTrainable; its settings are its AlgorithmConfig's."""

    kind: ClassVar[str] = "rllib"
    settings_need_ray: ClassVar[bool] = True
    algo: str

    @classmethod
    def of(cls, algo: str) -> RLlibBackend:
        """The record of an algorithm RLlib registers (checked by the caller: that needs Ray)."""
        return cls(name=RLLIB_PREFIX + algo, algo=algo, reports=tuple(metrics.RLLIB_METRICS),
                   trains=Trains(RLLIB_ACTIONS.get(algo), float_observations=True), can_checkpoint=True)

    def check_settings(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        """RLlib's `update_from_dict` silently sets unknown attributes: a typo like `lrr` would be dropped."""
        from ray.rllib.algorithms.registry import _get_algorithm_class

        default = _get_algorithm_class(self.algo).get_default_config()
        valid = [name for name in vars(default) if not name.startswith("_")]
        problems = []
        for key in keys:
            top = key.split(".")[0]
            translated = default._translate_special_keys(top, warn_deprecated=False)
            if top in ENV_KEYS or top == TASK_FN_KEY or hasattr(default, translated):
                continue
            near = closest(top, valid)
            hint = f"did you mean {near!r}?" if near else "see RLlib's AlgorithmConfig for its settings"
            problems.append((key, f"not a setting of {self.name}; {hint}"))
        return problems

    def check_config(self, config: dict[str, Any]) -> str | None:
        problem = check_curriculum(config)
        if problem:
            return problem
        try:
            from tune_runner.trainables.rllib import model_config_problem, rllib_config

            problem = model_config_problem(config)
            if problem:
                return problem
            rllib_config(self.algo, config).validate()
        except (ValueError, TypeError, UserError) as exc:
            return str(exc).strip().splitlines()[0]
        return None

    def trainable_class(self) -> type[tune.Trainable]:
        from tune_runner.trainables.rllib import RLlibTrainable

        # Named after the algorithm; the module is where 0.1.0 made it (Ray pickles the class by value).
        return type(self.algo, (RLlibTrainable,), {"algo_name": self.algo,
                                                   "__module__": "tune_runner.trainables.catalog"})

    def resolved_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Its whole AlgorithmConfig, plain data only. The new API stack's network settings are RLlib's private
        `_model_config`: they go in as `model_config`, the name a space sets them by, and the old stack's `model`
        dict (unused there, with its 256x256 default) stays out, or `tune-rl train --config` would train
        another network than the search did and the bundle would say the wrong one."""
        from tune_runner.trainables.rllib import MODEL_CONFIG, rllib_config

        full = rllib_config(self.algo, config).to_dict()
        if isinstance(full.get("_model_config"), dict):
            full[MODEL_CONFIG] = full.pop("_model_config")
        if full.get("enable_rl_module_and_learner"):
            full.pop("model", None)
        # a callback in RLlib's config
        full.update({TASK_FN_KEY: config[TASK_FN_KEY]} if config.get(TASK_FN_KEY) else {})
        return {k: v for k, v in sorted(full.items()) if not k.startswith("_") and k not in ENV_KEYS and _plain(v)}

    def trial_resources(self, *, cpus: float | None, gpus: float | None) -> dict[str, float]:
        """RLlib's own settings: the main process's CPUs, the learner's GPUs."""
        keys = ("num_cpus_for_main_process", "num_gpus_per_learner")
        return {k: v for k, v in zip(keys, (cpus, gpus), strict=True) if v is not None}


def _plain(value: Any) -> bool:
    """Whether a value is plain data (an Enum that subclasses str is not)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return type(value) in (str, int, float, bool, type(None))


def check_curriculum(config: dict[str, Any]) -> str | None:
    """A bad `env_task_fn` reference, or an env without get_task/set_task; the problem's line."""
    if config.get(TASK_FN_KEY) is None:
        return None
    from tune_runner.trainables import curriculum

    try:
        curriculum.resolve_task_fn(config[TASK_FN_KEY])
        curriculum.check_env(config["env"], env_config_of(config))
    except UserError as exc:
        return str(exc)
    return None
