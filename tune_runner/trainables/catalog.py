"""Trainables by name: our own `ppo` and `dqn`, `rllib/<ALGO>` for any RLlib algorithm, and `oracle`.

`oracle` trains nothing: its return is a known function of the config (tune_runner.trainables.oracle),
for trying searchers and schedulers; `oracle/stateless` has no checkpoints and
`oracle/stale-restore` restores stale hyperparameters (PBT's audit catches it).

Both report our metric names (tune_runner.metrics). The RLlib wrapper (not RLlib's own
Tune integration) is what keeps results small: never RLlib's several-hundred-key result.
The functions at the bottom (`check_settings`, `check_config`, `trainable_class`) take any
trainable name and dispatch to the backend.

Importing this module loads neither Ray nor torch: the checks that refuse a search before Ray
starts read it (`trains`, `reported`, our agents' settings). The RLlib trainable, a Ray Tune
class, lives in tune_runner.trainables.rllib.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tune_runner import metrics
from tune_runner.errors import UserError, closest, unknown_name
from tune_runner.trainables.curriculum import TASK_FN
from tune_runner.trainables.trial import ENV_KEYS, env_config_of

if TYPE_CHECKING:
    from ray import tune

RLLIB_PREFIX = "rllib/"
OWN = ("ppo", "dqn")
ORACLES = ("oracle", "oracle/stateless", "oracle/stale-restore")
# Result keys every trainable reports that a scheduler may count time in (env_steps is the default).
TIME_ATTRS = ("env_steps", "training_iteration", "time_total_s")


def rllib_algorithms() -> list[str]:
    """The algorithm names RLlib registers (PPO, DQN, SAC, ...)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    return sorted(ALGORITHMS)


def is_own(trainable: str) -> bool:
    """Whether the trainable is an agent of ours or a user's registered one (run by OwnTrainable)."""
    from tune_runner.plugins import AGENTS

    return trainable in OWN or trainable in AGENTS


def trainable_names() -> list[str]:
    """Every trainable name a space file may use."""
    from tune_runner.plugins import AGENTS

    users = [name for name in AGENTS if name not in OWN]
    return [*OWN, *users, *ORACLES, *(RLLIB_PREFIX + name for name in rllib_algorithms())]


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


def resolve(trainable: str) -> str:
    """Check a trainable name: `ppo`, `dqn` or `rllib/<ALGO>` (did-you-mean otherwise)."""
    if is_own(trainable) or trainable in ORACLES:
        return trainable
    if trainable.lower() in OWN + ORACLES:
        raise UserError(f"unknown trainable {trainable!r}; did you mean {trainable.lower()!r}?")
    algorithm_name(trainable)
    return trainable


def check_settings(trainable: str, keys: Iterable[str]) -> list[tuple[str, str]]:
    """(key, message) for every key that is not a setting of the trainable."""
    if trainable in ORACLES:
        return []  # any hyperparameter; check_config asks for its optimum
    if is_own(trainable):
        valid = setting_names(trainable)
        problems = []
        for key in keys:
            top = key.split(".")[0]
            if top not in valid and top not in ENV_KEYS:
                near = closest(top, valid)
                hint = f"did you mean {near!r}?" if near else f"its settings: {', '.join(sorted(valid))}"
                problems.append((key, f"not a setting of {trainable}; {hint}"))
        return problems
    return _check_rllib_settings(algorithm_name(trainable), keys)


def setting_names(agent: str) -> list[str]:
    """Every top-level key a space file may set for agent `agent` (ours: its config dataclass, no torch)."""
    import dataclasses

    from tune_runner.algos.config import ALIASES
    from tune_runner.trainables import agents

    extras = ["cpus_per_trial", "gpus_per_trial", "env_task_fn"]
    if agent not in OWN and not agents.is_ours(agent):  # ours are known without importing their (torch) class
        return agents.config_class(agent).names() + extras
    return [f.name for f in dataclasses.fields(agents.config_class(agent))] + list(ALIASES) + \
        ["num_env_runners", *extras]


