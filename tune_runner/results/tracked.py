"""A finished search read back from its MLflow tracking store, for `tune-rl best runs:/<parent run id>`.

A search logs everything `best` needs while it runs (tune_runner.tracking.callback, tune_runner.tracking.parent):

    parent run   tags tune_rl.space, tune_rl.search_id, ...; artifact tune_rl_spec.yaml, the validated
                 spec (the folder's own file; logged by searches from this version on)
    child runs   one per trial, tag tune_rl.trial_id and tune_rl.status; params: the trial's fixed and
                 searched values as text; metrics: every numeric result, at step = env steps
    member runs  of a population search (configs_per_trial), one per member under its trial's run, tag
                 tune_rl.member_id and tune_rl.search_run_id: read as the search's trials, as its folder is

so a search that ran on a cluster can be exported from a laptop without its results folder. Params
are text: the spec types them back (a range is a float, randint an int, a choice the choice whose
text it is). What MLflow lacks: trial checkpoints (the bundle's `checkpoint` is null) and, for a
population-based search, the configs a trial switched to (refused). Only mlflow is imported.
"""

from __future__ import annotations

import ast
import math
import os
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError, unknown_name
from tune_runner.paths import SPEC_FILE
from tune_runner.results import trials as results
from tune_runner.spec import reserved
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.spec.saved import read_logged_spec
from tune_runner.spec.search_space import LIST_DISTS, Param
from tune_runner.tracking import uri as mlflow_uri
from tune_runner.tracking.uri import MEMBER_TAG, SEARCH_TAG, flat_params

PREFIX = "runs:/"
# Child-run status tags (tune_runner.tracking.callback) as Ray Tune names a trial's status.
STATUSES = {"running": "RUNNING", "terminated": "TERMINATED", "stopped_early": "TERMINATED", "errored": "ERROR"}
N_STEPS = (5, 10)  # Ray Tune's last-N averages in metric_analysis


@dataclass(frozen=True)
class TrackedSearch:
    """A search as its MLflow parent run holds it: the run, its name (the search's folder name), its
    spec, and its trials (tune_runner.results.trials' shape, so analysis.best_trial selects from it)."""

    uri: str
    run_id: str
    name: str
    experiment_path: str
    spec: ExperimentSpec
    results: TrackedResults
    verdict: dict | None = None
    """The search's re-evaluation verdict as its report logged it (report/reevaluation.json), if it ran one."""

    @property
    def reference(self) -> str:
        """`runs:/<parent run id>`, what names the search in this store."""
        return f"{PREFIX}{self.run_id}"

    @property
    def shown_uri(self) -> str:
        """The store's URI without a secret (what is printed and written into a bundle)."""
        return mlflow_uri.redacted(self.uri)


def is_reference(ref: str) -> bool:
    """Whether `ref` names an MLflow run (`runs:/<id>`) rather than an experiment folder or name."""
    return ref.startswith(PREFIX)


def read(ref: str, *, uri: str, metric: str | None = None) -> TrackedSearch:
    """The search `ref` names in the store at `uri`: `runs:/<parent run id>`, or a name (a search's run
    name, which is its folder name; else an MLflow experiment, whose newest search is taken). `metric`
    (default: the spec's) is the one whose histories are fetched for the selection."""
    if is_reference(ref):
        _run_id(ref)  # a malformed reference is wrong whatever the store
    check_store(uri)
    client = _client(uri)
    run = _parent_by_id(client, ref, uri) if is_reference(ref) else _parent_by_name(client, ref, uri)
    shown = f"{PREFIX}{run.info.run_id}"
    spec = _spec(client, run, shown)
    _refuse_population(spec, run, shown)
    trials = _trials(client, run, spec, metric or spec.metric, shown)
    return TrackedSearch(uri=uri, run_id=run.info.run_id, name=run.info.run_name or run.info.run_id,
                         experiment_path=run.data.tags.get("tune_rl.experiment_path", ""), spec=spec,
                         results=trials, verdict=_verdict(client, run, shown))


def check_store(uri: str) -> None:
    """A store to read from must exist: a SQLite file or file:// folder that is not there would be
    created by MLflow's client (and an SQLite file without MLflow's tables filled with them)."""
    shown = mlflow_uri.redacted(uri)
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if scheme == "sqlite":
        _check_sqlite_store(uri, shown)
    elif scheme == "file":
        folder = Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))
        if not folder.is_dir():
            raise UserError(f"--mlflow-uri {shown}: no such folder; give the store the search logged to")
    else:
        mlflow_uri.check_uri(uri)


