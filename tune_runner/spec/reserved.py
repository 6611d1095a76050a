"""The keys of a trial config that are tune-rl's own, not a learner's hyperparameters: named once, here.

Ray Tune hands each trial one flat config: the spec's env, its fixed and searched values, and the few keys
below that tune-rl reads or adds itself. Each reader leaves out what is not its business through one of the
subsets built from `RESERVED` (never a list of its own), so a key added here reaches every one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CANDIDATE_KEY = "tune_rl_candidate"
PLUGINS_KEY = "tune_rl_plugins"
BUDGET_KEY = "tune_rl_budget"
SEEDS_KEY, AGGREGATE_KEY = "seeds_per_trial", "seed_aggregate"
MIN_TIME_KEY = "min_time_s_per_iteration"
CPUS_KEY, GPUS_KEY = "cpus_per_trial", "gpus_per_trial"
RUNNERS_KEY = "num_env_runners"
TASK_FN_KEY = "env_task_fn"
MEMBERS_KEY, REFILL_KEY = "configs_per_trial", "refill"
MEMBER_LIST_KEY, BOARD_KEY = "tune_rl_members", "tune_rl_board"
# Every reserved key, with why it is in a trial config.
RESERVED: dict[str, str] = {
    "env": "the gymnasium env id: the space file's top-level env",
    "env_config": "the env's settings: the space file's top-level env_config (env_config.NAME searches one)",
    CANDIDATE_KEY: "which candidate a re-evaluation trial re-trains (tuning/reevaluate.py)",
    PLUGINS_KEY: "the plug-in files of the search, as absolute paths: each trial process imports them again",
    BUDGET_KEY: "the trial's own env-step budget, below the space's, from a multi-fidelity searcher (smac_search.py)",
    CPUS_KEY: "the CPUs of one trial of our trainables or the oracle (--cpus-per-trial, or fixed:)",
    GPUS_KEY: "the GPUs of one trial of our trainables or the oracle (--gpus-per-trial, or fixed:)",
    RUNNERS_KEY: "rollout workers of our ppo/dqn, started by the trial (RLlib reads its own key of that name)",
    TASK_FN_KEY: "a curriculum's task function, FILE:FUNCTION (trainables/curriculum.py)",
    MIN_TIME_KEY: "the least seconds of learner iterations our trials train between two reports (RLlib reads its "
                  "own key of that name)",
    SEEDS_KEY: "seeds of the config the trial trains as one batched learner (a top-level setting; spec/seed_keys.py)",
    AGGREGATE_KEY: "how the trial sums its seeds up under each metric's plain name (iqm, mean, median, min)",
    MEMBERS_KEY: "configs of the searcher one trial trains as one batched learner (a top-level setting; "
                 "tuning/population.py)",
    MEMBER_LIST_KEY: "a population trial's first members ({members: [{id, values}] per slot, metric, mode}), from "
                     "the population searcher",
    BOARD_KEY: "the Ray actor through which a population trial hears which member each slot trains next",
}
PREFIX = "env_config."  # a key `env_config.NAME` sets env_config["NAME"] (searched or fixed)
BOOKKEEPING_PREFIX = "tune_rl_"  # a key tune-rl adds to a trial config for itself: never a setting to keep

# Set at the top of a space file, never under fixed/space.
TOP_LEVEL = ("env", "env_config", SEEDS_KEY, AGGREGATE_KEY, MEMBERS_KEY)
# Added by tune-rl itself (the re-evaluation's candidate, the search's plug-ins).
BOOKKEEPING = tuple(k for k in RESERVED if k.startswith(BOOKKEEPING_PREFIX))
# A trial's resources: this machine's business, not the config's.
RESOURCE_KEYS = (CPUS_KEY, GPUS_KEY)
# How a trial judges its config, set at the top of a space file: the search's business, not the config's.
SEED_KEYS = (SEEDS_KEY, AGGREGATE_KEY, MEMBERS_KEY)
# Not attributes of RLlib's AlgorithmConfig (num_env_runners is one; the task fn is installed as a callback).
NOT_RLLIB = TOP_LEVEL + BOOKKEEPING
# Not the learner's: what our learners' config classes never see.
NOT_LEARNER = tuple(RESERVED)
# Not in the oracle's hyperparameters (its distance and luck are computed from the rest).
NOT_ORACLE = TOP_LEVEL + BOOKKEEPING + RESOURCE_KEYS
# Not under an exported bundle's `config:`: the bundle names the env in keys of its own, bookkeeping belongs to
# the search that ran, and resources to the machine (a bundle carried absolute plug-in paths before).
NOT_EXPORTED = TOP_LEVEL + BOOKKEEPING + RESOURCE_KEYS


def settings(config: Mapping[str, Any], *, leave_out: tuple[str, ...]) -> dict[str, Any]:
    """`config` without the keys `leave_out` names and any other tune_rl_* key, in its order."""
    return {k: v for k, v in config.items() if k not in leave_out and not k.startswith(BOOKKEEPING_PREFIX)}