def check_config(trainable: str, config: dict[str, Any]) -> str | None:
    """The backend's own validation of one concrete config, before launch; the problem's first line."""
    if trainable in ORACLES:
        from tune_runner.trainables.oracle import check_config as check_oracle

        return check_oracle(config)
    problem = _check_curriculum(config)
    if problem:
        return problem
    if is_own(trainable):
        from tune_runner.trainables.own import check_config as check_own

        return check_own(trainable, config)
    return _check_rllib_config(algorithm_name(trainable), config)


def trainable_class(trainable: str) -> type[tune.Trainable]:
    """The Tune trainable class for a trainable name (named after the algorithm)."""
    if trainable in ORACLES:
        from tune_runner.trainables import oracle

        return {"oracle": oracle.Oracle, "oracle/stateless": oracle.stateless_oracle,
                "oracle/stale-restore": oracle.OracleStaleRestore}[trainable]
    if is_own(trainable):
        from tune_runner.trainables.own import own_trainable_class

        return own_trainable_class(trainable)
    from tune_runner.trainables.rllib import RLlibTrainable

    algo = algorithm_name(trainable)
    return type(algo, (RLlibTrainable,), {"algo_name": algo, "__module__": __name__})


OWN_REPORTS = {  # `task` only with a curriculum (env_task_fn)
    "ppo": ("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "policy_loss", "vf_loss",
            "entropy", "kl", "lr", "sps", "task"),
    "dqn": ("episode_return_mean", "episode_len_mean", "episodes", "env_steps", "qf_loss", "td_error_mean",
            "epsilon", "lr", "sps", "task"),
}
ORACLE_REPORTS = ("episode_return_mean", "env_steps", "peak")
USER_REPORTS = ("episode_return_mean", "env_steps")  # a user's agent declares more with `reports = (...)`


def reported(trainable: str) -> tuple[str, ...]:
    """Result keys the trainable reports (besides Tune's own `training_iteration`, `time_total_s`, ...)."""
    if trainable in ORACLES:
        return ORACLE_REPORTS
    if trainable in OWN:
        return OWN_REPORTS[trainable]
    if is_own(trainable):
        from tune_runner.plugins import AGENTS

        return tuple(getattr(AGENTS.get(trainable), "reports", USER_REPORTS))
    return tuple(metrics.RLLIB_METRICS)


def time_attrs(trainable: str) -> tuple[str, ...]:
    """Result keys a scheduler may count time in for this trainable."""
    return TIME_ATTRS + (("episodes",) if "episodes" in reported(trainable) else ())


def resolved_config(trainable: str, config: dict[str, Any]) -> dict[str, Any]:
    """Every value the trainable uses for `config`: its defaults filled in (RLlib: its whole AlgorithmConfig)."""
    plain = (str, int, float, bool, type(None))

    def keep(value: Any) -> bool:
        if isinstance(value, (list, tuple)):
            return all(keep(v) for v in value)
        if isinstance(value, dict):
            return all(isinstance(k, str) and keep(v) for k, v in value.items())
        return type(value) in plain  # exactly: an Enum that subclasses str is not plain data

    if trainable in ORACLES:
        return {k: v for k, v in config.items() if k not in ENV_KEYS}
    if is_own(trainable):
        import dataclasses

        from tune_runner.trainables.own import learner_classes
        from tune_runner.trainables.trial import learner_settings

        _, config_cls = learner_classes(trainable)
        settings = config_cls.from_dict(learner_settings(config))
        values = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(vars(settings))
        values["num_env_runners"] = config.get("num_env_runners", 0)
        values.update({TASK_FN: config[TASK_FN]} if config.get(TASK_FN) else {})
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    from tune_runner.trainables.rllib import rllib_config

    full = rllib_config(algorithm_name(trainable), config).to_dict()
    full.update({TASK_FN: config[TASK_FN]} if config.get(TASK_FN) else {})  # a callback in RLlib's config
    return {k: v for k, v in sorted(full.items()) if not k.startswith("_") and k not in ENV_KEYS and keep(v)}


@dataclass(frozen=True)
class Trains:
    """The env spaces a trainable trains on: gymnasium space class names (or env_check.MASKED); None: any."""

    actions: tuple[str, ...] | None = None
    observations: tuple[str, ...] | None = None


