"""Everything checked before a search starts: names, settings, combinations, resources, storage.

`check_before_ray` runs the first of `prepare`'s checks, the env's included, before Ray, torch
or MLflow is imported: a bad env_config is refused in about a second, not five. `prepare` builds
the Tune objects from a spec without starting anything; `check_resources` needs the Ray cluster
(it runs after `ensure_ray`, before a trial is launched).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_runner.errors import SpecError, UserError, raised_as, unknown_name
from tune_runner.spec import reserved
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.spec.search_space import Param, _thaw, prune

if TYPE_CHECKING:
    from tune_runner.trainables.backends import Backend


@dataclass(frozen=True)
class Prepared:
    """The Ray Tune objects for a spec, all validated before anything starts.

    `spec` is the spec as it runs (the grid searcher turns choices into grid axes).
    """

    spec: ExperimentSpec
    backend: Backend  # the trainable's record, resolved once: what runs downstream asks it, not the name
    trainable: Any  # its Ray Tune class
    searcher: Any
    scheduler: Any
    population: bool = False

    @property
    def owns_space(self) -> bool:
        """The searcher holds the searched parameters itself (its record says when: smac and nevergrad always,
        optuna, hyperopt and bohb a conditional space; the population searcher always): Tune's param_space then
        carries the fixed values only."""
        from tune_runner.searchers import SEARCHERS

        return self.spec.configs_per_trial > 1 or \
            SEARCHERS.get(self.spec.searcher.name).holds_space(conditional=self.spec.conditional)


def unknown_env(name: str) -> str | None:
    """None for a gymnasium id or an env registered with Ray Tune; else the did-you-mean text."""
    import gymnasium

    from tune_runner.plugins import register_namespace
    from tune_runner.plugins.envs import ray_env_creator

    missing = register_namespace(name)
    if missing:
        return missing
    if name in gymnasium.envs.registry or ray_env_creator(name) is not None:
        return None
    return unknown_name("environment", name, gymnasium.envs.registry,
                        listing="list them: python -c 'import gymnasium; gymnasium.pprint_registry()'")


def check_env(name: str, *, where: str) -> None:
    """The env must be a gymnasium id or an env registered with Ray Tune."""
    problem = unknown_env(name)
    if problem:
        raise UserError(f"{where}: env: {problem}")


def with_plugins(spec: ExperimentSpec) -> ExperimentSpec:
    """Import the spec's plugin files and the `envs/` folder of the working directory; the spec then
    lists every user file that registered something, so each trial imports the same ones. Their
    envs go to Ray Tune's registry here, where RLlib looks them up."""
    from tune_runner.plugins import ship_to_ray

    spec = _load_plugins(spec)
    ship_to_ray()
    return spec


def _load_plugins(spec: ExperimentSpec) -> ExperimentSpec:
    """`with_plugins` without Ray: the files imported (each once per process), their envs not yet sent."""
    from tune_runner.plugins import load_plugins, set_discovery

    set_discovery(spec.discover_plugins)  # for this command: an env built later (ensure_gym_id) asks it too
    try:
        loaded = load_plugins(spec.plugins)
    except UserError as exc:
        raise UserError(f"{spec.source}: plugins: {str(exc).removeprefix('--plugins ')}") from None
    return replace(spec, plugins=tuple(map(str, loaded)))  # files: a folder given is expanded


def without_plugins(spec: ExperimentSpec, *, whose: str = "") -> ExperimentSpec:
    """The spec under --no-plugins: no plug-in imported, not even the working folder's envs/. A space (or a
    resumed search) that names plug-in files cannot run without them: refused, naming them, to be read first."""
    if spec.plugins:
        shown = ", ".join(spec.plugins)
        raise UserError(f"--no-plugins: {whose or spec.source} names plug-in files, code the search would import "
                        f"({shown}); read them, then run without --no-plugins")
    return replace(spec, discover_plugins=False)


