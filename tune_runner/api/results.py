"""What the API's calls return: frozen records of a search, its best trial and its report.

They hold plain values (names, paths, numbers, the config); reading every trial (`dataframe`) and writing a
bundle (`export`) happen when asked for, so a result costs nothing it is not used for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BestResult:
    """The best trial of a search, as `tune-rl best` selects it."""

    experiment: str  # the search's name
    trial_id: str
    config: Mapping[str, Any]  # the trial's config, less the env keys: what `tune-rl best --json` prints
    value: float  # its score of `metric` under `scope`
    metric: str
    mode: str
    scope: str
    path: Path | None  # the search's results folder; None when read from MLflow
    mlflow_run: str | None = None  # the search's MLflow parent run, when read from MLflow
    mlflow_uri: str | None = None  # ... and its store, with any password hidden
    verdict: Any = None  # the re-evaluation on fresh seeds (tune_runner.results.robust.Verdict), if one ran
    _spec: Any = field(default=None, repr=False, compare=False)
    _best: Any = field(default=None, repr=False, compare=False)
    _origin: Mapping[str, str] | None = field(default=None, repr=False, compare=False)  # the bundle's MLflow source

    @property
    def searched(self) -> tuple[str, ...]:
        """The names of the searched hyperparameters, as the search's summary shows them (every key of the config
        when the search searched none, or its space is not known)."""
        names = tuple(getattr(self._spec, "searched", ()) or ())
        return tuple(k for k in names if k in self.config) or tuple(self.config)

    def export(self, path: str | Path) -> Path:
        """Write the best-config bundle to `path` (what `tune-rl best --export` writes); the path written."""
        from tune_runner.results import export
        from tune_runner.trainables.catalog import backend

        origin = None if self._origin is None else dict(self._origin)
        # A search read back (its folder or MLflow) names its trainable: resolved here, once, for the bundle.
        target = export_target(path)
        bundle = export.bundle(self._spec, self._best, record=backend(self._spec.trainable),
                               experiment=self.experiment, verdict=self.verdict, origin=origin)
        return bundle.write(target)


def export_target(path: str | Path) -> Path:
    """The file `export` writes, its folder checked as every folder a user names is (paths.writable_folder:
    at most that last folder is made); `tune-rl best --export` asks before it selects or re-evaluates."""
    from tune_runner.paths import writable_folder

    target = Path(path).expanduser().resolve()
    writable_folder(target.parent, setting=f"--export {path}", what="write there")
    return target


@dataclass(frozen=True)
class SearchResult:
    """A search that ran to its end (or had already)."""

    name: str
    path: Path  # its results folder on this machine (the local copy of a --storage URI)
    metric: str
    mode: str
    trials: Mapping[str, int]  # how the trials ended: {"done": 3, "stopped early": 1, ...}
    best: BestResult | None  # None when no trial reported the metric
    export_path: Path | None = None  # the best.yaml the search wrote
    mlflow_run: str | None = None  # its MLflow parent run

    @property
    def best_config(self) -> Mapping[str, Any] | None:
        """The best trial's config (without the env keys), None when there is no best trial."""
        return None if self.best is None else self.best.config

    @property
    def best_value(self) -> float | None:
        """The best trial's `metric` (re-evaluated on fresh seeds: their interquartile mean)."""
        return None if self.best is None else self.best.value

    def dataframe(self) -> Any:
        """One row per trial (pandas): trial_id, status, config/<key> and its last result's values."""
        import pandas as pd

        from tune_runner.results import analysis
        from tune_runner.results.trials import flatten

        rows = []
        for trial in analysis.read(self.path).trials:
            config = {f"config/{k}": v for k, v in (trial.config or {}).items()}
            result = {k: v for k, v in flatten(dict(trial.last_result or {})).items() if not k.startswith("config")}
            rows.append({"trial_id": trial.trial_id, "status": trial.status, **config, **result})
        return pd.DataFrame(rows)

    def export(self, path: str | Path) -> Path:
        """Write the best trial's bundle to `path`: the best.yaml the search wrote (the format of
        `tune-rl best --export`, its re-evaluation included); UserError when there is no best trial."""
        if self.best is None:
            from tune_runner.errors import UserError

            raise UserError(f"{self.name}: no trial reported {self.metric}; nothing to export")
        return self.best.export(path)


@dataclass(frozen=True)
class ReportResult:
    """The HTML report of a search, and the MLflow parent run it was logged to (None: none found)."""

    index: Path
    mlflow_run: str | None


def best_result(spec: Any, best: Any, *, experiment: str, path: Path | None, verdict: Any = None,
                tracked: Any = None) -> BestResult:
    """A BestResult of the trial `best` (tune_runner.results.analysis.Best) of the search that `spec` ran;
    `tracked` is the search as read from MLflow (tune_runner.results.tracked), if it was."""
    from tune_runner.results.export import exported_config

    config = exported_config(best.config)
    origin = None if tracked is None else {"mlflow_run": tracked.reference, "mlflow_uri": tracked.shown_uri}
    return BestResult(experiment=experiment, trial_id=best.trial_id, config=config, value=best.value,
                      metric=best.metric, mode=best.mode, scope=best.scope, path=path,
                      mlflow_run=None if tracked is None else tracked.run_id,
                      mlflow_uri=None if tracked is None else tracked.shown_uri, verdict=verdict, _spec=spec,
                      _best=best, _origin=origin)