def _check_sqlite_store(uri: str, shown: str) -> None:
    import sqlite3
    from contextlib import closing

    path = mlflow_uri.sqlite_path(uri)
    if path is None or not path.is_file():
        raise UserError(f"--mlflow-uri {shown}: no such file; give the store the search logged to (its "
                        f"tune_rl_run.yaml names it; the default is sqlite:///$TUNE_RL_HOME/mlflow.db)")
    try:
        with closing(mlflow_uri.read_sqlite(path)) as database:
            tables = {row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        raise UserError(f"--mlflow-uri {shown}: {path} is not an SQLite database ({exc}); give the store the "
                        f"search logged to") from None
    if not {"runs", "experiments"} <= tables:
        raise UserError(f"--mlflow-uri {shown}: {path} is not an MLflow store (no runs table); give the store "
                        f"the search logged to")


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _parent_by_id(client: Any, ref: str, uri: str) -> Any:
    from mlflow.exceptions import MlflowException

    run_id = _run_id(ref)
    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise UserError(f"experiment {ref}: no such run in {mlflow_uri.redacted(uri)}; check the id (tune-rl "
                            f"search prints its parent run on its mlflow line) and --mlflow-uri") from None
        raise UserError(f"experiment {ref}: MLflow at {mlflow_uri.redacted(uri)} answered "
                        f"{_first_line(exc)}; check --mlflow-uri") from None
    tags = run.data.tags
    if MEMBER_TAG in tags and SEARCH_TAG in tags:
        raise UserError(f"experiment {ref}: the run of member {tags[MEMBER_TAG]} of trial "
                        f"{tags.get('tune_rl.trial_id', '?')}, not a search's parent run; give its search: "
                        f"runs:/{tags[SEARCH_TAG]}")
    if "tune_rl.trial_id" in tags and "mlflow.parentRunId" in tags:
        raise UserError(f"experiment {ref}: the run of trial {tags['tune_rl.trial_id']}, not a search's parent "
                        f"run; give its parent: runs:/{tags['mlflow.parentRunId']}")
    if "tune_rl.space" not in tags or "mlflow.parentRunId" in tags:
        raise UserError(f"experiment {ref}: not the parent run of a tune-rl search (no tune_rl.space tag); give "
                        f"the run tune-rl search printed on its mlflow line")
    return run


def _run_id(ref: str) -> str:
    run_id = ref.removeprefix(PREFIX).strip("/")
    if not run_id or "/" in run_id:
        raise UserError(f"experiment {ref}: expected runs:/<parent run id> (a run, not an artifact in it), e.g. "
                        f"runs:/{run_id.split('/')[0] or '7cb80606483e4a0a8be1577c56cd1f5f'}")
    return run_id


def _parent_by_name(client: Any, name: str, uri: str) -> Any:
    """The search whose parent run is named `name`; else the newest search in the MLflow experiment `name`."""
    experiments = client.search_experiments(max_results=1000)
    ids = [e.experiment_id for e in experiments]
    named = _parents(client, ids, mlflow_uri.tag_filter("mlflow.runName", name)) if ids else []
    named = [r for r in named if r.info.run_name == name]
    if len(named) > 1:
        listed = ", ".join(f"runs:/{r.info.run_id}" for r in named)
        raise UserError(f"experiment {name}: {len(named)} searches of that name in {mlflow_uri.redacted(uri)} "
                        f"({listed}); give one as runs:/<id>")
    if named:
        return named[0]
    experiment = next((e for e in experiments if e.name == name), None)
    if experiment is None:
        known = sorted({e.name for e in experiments} - {"Default"})
        where = f"{mlflow_uri.redacted(uri)} ({unknown_name('experiment', name, known)})" if known else \
            f"{mlflow_uri.redacted(uri)}, which holds no experiment"
        raise UserError(f"experiment {name}: no search's run and no MLflow experiment of that name in {where}; "
                        f"check the name and --mlflow-uri, or give runs:/<parent run id>")
    found = _parents(client, [experiment.experiment_id], "tags.`tune_rl.space` LIKE '%'")
    if not found:
        raise UserError(f"experiment {name}: the MLflow experiment holds no tune-rl search in "
                        f"{mlflow_uri.redacted(uri)}; give the experiment tune-rl search logged to (the space's "
                        f"name) or runs:/<parent run id>")
    return max(found, key=lambda r: r.info.start_time or 0)


def _parents(client: Any, experiment_ids: list[str], filter_string: str) -> list[Any]:
    runs = client.search_runs(experiment_ids, filter_string=filter_string, max_results=10_000)
    return [r for r in runs if "tune_rl.space" in r.data.tags and "mlflow.parentRunId" not in r.data.tags]


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "message", "") or exc)
    return next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)