@raised_as(SpecError)  # what it refuses is the space (or an override of it), as the Python API promises
def prepare(spec: ExperimentSpec, *, storage: Path | None = None, record: Backend | None = None) -> Prepared:
    """Check every name, setting and combination in the spec and build the Tune objects; start nothing.

    `record`: the spec's trainable, where the caller resolved it already (`tune-rl train`, to name its flag);
    else it is resolved here, once, and what runs downstream asks `Prepared.backend`."""
    from tune_runner import searchers
    from tune_runner.trainables import env_check
    from tune_runner.trainables.catalog import backend
    from tune_runner.tuning import population, schedulers

    spec = with_plugins(spec)
    where = spec.source
    if record is not None and record.name != spec.trainable:
        raise ValueError(f"prepare: record {record.name!r} is not the spec's trainable {spec.trainable!r}")
    trainable = record or _resolve(spec, backend)
    _check_settings(spec, trainable)
    check_seeds(spec, trainable)
    population.check_members(spec, trainable)
    spec = _absolute_task_fn(spec)
    check_env(spec.env, where=where)
    env_check.check_env(spec, trainable)
    check_metric(spec, trainable)
    problem = _check_space_corners(spec, trainable)
    if problem:
        raise UserError(f"{where}: {problem[0]}{spec.trainable} rejects this config: {problem[1]}")
    kind, scheduler_type, _ = schedulers.scheduler_type(spec.scheduler, where=where)
    searcher_type = searchers.searcher_type(spec.searcher, where=where)
    check_combination(spec, trainable, kind, scheduler_type, searcher_type)
    population.check_population(spec, trainable, kind, searcher_type)
    if searcher_type.grid_axes:
        spec = replace(spec, space=searchers.grid_space(spec.space, where=where))
    scheduler = schedulers.build_scheduler(
        spec.scheduler, budget=spec.budget_env_steps, where=where, space=spec.space,
        time_attrs=trainable.time_attrs, seed=spec.searcher.settings.get("seed"))
    searcher = searchers.build_searcher(spec.searcher, params=spec.space, where=where, storage=storage,
                                        metric=spec.metric, mode=spec.mode, budget=spec.budget_env_steps,
                                        num_samples=spec.num_trials)
    if spec.configs_per_trial > 1:  # the space's scheduler judges members; Tune's runs the trials first in first out
        searcher = population.population_searcher(spec, trainable, searcher_type, inner=searcher, scheduler=scheduler,
                                                  scheduler_kind=kind)
        scheduler = population.fifo()
    return Prepared(spec, trainable, trainable.trainable_class(), searcher, scheduler,
                    population=scheduler_type.population)


@raised_as(SpecError)
def check_before_ray(spec: ExperimentSpec) -> None:
    """`prepare`'s checks up to the env's and the metric's, in its order, before Ray, torch or MLflow is
    imported; UserError with prepare's own text. prepare runs them again (an env is built once).

    It stops, leaving the rest to prepare, at the first thing only Ray can judge: an RLlib algorithm
    outside our table (backends.RLLIB_ACTIONS), an env that only Ray Tune's registry may know.
    RLlib's settings are checked after (its AlgorithmConfig loads Ray and torch), so a space with an
    unknown RLlib setting and a bad env_config is refused for the env_config.
    """
    from tune_runner.trainables import env_check
    from tune_runner.trainables.catalog import backend_before_ray

    if _needs_plugin_files(spec):
        spec = _load_plugins(spec)
    trainable = _resolve(spec, backend_before_ray)
    if trainable is None:
        return
    if not trainable.settings_need_ray:
        _check_settings(spec, trainable)
    check_seeds(spec, trainable)
    spec = _absolute_task_fn(spec)
    import gymnasium

    if spec.env not in gymnasium.envs.registry:
        return  # Ray Tune's registry may hold it (check_env, in prepare)
    env_check.check_env(spec, trainable)
    check_metric(spec, trainable)


def _needs_plugin_files(spec: ExperimentSpec) -> bool:
    """Whether prepare would load a file that matters here: a user's (its agents, its envs), or our shipped
    envs for an env that gymnasium does not know yet. Loading them imports Ray: envs/custom_env.py does."""
    import gymnasium

    from tune_runner.paths import shipped

    local = Path.cwd() / "envs"
    users = bool(spec.plugins) or local.is_dir() and local.resolve() != shipped("envs").resolve()
    return users or spec.env not in gymnasium.envs.registry


def _resolve(spec: ExperimentSpec, resolve: Callable[[str], Backend | None]) -> Backend | None:
    """The spec's trainable, checked by `resolve`; a bad name named with its file and key."""
    try:
        return resolve(spec.trainable)
    except UserError as exc:
        raise UserError(f"{spec.source}: trainable: {exc}") from None


def _check_settings(spec: ExperimentSpec, trainable: Backend) -> None:
    """Every fixed and searched key must be a setting of the trainable."""
    keys = list(spec.fixed) + list(spec.searched)
    for key, problem in trainable.check_settings(keys):
        section = "space" if key in spec.searched else "fixed"
        raise UserError(f"{spec.source}: {section}.{key}: {problem}")


