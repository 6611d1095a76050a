"""A finished search read back from Python: its best trial (`best`), its report (`report`), a trained policy
(`load_policy`), as `tune-rl best`, `tune-rl report` and `tune-rl evaluate` read them, with the same checks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from tune_runner.api.checks import positive, storage_setting
from tune_runner.api.results import BestResult, ReportResult, best_result
from tune_runner.errors import UserError


def best(experiment: str | Path, *, storage: str | Path | None = None, mlflow_uri: str | None = None,
         metric: str | None = None, mode: str | None = None, scope: str | None = None,
         reevaluate: int | None = None, seeds: int | None = None, num_cpus: int | None = None,
         out: TextIO | None = None) -> BestResult:
    """The best trial of a search, as `tune-rl best`: `experiment` is a name under `storage`, a folder, or
    runs:/<parent run id> (or, with `mlflow_uri`, a name) of a search in MLflow. `scope` is last, max or
    avg-last-N; `reevaluate=K` re-trains the top K configs on `seeds` fresh seeds (progress to `out`) and picks
    the best interquartile mean. With none of metric, mode, scope and reevaluate given, a search that
    re-evaluated its top configs (its folder, or its MLflow parent run) gives that verdict's winner, the config
    the search exported; else scope last."""
    from tune_runner.results import analysis

    storage = storage_setting(storage)
    experiment = str(experiment)
    own_pick = scope is None and metric is None and mode is None and not reevaluate
    scope = scope or "last"
    analysis.parse_scope(scope)
    for flag, value in (("--reevaluate", reevaluate), ("--seeds", seeds), ("--num-cpus", num_cpus)):
        positive(flag, value)  # the settings first: they need no experiment to be wrong
    tracked = _tracked_search(experiment, storage=storage, mlflow_uri=mlflow_uri, metric=metric,
                              reevaluate=reevaluate)
    if tracked is None:
        path = analysis.experiment_path(experiment, storage=storage)
        spec, loaded, name = _saved_spec(path), analysis.read(path), path.name  # Tune's files, without Ray
    else:
        path, spec, loaded, name = None, tracked.spec, tracked.results, tracked.name
    verdict = _saved_verdict(path, spec, loaded, tracked) if own_pick else None  # a damaged one first
    chosen, judged = analysis.select(spec, loaded, metric=metric, mode=mode, scope=scope)
    if reevaluate and path is not None:
        verdict = _reevaluate_best(judged, loaded, path, top=reevaluate, seeds=seeds, num_cpus=num_cpus,
                                   out=out or sys.stdout)
    if verdict is not None and verdict.decided:
        from tune_runner.results.robust import winner_best

        chosen = winner_best(loaded, verdict, metric=judged.metric, mode=judged.mode)
    return best_result(spec, chosen, experiment=name, path=path, verdict=verdict, tracked=tracked)


def _saved_verdict(path: Path | None, spec: Any, loaded: Any, tracked: Any) -> Any:
    """The search's own re-evaluation verdict (reevaluation.json in its folder, or as its report logged it to
    MLflow) when it decided and its winner is one of the loaded trials; else None. A damaged file is a
    UserError naming it and the fix."""
    from tune_runner.paths import REEVALUATION_FILE, REPORT_FOLDER
    from tune_runner.results import report, robust

    if tracked is not None:
        data, where = tracked.verdict, f"{tracked.reference}/{REPORT_FOLDER}/{REEVALUATION_FILE}"
        fix = "read the search from its folder, or give --scope"
    else:
        data, where, fix = report.read_verdict(path), path / REEVALUATION_FILE, report.verdict_fix(path)
    if data is None:
        return None
    try:
        verdict = robust.load_verdict(data, budget=spec.budget_env_steps)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: not a saved re-evaluation ({type(exc).__name__}: {exc}); {fix}") from None
    ids = {t.trial_id for t in loaded.trials}
    return verdict if verdict is not None and verdict.decided and verdict.winner.candidate.trial_id in ids else None


def _tracked_search(experiment: str, *, storage: Any, mlflow_uri: str | None, metric: str | None,
                    reevaluate: int | None) -> Any:
    """The search `best` reads from MLflow (a runs:/ reference, or any name with an MLflow URI), or None to
    read a results folder. The settings that need the folder are refused first."""
    from tune_runner import paths
    from tune_runner.results import tracked

    if not (tracked.is_reference(experiment) or mlflow_uri):
        return None
    if storage is not None:
        raise UserError(f"--storage {storage}: names where results folders are; {experiment} is read from "
                        f"MLflow (runs:/ or --mlflow-uri); drop --storage, or drop --mlflow-uri to read the folder")
    if reevaluate:
        raise UserError(f"--reevaluate {reevaluate}: re-trains from the search's results folder and writes "
                        f"its verdict there; MLflow holds neither; run tune-rl best <the search's folder> "
                        f"--reevaluate {reevaluate}")
    return tracked.read(experiment, uri=mlflow_uri or paths.default_mlflow_uri(), metric=metric)


def _reevaluate_best(spec: Any, loaded: Any, path: Path, *, top: int, seeds: int | None, num_cpus: int | None,
                     out: TextIO) -> Any:
    """Re-train the top configs of a finished search on fresh seeds; the verdict, saved in its folder."""
    from datetime import datetime

    from tune_runner.results import robust
    from tune_runner.trainables.catalog import backend
    from tune_runner.tuning.reevaluate import reevaluate_best

    # A finished search read back names its trainable: resolved here, once, for the re-evaluation.
    verdict = reevaluate_best(spec, loaded, path, record=backend(spec.trainable), top=top, seeds=seeds,
                              num_cpus=num_cpus, name=f"reevaluation-{datetime.now():%Y%m%d-%H%M%S}", out=out)
    for line in robust.describe(verdict, metric=spec.metric):
        print(f"robust     {line}", file=out)
    return verdict


def _saved_spec(path: Path) -> Any:
    """The spec a search saved beside its results (tune_rl_spec.yaml)."""
    from tune_runner.spec.saved import read_spec

    return read_spec(path)


def report(experiment: str | Path, *, storage: str | Path | None = None,
           mlflow_uri: str | None = None) -> ReportResult:
    """Write the HTML report of a search (plots, importances, top configs) and log it to the search's MLflow
    parent run (in `mlflow_uri`, default: the store the search logged to), as `tune-rl report`."""
    from tune_runner import paths
    from tune_runner.results import analysis
    from tune_runner.results import report as html_report
    from tune_runner.tracking import parent as parent_run
    from tune_runner.tracking import uri as uris
    from tune_runner.tuning import resume

    storage = storage_setting(storage)
    path = analysis.experiment_path(str(experiment), storage=storage, command="report")
    spec = _saved_spec(path)
    saved = resume.read_run(path) or {}
    uri = mlflow_uri or saved.get("mlflow_uri", paths.default_mlflow_uri())  # where the search logged
    if resume.HIDDEN in uri:
        raise UserError(f"--mlflow-uri: missing; {path.name} logs to {uri}, whose secret is not saved; give it")
    uris.check_uri(uri)
    # MLflow's import and store open on the other core while this one draws: about half the wall time.
    logger = parent_run.ReportLogger(uri, spec.name, path, search_id=saved.get("search_id"))
    try:
        index = html_report.write(path, spec)
    except BaseException:
        logger.cancel()
        raise
    return ReportResult(index=index, mlflow_run=logger.finish(index.parent))


def load_policy(path: str | Path) -> Any:
    """A trained policy from a checkpoint folder (ours or RLlib's), a trial folder (its newest checkpoint) or
    a bundle from `export`, acting greedily with RLlib's old Algorithm API (tune_runner.results.policy):

    >>> import gymnasium
    >>> import tune_runner as tr
    >>> policy = tr.load_policy("cartpole.yaml")  # tune-rl best --export cartpole.yaml wrote it
    >>> env = gymnasium.make(policy.env_id, **policy.env_config)
    >>> observation, _ = env.reset(seed=0)
    >>> action = policy.compute_single_action(observation)
    >>> env.action_space.contains(action)
    True

    and `policy.compute_actions(batch)` for a stacked batch or {id: observation}. tests/test_policy.py runs this
    example as written."""
    from tune_runner.results.policy import load_policy as load

    return load(path)