def _folder_hint(run: Any) -> str:
    path = run.data.tags.get("tune_rl.experiment_path")
    from tune_runner.hints import printed

    return printed(["tune-rl", "best", path]) if path else "tune-rl best <its results folder>"


def _spec(client: Any, run: Any, shown: str) -> ExperimentSpec:
    """The spec the search logged on its parent run (tune_rl_spec.yaml), validated as the folder's is."""
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    if SPEC_FILE not in logged:
        raise UserError(f"experiment {shown}: search {run.info.run_name} logged no {SPEC_FILE} (it started before "
                        f"tune-rl logged the spec there); read it from its results folder: "
                        f"{_folder_hint(run)}")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one small file: no bar on stderr
    with tempfile.TemporaryDirectory(prefix="tune-rl-spec-") as tmp:
        local = Path(client.download_artifacts(run.info.run_id, SPEC_FILE, tmp))
        return read_logged_spec(local, where=f"{shown}/{SPEC_FILE}",
                                fix=f"tune-rl search logged it; read the search from its folder: {_folder_hint(run)}")


def _verdict(client: Any, run: Any, shown: str) -> dict | None:
    """The re-evaluation verdict the search's report logged (report/reevaluation.json), or None."""
    import json

    from tune_runner.paths import REEVALUATION_FILE, REPORT_FOLDER

    path = f"{REPORT_FOLDER}/{REEVALUATION_FILE}"
    if path not in {a.path for a in client.list_artifacts(run.info.run_id, REPORT_FOLDER)}:
        return None
    with tempfile.TemporaryDirectory(prefix="tune-rl-verdict-") as tmp:
        text = Path(client.download_artifacts(run.info.run_id, path, tmp)).read_text(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise UserError(f"{shown}/{path}: not the saved re-evaluation (a JSON object); read the search from its "
                        f"folder ({_folder_hint(run)}), or give --scope")
    return data


def _refuse_population(spec: ExperimentSpec, run: Any, shown: str) -> None:
    from tune_runner.tuning.schedulers import SCHEDULERS

    kind = SCHEDULERS.peek(spec.scheduler.name)
    if getattr(kind, "population", False):
        raise UserError(f"experiment {shown}: search {run.info.run_name} ran scheduler {spec.scheduler.name}, whose "
                        f"trials change config as they go, and MLflow holds only each trial's first; read it from "
                        f"its results folder: {_folder_hint(run)}")


def _trials(client: Any, run: Any, spec: ExperimentSpec, metric: str, shown: str) -> TrackedResults:
    """Each child run as a trial: its config typed back, status, last values and `metric`'s history. Of a search
    of population trials, each member's run (one level further down) is one, as results.members.expand reads the
    search's folder: the configs it tried."""
    population = spec.configs_per_trial > 1
    children = _member_runs(client, run, spec, shown) if population else client.search_runs(
        [run.info.experiment_id], max_results=10_000, filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}'")
    id_tag = MEMBER_TAG if population else "tune_rl.trial_id"
    found = TrackedResults(Path(shown), [], client=client)
    for child in sorted(children, key=lambda r: r.data.tags.get(id_tag, "")):
        trial_id = child.data.tags.get(id_tag)
        if trial_id is None:
            continue  # a run someone else nested under the search
        found.runs[trial_id] = child.info.run_id
        last = dict(child.data.metrics)
        values = found.history(trial_id, metric, steps=True)
        last.pop(metric, None)
        if values:
            last.update({metric: values[-1][1], "env_steps": values[-1][0]})
        if "training_iteration" in last:  # a count; MLflow keeps every metric as a float
            last["training_iteration"] = int(last["training_iteration"])
        last["trial_id"] = trial_id
        what = "member" if population else "trial"
        config = config_of(spec, child.data.params, where=f"{shown} {what} {trial_id}")
        if population and "seed" in child.data.params:  # a member's own seed (spec.seed_keys.member_seed)
            config["seed"] = int(child.data.params["seed"])
        found.trials.append(results.TrialRecord(
            trial_id=trial_id, status=STATUSES.get(child.data.tags.get("tune_rl.status", ""), "PENDING"),
            config=config, last_result=last, metric_analysis={}, path="",
            error_msg=child.data.tags.get("tune_rl.error", "")))
    return found


def _member_runs(client: Any, run: Any, spec: ExperimentSpec, shown: str) -> list[Any]:
    """The runs of a population search's members (tracking.callback), found by the search they belong to."""
    found = mlflow_uri.member_runs(client, run.info.experiment_id, run.info.run_id)
    if not found:
        raise UserError(f"experiment {shown}: search {run.info.run_name} ran population trials (configs_per_trial "
                        f"{spec.configs_per_trial}) and MLflow holds no run of their members (tune-rl logged none "
                        f"before this version); read it from its results folder: {_folder_hint(run)}")
    return found


@dataclass
class TrackedResults(results.Results):
    """tune_runner.results.trials.Results whose histories come from the child runs' metric histories (steps in
    order), and whose metric_analysis (Ray Tune's running summary) is computed from them."""

    client: Any = None
    runs: dict[str, str] = field(default_factory=dict)
    _series: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict, repr=False)

    def history(self, trial_id: str, metric: str, *, steps: bool = False) -> list[Any]:
        """The trial's logged values of `metric` in step order (with steps: (env steps, value) pairs)."""
        key = (trial_id, metric)
        if key not in self._series:
            points = self.client.get_metric_history(self.runs[trial_id], metric)
            self._series[key] = [(m.step, m.value) for m in sorted(points, key=lambda m: (m.step, m.timestamp))]
        return list(self._series[key]) if steps else [value for _, value in self._series[key]]

    def get_best_trial(self, metric: str, mode: str, scope: str = "last",
                       filter_nan_and_inf: bool = True) -> results.TrialRecord | None:
        for trial in self.trials:
            if metric in trial.last_result and metric not in trial.metric_analysis:
                trial.metric_analysis[metric] = summary(self.history(trial.trial_id, metric))
        return super().get_best_trial(metric, mode, scope, filter_nan_and_inf)