def check_seeds(spec: ExperimentSpec, trainable: Backend) -> None:
    """seeds_per_trial > 1 only where the trainable trains several seeds as one learner, and not with a
    curriculum (its task follows one learner's returns)."""
    count = spec.seeds_per_trial
    if count == 1:
        return
    if not trainable.seeds:
        from tune_runner.trainables.catalog import our_backends

        seeded = ", ".join(ours.name for ours in our_backends() if ours.seeds)
        raise UserError(f"{spec.source}: seeds_per_trial: {count}: {trainable.name} trains one seed per trial "
                        f"({seeded} and agents that declare seeds_per_trial = True train several); "
                        f"set seeds_per_trial: 1")
    if reserved.TASK_FN_KEY in spec.fixed:
        raise UserError(f"{spec.source}: seeds_per_trial: {count}: a curriculum (env_task_fn) follows one "
                        f"seed's returns; set seeds_per_trial: 1")


def _absolute_task_fn(spec: ExperimentSpec) -> ExperimentSpec:
    """A fixed `env_task_fn` file path made absolute: trials run in their own directories."""
    from tune_runner.trainables.curriculum import absolute_ref

    key = reserved.TASK_FN_KEY
    if key not in spec.fixed:
        return spec
    try:
        return replace(spec, fixed={**spec.fixed, key: absolute_ref(spec.fixed[key])})
    except UserError:
        return spec  # check_config names what is wrong with it


def check_metric(spec: ExperimentSpec, trainable: Backend) -> None:
    """The metric to optimize must be one the trainable reports."""
    from tune_runner.trainables.backends import TIME_ATTRS

    known = (*trainable.reports, *TIME_ATTRS)
    if spec.metric not in known:
        raise UserError(f"{spec.source}: metric: {unknown_name(f'metric of {spec.trainable}', spec.metric, known)}")


def check_combination(spec: ExperimentSpec, trainable: Backend, kind: str, scheduler: Any, searcher: Any) -> None:
    """Scheduler x searcher x trainable combinations that cannot work, refused with the reason."""
    where, name = spec.source, spec.searcher.name
    if scheduler.searcher and name != scheduler.searcher:
        raise UserError(f"{where}: scheduler: {kind} works only with searcher {scheduler.searcher} "
                        f"(BOHB = HyperBand + its own model), got searcher {name}; set searcher: {scheduler.searcher}")
    if searcher.scheduler and kind != searcher.scheduler:
        raise UserError(f"{where}: searcher: {name} works only with scheduler {searcher.scheduler}, got "
                        f"scheduler {kind}; set scheduler: {searcher.scheduler}")
    if scheduler.population and spec.conditional:
        first = next(p for p in spec.space if p.when)
        raise UserError(f"{where}: space.{first.name}.when: {kind} copies and mutates whole configs between "
                        f"trials and cannot keep a condition; drop when:, or use scheduler asha")
    if scheduler.population and searcher.model_based:
        raise UserError(f"{where}: searcher: {kind} picks hyperparameters itself and cannot run with the "
                        f"{name} searcher (Ray refuses it at the first trial); use searcher: random")
    if scheduler.needs_checkpoints and not trainable.can_checkpoint:
        why = "copies checkpoints between trials" if scheduler.population else "pauses trials and resumes them"
        raise UserError(f"{where}: scheduler: {kind} {why}, and trainable {spec.trainable} cannot save a "
                        f"checkpoint; use asha, median or fifo, or a trainable with checkpoints")


def _check_space_corners(spec: ExperimentSpec, trainable: Backend) -> tuple[str, str] | None:
    """The backend's own validation on one sample of the space, then on each parameter's extremes: None, or
    where the refused value stands (`fixed.model: `, `space.lr = 2: `, or "" where no one value is to blame)
    and the backend's words."""

    base = {**spec.fixed, **{p.name: p.example() for p in spec.space}, "env": spec.env, "env_config": spec.env_config,
            **({reserved.SEEDS_KEY: spec.seeds_per_trial} if spec.seeds_per_trial > 1 else {})}

    def check(config: dict[str, Any]) -> str | None:
        return trainable.check_config(prune(config, spec.space))  # as a trial gets it: no inactive parameter

    problem = check(base)
    if problem:  # the fixed (or searched) value without which the sample passes is the one refused
        places = [f"fixed.{key}" for key in spec.fixed] + [f"space.{name}" for name in spec.searched]
        blamed = next((place for place in places
                       if not check({k: v for k, v in base.items() if k != place.partition(".")[2]})), None)
        return (f"{blamed}: " if blamed else "", problem)
    for param in spec.space:
        for value in param.extremes():
            problem = check({**base, **activating(param, spec.space), param.name: value})
            if problem:
                return f"space.{param.name} = {value!r}: ", problem
    return None


def activating(param: Param, params: tuple[Param, ...]) -> dict[str, Any]:
    """Parent values under which `param` is searched: each condition's first value, up the chain of parents."""
    by_name = {p.name: p for p in params}
    values: dict[str, Any] = {}
    pending = list(param.when)
    while pending:
        parent, allowed = pending.pop()
        values[parent] = _thaw(allowed[0])
        pending.extend(by_name[parent].when if parent in by_name else ())
    return values


