"""A search of population trials (`configs_per_trial: B`, issue 43): what is checked before launch, and the
searcher and scheduler it runs with (tune_runner.searchers.population; the trial's side in
tune_runner.trainables.members).

Tune runs the trials under FIFO: the space's scheduler (asha, median) judges members, not trials, inside the
population searcher. What cannot work is refused before anything starts, in one line naming the key.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tune_runner.algos.records import ours, spoken
from tune_runner.errors import UserError
from tune_runner.spec import reserved
from tune_runner.spec.experiment import ExperimentSpec

if TYPE_CHECKING:
    from tune_runner.searchers.record import SearcherType
    from tune_runner.trainables.backends import Backend

# What judges members: hyperband in its asynchronous form (member_scheduler); PBT and PB2 act on whole trials
MEMBER_SCHEDULERS = ("fifo", "asha", "hyperband", "median")
MEMORY_SHARE = 0.8  # of the memory this machine has free, the most a population trial's estimate may take


def check_population(spec: ExperimentSpec, trainable: Backend, scheduler_kind: str,
                     searcher: SearcherType) -> None:
    """`configs_per_trial` > 1 only where the trainable, the searcher, the scheduler and the space allow it."""
    size, where = spec.configs_per_trial, spec.source
    key = f"{where}: {reserved.MEMBERS_KEY}: {size}"
    if size == 1:
        return
    if searcher.members is None:
        raise UserError(f"{key}: the {searcher.name} searcher cannot fill population trials: "
                        f"{searcher.members_why}; use random, grid or optuna, or {reserved.MEMBERS_KEY}: 1")
    trial_level = [p.name for p in spec.space if p.name not in trainable.member_keys]
    if searcher.members == "member keys" and trial_level:
        raise UserError(f"{where}: space.{trial_level[0]}: the {searcher.name} searcher cannot give the members of "
                        f"a trial one shared {trial_level[0]} (it changes the network's shapes, so it is one value "
                        f"per trial); search only {', '.join(trainable.member_keys)} with it, or use optuna")
    if spec.conditional:
        first = next(p for p in spec.space if p.when)
        raise UserError(f"{where}: space.{first.name}.when: population trials search spaces without conditions; "
                        f"drop when:, or set {reserved.MEMBERS_KEY}: 1")
    if scheduler_kind not in MEMBER_SCHEDULERS:
        raise UserError(f"{where}: scheduler: {scheduler_kind} acts on whole trials (it pauses, copies or mutates "
                        f"them), and a population trial's members are judged one by one; use "
                        f"{', '.join(MEMBER_SCHEDULERS)}, or {reserved.MEMBERS_KEY}: 1")
    check_memory(spec, trainable)


def check_members(spec: ExperimentSpec, trainable: Backend) -> None:
    """What `check_population` checks first, before the trainable judges a config: a trainable that trains
    populations, no population by hand, refill only with configs_per_trial."""
    size, where = spec.configs_per_trial, spec.source
    if size == 1:
        if not spec.refill:
            raise UserError(f"{where}: {reserved.REFILL_KEY}: false: refill is about population trials; set "
                            f"{reserved.MEMBERS_KEY} > 1, or drop {reserved.REFILL_KEY}")
        return
    if not trainable.member_keys:
        raise UserError(f"{where}: {reserved.MEMBERS_KEY}: {size}: {trainable.name} trains one config per trial "
                        f"(our {spoken(ours())} and the oracle train populations); set {reserved.MEMBERS_KEY}: 1")
    given = [k for k in spec.fixed if k == "population" or k.startswith("population.")]
    if given:
        raise UserError(f"{where}: fixed.{given[0]}: a population given by hand cannot stand beside "
                        f"{reserved.MEMBERS_KEY} (the searcher fills the population); drop one of them")
    for key, why in ((reserved.RUNNERS_KEY, "rollout workers act for one learner's seeds, not for refilled "
                                            "members"),
                     (reserved.TASK_FN_KEY, "a curriculum follows one config's returns")):
        if spec.fixed.get(key) or key in {p.name for p in spec.space}:
            raise UserError(f"{where}: {key}: {why}; drop it, or set {reserved.MEMBERS_KEY}: 1")


def member_bytes(spec: ExperimentSpec, trainable: Backend) -> int:
    """A rough upper estimate of one member seed's memory in a trial: the replay memory of a learner that keeps one
    (DQN; two observations a transition) dominates, sized by `capacity` and the env's observation (1,000 floats where
    it cannot be read); a PPO seed's rollout and networks, a few MB."""
    replay = spec.fixed.get("replay_buffer_config") or {}
    capacity = int(spec.fixed.get("replay_buffer_config.capacity", replay.get("capacity", 50_000)) or 0) \
        if trainable.replay else 0
    obs_floats = _obs_floats(spec) if capacity else 0
    return capacity * (2 * obs_floats * 4 + 16) + 8 * 2**20