# RLlib 2.60's action heads: the default Catalog's distributions for the actor-critic and imitation
# algorithms; DQN's Q-head needs Discrete; SAC's Box or Discrete; CQL and IQL continuous (RLlib's
# algorithm table). Its observations are left to RLlib (check_config builds the masked ones).
RLLIB_CATALOG_ACTIONS = ("Box", "Discrete", "MultiDiscrete", "Tuple", "Dict")
RLLIB_ACTIONS = {"DQN": ("Discrete",), "SAC": ("Box", "Discrete"), "CQL": ("Box",), "IQL": ("Box",),
                 "DreamerV3": ("Box", "Discrete"), **dict.fromkeys(("PPO", "APPO", "IMPALA", "BC", "MARWIL"),
                                                                   RLLIB_CATALOG_ACTIONS)}


def trains(trainable: str) -> Trains | None:
    """What the trainable can train on; None for one that builds no env (the oracle).
    An agent declares it with `action_spaces` / `observation_spaces` (tune_runner.trainables.agents)."""
    if trainable in ORACLES:
        return None
    if trainable in OWN:  # declared beside their settings: no torch (their classes declare the same)
        from tune_runner.algos.config import ACTION_SPACES, OBSERVATION_SPACES

        return Trains(ACTION_SPACES, OBSERVATION_SPACES)
    if is_own(trainable):
        from tune_runner.plugins import AGENTS

        cls = AGENTS.get(trainable)
        return Trains(getattr(cls, "action_spaces", None), getattr(cls, "observation_spaces", None))
    algo = trainable.removeprefix(RLLIB_PREFIX)
    return Trains(RLLIB_ACTIONS[algo] if algo in RLLIB_ACTIONS else RLLIB_ACTIONS.get(algorithm_name(trainable)))


def hint_order() -> list[str]:
    """Trainables to suggest for an env, the most used first (RLlib's registry is not imported for it)."""
    from tune_runner.plugins import AGENTS

    first = [*OWN, *(RLLIB_PREFIX + a for a in ("PPO", "SAC", "DQN"))]
    rest = [*(name for name in AGENTS if name not in OWN), *(RLLIB_PREFIX + a for a in sorted(RLLIB_ACTIONS))]
    return first + [name for name in rest if name not in first]


def can_checkpoint(trainable: str) -> bool:
    """Whether the trainable saves and restores its state (PBT's exploit and resume need that)."""
    if is_own(trainable) and trainable not in OWN:
        from tune_runner.trainables import agents

        return agents.checkpoints(trainable)
    from ray import tune

    cls = trainable_class(trainable)
    return isinstance(cls, type) and issubclass(cls, tune.Trainable) and \
        cls.save_checkpoint is not tune.Trainable.save_checkpoint


def _check_curriculum(config: dict[str, Any]) -> str | None:
    """A bad `env_task_fn` reference, or an env without get_task/set_task; the problem's line."""
    if config.get(TASK_FN) is None:
        return None
    from tune_runner.trainables import curriculum

    try:
        curriculum.resolve_task_fn(config[TASK_FN])
        curriculum.check_env(config["env"], env_config_of(config))
    except UserError as exc:
        return str(exc)
    return None


def _check_rllib_settings(algo: str, keys: Iterable[str]) -> list[tuple[str, str]]:
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
        if top in ENV_KEYS or top == TASK_FN or hasattr(default, translated):
            continue
        near = closest(top, valid)
        hint = f"did you mean {near!r}?" if near else "see RLlib's AlgorithmConfig for its settings"
        problems.append((key, f"not a setting of rllib/{algo}; {hint}"))
    return problems


def _check_rllib_config(algo: str, config: dict[str, Any]) -> str | None:
    """RLlib's own validation of one concrete config; the problem's first line."""
    try:
        from tune_runner.trainables.rllib import rllib_config

        rllib_config(algo, config).validate()
    except (ValueError, TypeError, UserError) as exc:
        return str(exc).strip().splitlines()[0]
    return None


def __getattr__(name: str) -> Any:
    """`RLlibTrainable`, still importable from here (and unpickled by this name), loaded with Ray on first use."""
    if name == "RLlibTrainable":
        from tune_runner.trainables.rllib import RLlibTrainable

        return RLlibTrainable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
