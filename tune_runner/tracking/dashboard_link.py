"""The dashboard's deep link: the newest search's trials in MLflow's runs table, its metric and searched
parameters as columns, best first.

MLflow 3.17's UI takes the filter and the sort order from the URL (`searchFilter`, `orderByKey`), but
the visible columns only from a *shared view*: an experiment tag `mlflow.sharedViewState.<key>`
holding the view as JSON, opened with `?viewStateShareKey=<key>` (what its own Share button writes).
A shared view is ignored when the URL also carries a filter or sort, so all of them go in the tag.
It cannot expand a run (MLflow drops `runsExpanded` from shared views): the view filters to the
parent's child runs instead. `workflowType=machine_learning` picks the sidebar's Model training
mode, where MLflow would otherwise open its GenAI one.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tune_runner.spec.reserved import MEMBERS_KEY
from tune_runner.tracking import uri as mlflow_uri

SHARE_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow's own prefix: its UI looks the key up under it
SPACE_TAG = "tune_rl.space"  # on every parent run (a search), on no trial's run
SPACE_PARAM_PREFIX = "space."  # the parent's `space.<name>` params: the searched parameters


@dataclass(frozen=True)
class DeepLink:
    """Where in the UI a search's trials are: a path to append to the server's URL."""

    search: str  # the search's name (its parent run's name)
    experiment_id: str
    run_id: str  # the parent run
    view_key: str

    @property
    def path(self) -> str:
        query = urllib.parse.urlencode({"viewStateShareKey": self.view_key, "workflowType": "machine_learning"})
        return f"#/experiments/{self.experiment_id}/runs?{query}"


def experiments_path() -> str:
    """The experiment list: where to start when the store holds no search."""
    return "#/experiments"


def store_is_new(uri: str) -> bool:
    """A SQLite store whose file does not exist yet: no search in it, and nothing to open (opening it
    would create the file while the server creates it too)."""
    path = mlflow_uri.sqlite_path(uri) if uri.lower().startswith("sqlite:") else None
    return path is not None and not path.exists()


def newest_search(uri: str, *, timeout_s: float = 180.0) -> DeepLink | None:
    """The newest search in the store `uri` (the latest-started parent run), its view saved on its
    experiment; None when the store holds no search.

    It is looked up in a child process: MLflow's client (about 190 MB) would otherwise stay in the
    dashboard's own process for as long as the server runs.
    """
    if store_is_new(uri):
        return None
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CHILD, uri], capture_output=True, text=True, timeout=timeout_s)
    answer = mlflow_uri.child_answer(done.stdout, done.stderr,
                                     doing=f"finding the newest search in {mlflow_uri.redacted(uri)}")
    return DeepLink(**answer["link"]) if answer["link"] else None


CHILD = "from tune_runner.tracking.dashboard_link import _look_up_in_child; _look_up_in_child()"


def _look_up_in_child() -> None:
    """The child of `newest_search`: argv[1] is the store; one JSON line on stdout."""
    import dataclasses
    import sys

    def work() -> dict[str, Any]:
        link = _newest_search(sys.argv[1])
        return {"link": dataclasses.asdict(link) if link else None}

    mlflow_uri.answer_in_child(work)


def _newest_search(uri: str) -> DeepLink | None:
    from mlflow.tracking import MlflowClient  # slow to import: only for a store that may hold a search

    client = MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"tags.`{SPACE_TAG}` LIKE '%'",
                              order_by=["attributes.start_time DESC"], max_results=1) if experiments else []
    if not runs:
        return None
    parent = runs[0]
    key = f"tune-rl-{parent.info.run_id}"  # one view per search: a link printed once keeps its meaning
    client.set_experiment_tag(parent.info.experiment_id, SHARE_TAG_PREFIX + key, json.dumps(view_of(parent)))
    return DeepLink(search=parent.info.run_name, experiment_id=parent.info.experiment_id,
                    run_id=parent.info.run_id, view_key=key)


def view_of(parent: Any) -> dict[str, Any]:
    """The runs table of a search: its trials (the parent's child runs), best first by the space's
    metric, with the metric and the searched parameters as columns. Of a search of population trials, its
    members' runs instead (tracking.callback): the configs it tried, each with all its searched values, where
    a trial's run holds only the values its members share."""
    params = parent.data.params
    metric, mode = params.get("metric"), params.get("mode", "max")
    searched = [key.removeprefix(SPACE_PARAM_PREFIX) for key in params if key.startswith(SPACE_PARAM_PREFIX)]
    population = params.get(MEMBERS_KEY, "1") != "1"
    runs = mlflow_uri.tag_filter(mlflow_uri.SEARCH_TAG, parent.info.run_id) if population \
        else f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    view: dict[str, Any] = {"searchFilter": runs, "selectedColumns": [column("params", name) for name in searched]}
    if metric:
        view["selectedColumns"].insert(0, column("metrics", metric))
        view |= {"orderByKey": column("metrics", metric), "orderByAsc": mode == "min"}
    return view


def column(kind: str, name: str) -> str:
    """MLflow's column id (its canonical sort key): metrics.`name`, params.`name`."""
    return f"{kind}.`{name}`"