def summary(values: list[float]) -> dict[str, float]:
    """Ray Tune's metric_analysis of one metric from its history: max, min, avg, last, last-N-avg."""
    if not values:
        return {}
    found = {"max": max(values), "min": min(values), "avg": math.fsum(values) / len(values), "last": values[-1]}
    for n in N_STEPS:
        tail = values[-n:]
        found[f"last-{n}-avg"] = sum(tail) / len(tail)
    return found


def config_of(spec: ExperimentSpec, params: dict[str, str], *, where: str) -> dict[str, Any]:
    """A trial's config as Ray Tune held it (`spec.param_space()` resolved), from its run's params: the
    fixed values are the spec's own, each searched one is typed back from its text by its distribution."""
    import copy

    config: dict[str, Any] = {"env": spec.env, "env_config": copy.deepcopy(spec.env_config),
                              **copy.deepcopy(spec.fixed)}
    for param in spec.space:  # parents first: a parameter whose condition fails was not searched in this trial
        if param.active(config):
            config[param.name] = typed(param, params, where=where)
    if spec.plugins:
        config[reserved.PLUGINS_KEY] = list(spec.plugins)
    return config


def typed(param: Param, params: dict[str, str], *, where: str) -> Any:
    """The searched value whose params (mlflow_uri.flat_params: str(value), dicts as dotted keys)
    the run holds: the choice that logs the same, a float for a range, an int for randint."""
    if param.dist in LIST_DISTS:
        for choice in param.extremes():  # every choice, as Ray Tune hands it to the trial
            logged = flat_params({param.name: choice})
            if logged and all(params.get(k) == v for k, v in logged.items()):
                return choice
    text = params.get(param.name)
    if text is None:
        raise UserError(f"{where}: its run has no param {param.name}; the search logged an incomplete trial, read "
                        f"it from its results folder")
    if param.dist == "randint":
        return int(text)
    if param.dist in ("uniform", "loguniform", "quniform"):
        return float(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