def _obs_floats(spec: ExperimentSpec) -> int:
    try:
        from tune_runner.trainables.trial import env_spaces

        spaces = env_spaces(spec.env, spec.env_config)
    except Exception:  # noqa: BLE001 - the env's own check has run; a space we cannot size counts as large
        return 1000
    import math

    shape = getattr(spaces.observation, "shape", None) if spaces else None
    return int(math.prod(shape)) if shape else 1000


def check_memory(spec: ExperimentSpec, trainable: Backend) -> None:
    """B x K member seeds over what this machine has free is refused before launch."""
    seeds = spec.configs_per_trial * spec.seeds_per_trial
    need = seeds * member_bytes(spec, trainable)
    free = available_memory()
    if free and need > MEMORY_SHARE * free:
        raise UserError(f"{spec.source}: {reserved.MEMBERS_KEY}: {spec.configs_per_trial}: {seeds} member seeds "
                        f"need about {need / 2**30:.1f} GiB in one trial, over {MEMORY_SHARE:.0%} of the "
                        f"{free / 2**30:.1f} GiB free here; lower {reserved.MEMBERS_KEY} (or seeds_per_trial, "
                        f"or capacity)")


def available_memory() -> int:
    """Bytes of memory free on this machine (0 when it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def population_searcher(spec: ExperimentSpec, trainable: Backend, searcher: SearcherType, *, inner: Any,
                        scheduler: Any, scheduler_kind: str) -> Any:
    """The population searcher over the space's searcher (`inner`, built by searchers.build_searcher) and its
    scheduler (None for fifo), for a spec of configs_per_trial > 1."""
    from tune_runner.searchers import population

    space = {p.name: p.to_tune() for p in spec.space}
    member_keys = [p.name for p in spec.space if p.name in trainable.member_keys]
    if searcher.members == "draws":
        source: population.Source = population.RandomSource(seed=spec.searcher.settings.get("seed"),
                                                            points=_points(spec))
    elif searcher.members == "groups":
        source = population.GridSource(repeats=spec.num_samples,
                                       trial_level=lambda c: {k: v for k, v in c.items() if k not in member_keys})
    else:
        source = population.SearcherSource(inner, fixes=searcher.members == "fixes")
    settings = spec.scheduler.settings
    scheduler = member_scheduler(scheduler, scheduler_kind)
    return population.PopulationSearcher(
        source, size=spec.configs_per_trial, num_configs=spec.num_trials, member_keys=member_keys, space=space,
        refill=spec.refill, budget=spec.budget_env_steps, reached=spec.reached,
        scheduler=scheduler, time_attr=settings.get("time_attr", "env_steps"),
        metric=spec.metric, mode=spec.mode, board=f"tune_rl_board_{os.getpid()}_{id(source)}",
        concurrent=spec.max_concurrent)


def member_scheduler(scheduler: Any, kind: str) -> Any:
    """What judges a population search's members: the space's asha or median scheduler as built (None for fifo).
    HyperBand as its asynchronous form (Li et al., "A System for Massively Parallel Hyperparameter Tuning", 2020):
    ASHA over the same rungs (min_t, then x reduction_factor up to max_t) in as many brackets as HyperBand opens.
    Synchronous HyperBand halves a bracket once all its trials reach a rung, pausing the early ones; a member's
    slot cannot pause (its seeds train in the batch), so each member is judged the moment it reaches a rung."""
    if kind == "fifo":
        return None
    if kind != "hyperband":
        return scheduler
    from ray.tune.schedulers import ASHAScheduler

    unit = scheduler.unit_steps  # tuning.schedulers.in_units: HyperBand counts env steps in units of min_t
    return ASHAScheduler(time_attr=scheduler.counts_in, max_t=scheduler._max_t_attr * unit,  # noqa: SLF001
                         grace_period=unit, reduction_factor=scheduler._eta,  # noqa: SLF001
                         brackets=scheduler._s_max_1)  # noqa: SLF001 - HyperBand's own count of brackets


def _points(spec: ExperimentSpec) -> list[dict]:
    from tune_runner.searchers.points import check_points

    return check_points(spec.searcher.settings.get("points_to_evaluate"), spec.space, where=spec.source)


def fifo() -> Any:
    from ray.tune.schedulers import FIFOScheduler

    return FIFOScheduler()