def trial_request(spec: ExperimentSpec, trainable: Any) -> list[dict[str, float]]:
    """The resource bundles one trial asks for (its config's sample), e.g. [{"CPU": 1}, {"CPU": 1}]."""
    config = {**spec.fixed, **{p.name: p.example() for p in spec.space}, "env": spec.env,
              "env_config": spec.env_config}
    request = getattr(trainable, "default_resource_request", None)
    factory = request(config) if callable(request) else None
    if factory is None:
        return [{"CPU": 1.0}]
    return [{k: float(v) for k, v in bundle.items() if v} for bundle in factory.bundles]


def trials_at_once(spec: ExperimentSpec, trainable: Any) -> int:
    """How many trials of the spec the Ray cluster runs at once (its CPUs and GPUs over a trial's request)."""
    import ray

    have, need = ray.cluster_resources(), summed(trial_request(spec, trainable))
    return max(1, min(int(have.get(k, 0) // v) for k, v in need.items() if v > 0))


def summed(bundles: list[dict[str, float]]) -> Counter:
    """What a trial's bundles ask for in all, per resource."""
    total: Counter = Counter()
    for bundle in bundles:
        total.update(bundle)
    return total


def check_resources(spec: ExperimentSpec, prepared: Prepared) -> None:
    """A trial that no node can hold would stay PENDING forever in Ray; refuse it before launch."""
    import ray

    bundles = trial_request(spec, prepared.trainable)
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    total = summed(bundles)
    have: Counter = Counter()
    for node in nodes:
        have.update({k: v for k, v in node.items() if k in total})
    short = {k: v for k, v in total.items() if v > have.get(k, 0) + 1e-9}
    unplaceable = [b for b in bundles if not any(all(node.get(k, 0) >= v for k, v in b.items()) for node in nodes)]
    if not short and not unplaceable:
        return
    ask = ", ".join(f"{_num(v)} {k}" for k, v in total.items())
    got = ", ".join(f"{_num(have.get(k, 0))} {k}" for k in total)
    hint = "lower num_env_runners (or the trial's CPUs/GPUs), or run on a bigger Ray (--num-cpus, --address)"
    raise UserError(f"{spec.source}: one trial of {spec.trainable} asks for {ask} "
                    f"({len(bundles)} bundle(s)), the Ray cluster has {got}; {hint}")


def _num(value: float) -> str:
    return f"{value:g}"


def check_storage(storage: Path | str) -> None:
    """The results folder must exist or be creatable, and be writable, before anything starts.
    A URI (tune_runner.storage) must at least open and answer."""
    from tune_runner import storage as results
    from tune_runner.paths import check_home, default_storage, writable_folder

    if results.is_uri(storage) or Path(storage) == default_storage():
        check_home()  # the default's folder, or a URI's local copy, goes under it
    if results.is_uri(storage):
        results.exists(str(storage))
    elif Path(storage) != default_storage():  # made with TUNE_RL_HOME, checked above
        writable_folder(Path(storage), setting=f"--storage {storage}")


def check_register(prepared: Prepared, name: str | None) -> None:
    """--register-model needs a trainable whose policy we export (ours), and a usable name."""
    from tune_runner.trainables.catalog import our_backends

    if name is None:
        return
    if not name.strip() or "/" in name or ":" in name:
        raise UserError(f"--register-model {name!r}: a model name without '/' or ':', e.g. cartpole-ppo")
    if not prepared.backend.exports_policy:
        raise UserError(f"--register-model {name}: the policy of trainable {prepared.spec.trainable} is not "
                        f"exported as a model (only {', '.join(b.name for b in our_backends() if b.exports_policy)}); "
                        f"drop --register-model")




def with_trial_resources(spec: ExperimentSpec, *, cpus: float | None, gpus: float | None) -> ExperimentSpec:
    """--cpus-per-trial / --gpus-per-trial into the spec: our trainables read `cpus_per_trial` and
    `gpus_per_trial`; RLlib gets its own settings (the main process's CPUs, the learner's GPUs)."""
    if cpus is None and gpus is None:
        return spec
    from tune_runner.trainables.backends import RLLIB_PREFIX, RLlibBackend
    from tune_runner.trainables.catalog import backend_before_ray

    try:
        record = backend_before_ray(spec.trainable)
    except UserError:
        record = None  # a misspelled name: prepare refuses it, naming its file and key
    # A name not known without Ray (an algorithm outside our RLlib table, a plug-in's agent not loaded yet)
    # gets RLlib's settings, as before there were records.
    record = record or RLlibBackend.of(spec.trainable.removeprefix(RLLIB_PREFIX))
    return replace(spec, fixed={**spec.fixed, **record.trial_resources(cpus=cpus, gpus=gpus)})


