"""`search` and `resume` from Python: what `tune-rl search` and `tune-rl resume` run, with the same checks.

A keyword takes the value its flag would (`num_samples=4` is `--num-samples 4`), and a bad one raises the
UserError whose text the command line prints. The search's progress goes to `out` (default: stdout).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from tune_runner.api.checks import check_run_settings, name_setting, positive, run_options, storage_setting
from tune_runner.api.results import SearchResult, best_result
from tune_runner.errors import AllTrialsFailed, DiskFull, ExitStatus, Interrupted, SpecError, UserError, raised_as

Overrides = Mapping[str, Any] | Iterable[str] | None


def search(space: str | Path, *, overrides: Overrides = None, name: str | None = None,
           storage: str | Path | None = None, mlflow_uri: str | None = None, num_samples: int | None = None,
           searcher: str | None = None, scheduler: str | None = None, max_concurrent: int | None = None,
           max_failures: int | None = None, export: bool = True, reevaluate: bool = True, top: int | None = None,
           seeds: int | None = None, register_model: str | None = None, plugins: Iterable[str | Path] | bool = (),
           cpus_per_trial: float | None = None, gpus_per_trial: float | None = None, num_cpus: int | None = None,
           num_gpus: float | None = None, gpu: str | None = None, address: str | None = None, verbose: bool = False,
           seeds_per_trial: int | None = None, seed_aggregate: str | None = None,
           configs_per_trial: int | None = None, out: TextIO | None = None) -> SearchResult:
    """Run a search over `space` (a shipped space's name or a YAML path) to its end, as `tune-rl search`.

    `overrides` are `--set`s: {"budget": 50000, "lr": 3.0e-4} or ["budget=50000"]. `reevaluate=False` is
    --no-reevaluate, `top` is --reevaluate K, `plugins=False` --no-plugins. Raises AllTrialsFailed when every
    trial errored, Interrupted when stopped with its state saved (both carry the result), and UserError
    (SpecError, NotFound) for bad input, before Ray starts."""
    storage, name = storage_setting(storage), name_setting(name)
    spec = search_spec(str(space), overrides=overrides, num_samples=num_samples, max_concurrent=max_concurrent,
                       num_cpus=num_cpus, top=top, seeds=seeds, max_failures=max_failures, searcher=searcher,
                       scheduler=scheduler, plugins=plugins, seeds_per_trial=seeds_per_trial,
                       seed_aggregate=seed_aggregate, configs_per_trial=configs_per_trial)
    ray = {"address": address, "num_cpus": num_cpus, "num_gpus": num_gpus, "cpus_per_trial": cpus_per_trial,
           "gpus_per_trial": gpus_per_trial, "gpu": gpu}
    check_run_settings(**ray)
    from tune_runner.tuning import preflight

    # A bad env or env_config is refused here, before Ray Tune and torch load (runner imports them): seconds sooner.
    preflight.check_before_ray(preflight.with_trial_resources(spec, cpus=cpus_per_trial, gpus=gpus_per_trial))
    from tune_runner.tuning import runner

    extra = {} if max_failures is None else {"max_failures": max_failures}
    options = run_options(storage=storage, mlflow_uri=mlflow_uri, name=name, verbose=verbose, **ray, export=export,
                          reevaluate=reevaluate, top=top, seeds=seeds, register_model=register_model, **extra)
    return _result(runner.run(spec, options, out=out), options)  # a new search saves its options first


def search_spec(space: str, *, overrides: Overrides = None, num_samples: int | None = None,
                max_concurrent: int | None = None, num_cpus: int | None = None, top: int | None = None,
                seeds: int | None = None, max_failures: int | None = None, searcher: str | None = None,
                scheduler: str | None = None, plugins: Iterable[str | Path] | bool = (),
                seeds_per_trial: int | None = None,
                seed_aggregate: str | None = None, configs_per_trial: int | None = None) -> Any:
    """The space with the search's settings applied, checked in the order `tune-rl search` checks its flags."""
    from tune_runner.spec.experiment import Component

    for flag, value in (("--num-samples", num_samples), ("--max-concurrent", max_concurrent),
                        ("--num-cpus", num_cpus), ("--reevaluate", top), ("--seeds", seeds),
                        ("--seeds-per-trial", seeds_per_trial), ("--configs-per-trial", configs_per_trial)):
        positive(flag, value)
    _check_aggregate(seed_aggregate)
    if max_failures is not None and max_failures < 0:
        raise UserError(f"--max-failures {max_failures}: must be 0 or more")
    spec = load(space, overrides=overrides)
    changes: dict[str, Any] = {}
    if num_samples:
        changes["num_samples"] = num_samples
    if max_concurrent:
        changes["max_concurrent"] = max_concurrent
    if seeds_per_trial:
        changes["seeds_per_trial"] = seeds_per_trial
    if seed_aggregate:
        changes["seed_aggregate"] = seed_aggregate
    if configs_per_trial:
        changes["configs_per_trial"] = configs_per_trial
    if searcher:
        from tune_runner.searchers.record import COMMON

        kept = {k: v for k, v in spec.searcher.settings.items() if k in COMMON}  # seed, warm start, points
        changes["searcher"] = Component(searcher, kept)
    if scheduler:
        changes["scheduler"] = Component(scheduler)
    if plugins is False or plugins is True:  # True: as the default, the space's plug-ins and ./envs/
        from tune_runner.tuning.preflight import without_plugins

        return without_plugins(spec.with_overrides(**changes)) if plugins is False else spec.with_overrides(**changes)
    plugins = [str(p) for p in plugins]
    if plugins:
        from tune_runner.plugins import load_plugins

        load_plugins(plugins, discover=spec.discover_plugins)  # a bad path named with its flag, before the space's
        changes["plugins"] = spec.plugins + tuple(str(Path(p).expanduser().resolve()) for p in plugins)
    return spec.with_overrides(**changes)


def _check_aggregate(how: str | None) -> None:
    """--seed-aggregate names one of spec.seeds.AGGREGATES."""
    from tune_runner.errors import unknown_name
    from tune_runner.spec.seed_keys import AGGREGATES

    if how is not None and how not in AGGREGATES:
        raise UserError(f"--seed-aggregate: {unknown_name('seed aggregate', how, AGGREGATES)}")


def load(space: str, *, overrides: Overrides = None) -> Any:
    """The validated spec of a space with `--set` overrides; SpecError (the loader's text) when it does not
    validate, NotFound when there is no such space."""
    from tune_runner.spec.experiment import load_spec

    with raised_as(SpecError):  # NotFound stays NotFound
        return load_spec(space, overrides=set_items(overrides))


def set_items(overrides: Overrides) -> list[str]:
    """Overrides as `--set KEY=VALUE` items; a mapping's values written so that --set reads each one back as
    it was (a string stays a string: {"tag": "4"} is tag='4')."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if not isinstance(overrides, Mapping):
        return [str(item) for item in overrides]
    import yaml

    def text(value: Any) -> str:
        return yaml.safe_dump(value, default_flow_style=True, width=float("inf")).removesuffix("...\n").strip()

    return [f"{key}={text(value)}" for key, value in overrides.items()]


def resume(name: str | Path, *, storage: str | Path | None = None, mlflow_uri: str | None = None,
           num_cpus: int | None = None, verbose: bool = False, plugins: bool = True,
           out: TextIO | None = None) -> SearchResult:
    """Continue the interrupted search `name` (under `storage`, or a folder) to its end, as `tune-rl resume`,
    with the options it was started with. A search that finished already is returned as it stands.
    `plugins=False` is --no-plugins: refused where the search imported plug-in files."""
    from tune_runner.tuning import resume as saved

    out = out or sys.stdout
    storage = storage_setting(storage)
    positive("--num-cpus", num_cpus)
    folder = saved.locate(str(name), where=storage)
    counts = saved.finished(folder)
    if counts is not None:
        print(f"{folder.name} finished already ({sum(counts.values())} trials: "
              f"{', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}); nothing to resume", file=out)
        return _finished(folder, counts)
    spec = saved.read_spec(folder)
    if not plugins:
        from tune_runner.tuning.preflight import without_plugins

        spec = without_plugins(spec, whose=f"search {folder.name} (resumed)")
    run = saved.read_run(folder)
    fields = saved.continued(run, folder=folder, where=storage, mlflow_uri=mlflow_uri, num_cpus=num_cpus)
    saved.check_tune_state(fields["storage"], folder)
    if run is None:
        print(f"note: {folder.name} has no {saved.RUN_FILE} (started before tune-rl saved run options); it "
              f"continues with this command's flags and the current defaults", file=out, flush=True)
    from tune_runner.tuning import runner

    options = runner.RunOptions(**fields, name=folder.name, verbose=verbose, resume=True)
    return _result(runner.run(spec, options, out=out), options, saved=run is not None)


def _result(outcome: Any, options: Any, *, saved: bool = True) -> SearchResult:
    """The result of a search that ran with `options` (RunOptions; `saved`: it saved them beside its results);
    raised within an AllTrialsFailed or Interrupted when it gave none."""
    from tune_runner.tuning.resume import command, read_spec

    path = outcome.experiment_path
    spec = read_spec(path)  # the spec the search saved: the one it ran (trial resources included)
    best = None if outcome.best is None else best_result(spec, outcome.best, experiment=path.name, path=path,
                                                         verdict=outcome.verdict)
    result = SearchResult(name=path.name, path=path, metric=spec.metric, mode=spec.mode, trials=dict(outcome.counts),
                          best=best, export_path=outcome.export_path, mlflow_run=outcome.mlflow_run)
    if outcome.disk_full:
        where = {"storage": options.storage, "mlflow_uri": options.mlflow_uri, "saved": saved}
        raise DiskFull(f"search {path.name} stopped: its results folder ran short of space; its state is saved; "
                       f"free space, then continue it with {command(path.name, **where, python=True)} or, in a "
                       f"shell: {command(path.name, **where)}", result=result)
    if outcome.exit_status == ExitStatus.INTERRUPTED:
        where = {"storage": options.storage, "mlflow_uri": options.mlflow_uri, "saved": saved}
        raise Interrupted(f"search {path.name} interrupted; its state is saved; continue it with "
                          f"{command(path.name, **where, python=True)} or, in a shell: "
                          f"{command(path.name, **where)}", result=result)
    if outcome.exit_status == ExitStatus.ALL_TRIALS_FAILED:
        common = outcome.errors.most_common(1)
        raise AllTrialsFailed(f"search {path.name}: every trial failed ({sum(outcome.counts.values())} errored"
                              + (f"; most common: {common[0][0]})" if common else ")"), result=result)
    return result


def _finished(folder: Path, counts: Mapping[str, int]) -> SearchResult:
    """A search that had run to its end, its best trial selected as `tune-rl best` selects it (None when its
    trials cannot be read)."""
    from tune_runner.paths import BUNDLE_FILE
    from tune_runner.results import analysis
    from tune_runner.spec.saved import read_spec

    spec = read_spec(folder)
    try:
        chosen, _ = analysis.select(spec, analysis.read(folder))
    except UserError:
        chosen = None
    best = None if chosen is None else best_result(spec, chosen, experiment=folder.name, path=folder)
    exported = folder / BUNDLE_FILE
    return SearchResult(name=folder.name, path=folder, metric=spec.metric, mode=spec.mode, trials=dict(counts),
                        best=best, export_path=exported if exported.is_file() else None)
