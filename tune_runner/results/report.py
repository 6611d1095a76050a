"""`tune-rl report EXP`: one HTML page (plus PNGs and CSV) about a search, readable with no server.

    results/EXP/report/index.html
                      learning_curves.png        every trial's return against env steps
                      parallel_coordinates.png   hyperparameters, one line per trial, coloured by return
                      importances.png            Optuna's fANOVA importances over the finished trials
                      trials.csv                 one row per trial
                      reevaluation.json          the re-evaluation's ranking (IQM and CI; with stop_at, solved
                                                 share and env steps to it), when it ran

Importances use Optuna's evaluator on the finished trials whatever searcher produced them:
each trial becomes a completed Optuna trial with the space's distributions.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import shutil
from pathlib import Path
from typing import Any

from tune_runner.paths import REEVALUATION_FILE, REPORT_FOLDER
from tune_runner.results import summary as report
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.spec.search_space import LIST_DISTS, Param

FOLDER = REPORT_FOLDER
IMPORTANCES_FILE = "importances.json"  # the scores and a digest of their inputs (a cache, and data)


def save_verdict(verdict: Any, folder: Path, *, metric: str) -> Path:
    """The re-evaluation's ranking as JSON in the experiment folder (the report's top-K table reads it)."""
    from tune_runner.results.robust import describe, headline

    target = verdict.target
    data = {"metric": metric, "clear_winner": verdict.clear, "verdict": verdict.sentence(),
            "stop_at": target.value if target else None, "lines": describe(verdict, metric=metric), "ranking": []}
    for e in verdict.ranked:
        row = {"trial_id": e.candidate.trial_id, "config": e.candidate.config, "search_score": e.candidate.search_score,
               "seeds": list(e.seeds), "returns": list(e.returns), "iqm": e.iqm, "ci": list(e.ci),
               "trial_paths": [None if t is None else str(t) for t in e.trial_paths], "stopped_at": e.stopped_at}
        if target is not None:
            row.update(summary=headline(e, target), solved=list(e.solved), steps=list(e.steps),
                       steps_iqm=e.steps_iqm, steps_ci=list(e.steps_ci), search_steps=e.candidate.search_steps)
        data["ranking"].append(row)
    path = folder / REEVALUATION_FILE
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def read_verdict(folder: Path) -> dict[str, Any] | None:
    """What save_verdict wrote in a search's folder (reevaluation.json), or None when it holds none; a file
    that is no JSON object is a UserError naming it and the fix."""
    from tune_runner import files

    saved = folder / REEVALUATION_FILE
    if not saved.exists():  # a folder or a FIFO there is read, and refused, as files.read_json_mapping refuses them
        return None
    return files.read_json_mapping(saved, expected="the saved re-evaluation (a JSON object)",
                                   fix=verdict_fix(folder))


def verdict_fix(folder: Path) -> str:
    """How to mend a damaged reevaluation.json of the search in `folder`: the command with the --storage it needs."""
    from tune_runner.hints import search_command, storage_flag

    again = search_command("best", folder.name, "--reevaluate", "2", flags=storage_flag(folder.parent))
    return f"delete it, or re-evaluate the top configs again: {again}"


def _figure(width: float = 9, height: float = 5.5) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _numeric(param: Param, value: Any) -> float:
    """A value on its axis, 0..1: ranges linear or log, choices by their index."""
    if param.dist in LIST_DISTS:
        choices = param.extremes()
        return choices.index(value) / max(1, len(choices) - 1) if value in choices else math.nan
    low, high = float(param.args[0]), float(param.args[1])
    try:
        v = float(value)
    except (TypeError, ValueError):
        return math.nan
    if param.dist == "loguniform":
        return (math.log(v) - math.log(low)) / (math.log(high) - math.log(low))
    return (v - low) / (high - low)


def parallel_coordinates(analysis: Any, spec: ExperimentSpec, *, path: Path) -> Path:
    """One vertical axis per searched hyperparameter, one line per trial, coloured by its final metric."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    figure = _figure()
    ax = figure.add_subplot()
    params = list(spec.space)
    finals = [(t, (t.last_result or {}).get(spec.metric)) for t in analysis.trials]
    finals = [(t, float(v)) for t, v in finals if isinstance(v, (int, float)) and math.isfinite(v)]
    values = [v for _, v in finals] or [0.0]
    norm = Normalize(min(values), max(values) if max(values) > min(values) else min(values) + 1)
    cmap = colormaps["viridis"]
    for trial, value in sorted(finals, key=lambda pair: pair[1] if spec.mode == "max" else -pair[1]):
        ys = [_numeric(p, trial.config.get(p.name)) for p in params]
        ax.plot(range(len(params)), ys, color=cmap(norm(value)), linewidth=1.6, alpha=0.85, marker="o", markersize=3)
    ax.set_xticks(range(len(params)), [f"{p.name}\n{p.describe()}" for p in params], fontsize=8)
    ax.set_yticks([0, 1], ["low", "high"])
    ax.set_xlim(-0.2, max(0.2, len(params) - 0.8))
    ax.set_title(f"hyperparameters of every trial, coloured by final {spec.metric}", fontsize=10)
    figure.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=spec.metric)
    figure.tight_layout()
    figure.savefig(path)
    return path


def importances(analysis: Any, spec: ExperimentSpec, *, cache: Path | None = None) -> dict[str, float]:
    """Optuna's fANOVA parameter importances over the finished trials ({} when there are too few).

    They are a pure function of the trials' values and the space (the forest's seed is fixed), and
    fitting them imports scikit-learn (over a second of `tune-rl report`). So `cache` (a JSON file)
    keeps the scores with a digest of their inputs; an unchanged experiment reuses them.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists, trials = _study_inputs(analysis, spec)
    if len(trials) < 2 or not dists:
        return {}
    digest = hashlib.sha256(json.dumps({"dists": {k: repr(v) for k, v in dists.items()}, "trials": trials,
                                        "mode": spec.mode, "evaluator": IMPORTANCE_EVALUATOR,
                                        "optuna": optuna.__version__}, sort_keys=True, default=str).encode())
    key = digest.hexdigest()
    if cache is not None and cache.is_file():
        try:
            saved = json.loads(cache.read_text(encoding="utf-8"))
            if saved.get("inputs_sha256") == key:
                return {str(k): float(v) for k, v in saved["importances"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            pass  # ours, and only a cache: computed again below
    study = optuna.create_study(direction="maximize" if spec.mode == "max" else "minimize")
    for params, value in trials:
        study.add_trial(optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params},
                                                  value=value))
    try:
        scores = {k: float(v) for k, v in optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)).items()}
    except (RuntimeError, ValueError):
        scores = {}
    if cache is not None:
        cache.write_text(json.dumps({"evaluator": IMPORTANCE_EVALUATOR, "inputs_sha256": key,
                                     "importances": scores}, indent=1) + "\n", encoding="utf-8")
    return scores


IMPORTANCE_EVALUATOR = "optuna.importance.FanovaImportanceEvaluator(seed=0) over the final metric"


def _study_inputs(analysis: Any, spec: ExperimentSpec) -> tuple[dict[str, Any], list[tuple[dict, float]]]:
    """Optuna's distributions of the space, and (params, final value) of each trial that fits them."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    dists: dict[str, Any] = {}
    for p in spec.space:
        if p.dist in LIST_DISTS:
            dists[p.name] = CategoricalDistribution([json.dumps(v) for v in p.extremes()])
        elif p.dist == "randint":
            dists[p.name] = IntDistribution(int(p.args[0]), int(p.args[1]))
        else:
            dists[p.name] = FloatDistribution(float(p.args[0]), float(p.args[1]), log=p.dist == "loguniform")
    trials = []
    for trial in analysis.trials:
        value = (trial.last_result or {}).get(spec.metric)
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            continue
        params = {}
        for name, dist in dists.items():
            if name not in trial.config:  # inactive in this trial (a conditional space): Optuna's own case
                continue
            raw = trial.config[name]
            params[name] = json.dumps(raw) if isinstance(dist, CategoricalDistribution) else raw
        try:
            optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params}, value=float(value))
        except ValueError:
            continue  # a value outside the space (a PBT mutation with its own bounds)
        trials.append((params, float(value)))
    return dists, trials


def importance_plot(scores: dict[str, float], *, path: Path) -> Path:
    figure = _figure(7, 0.6 + 0.5 * max(1, len(scores)))
    ax = figure.add_subplot()
    names = list(scores)[::-1]
    ax.barh(names, [scores[n] for n in names], color="#3b7dd8")
    ax.set_xlabel("importance (fANOVA, share of the variance of the final return)")
    ax.set_xlim(0, 1)
    figure.tight_layout()
    figure.savefig(path)
    return path


def write(exp_path: Path, spec: ExperimentSpec, *, title: str | None = None) -> Path:
    """Render the report into `exp_path/report/`; the index.html path."""
    from tune_runner.results import analysis as tune_analysis

    loaded = tune_analysis.read(exp_path)  # Tune's files, without importing Ray
    reevaluation = read_verdict(exp_path)  # read before anything is written: a damaged one leaves no half report
    folder = exp_path / FOLDER
    folder.mkdir(exist_ok=True)
    title = title or exp_path.name
    report.learning_curves(loaded, spec, title=title, path=folder / "learning_curves.png")
    table = report.trials_table(loaded, spec)
    table.to_csv(folder / "trials.csv", index=False)
    figures = ["learning_curves.png"]
    if spec.space:
        parallel_coordinates(loaded, spec, path=folder / "parallel_coordinates.png")
        figures.append("parallel_coordinates.png")
    scores = importances(loaded, spec, cache=folder / IMPORTANCES_FILE) if spec.space else {}
    if scores:
        importance_plot(scores, path=folder / "importances.png")
        figures.append("importances.png")
    if reevaluation is not None:
        shutil.copyfile(exp_path / REEVALUATION_FILE, folder / REEVALUATION_FILE)
    page = _page(title, spec, table, figures, scores, reevaluation)
    index = folder / "index.html"
    index.write_text(page)
    return index


def _page(title: str, spec: ExperimentSpec, table: Any, figures: list[str], scores: dict[str, float],
          reevaluation: dict | None) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>"
             "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}th{background:#f3f3f3}img{max-width:100%}h2{margin-top:1.6em}</style></head><body>",
             f"<h1>{e(title)}</h1>",
             f"<p>{e(spec.trainable)} on {e(spec.env)}, {e(spec.trials_text())}; searcher {e(spec.searcher.name)}, "
             f"scheduler {e(spec.scheduler.name)}; metric "
             f"{e(spec.metric)} ({e(spec.mode)}).</p>"]
    if reevaluation:
        parts.append(_verdict_table(reevaluation))
    captions = {"learning_curves.png": "Learning curves", "parallel_coordinates.png": "Hyperparameters",
                "importances.png": "Hyperparameter importances"}
    for name in figures:
        parts.append(f"<h2>{captions[name]}</h2><img src='{name}' alt='{captions[name]}'>")
    if scores:
        parts.append("<table><tr><th>hyperparameter</th><th>importance</th></tr>" + "".join(
            f"<tr><td>{e(k)}</td><td>{v:.3f}</td></tr>" for k, v in scores.items()) + "</table>")
    parts.append("<h2>Trials</h2><p><a href='trials.csv'>trials.csv</a></p>")
    parts.append(table.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="", border=0))
    parts.append("</body></html>")
    return "\n".join(parts)


def _verdict_table(reevaluation: dict) -> str:
    """The re-evaluation's ranking; with stop_at (rows with `steps_ci`) by solved share and env steps to it."""
    from tune_runner.results.robust import fmt_steps

    e, rows = html.escape, reevaluation["ranking"]
    by_steps = reevaluation.get("stop_at") is not None and all("steps_ci" in row for row in rows)
    head = ("<th>solved</th><th>IQM env steps to {}</th><th>95% CI</th><th>env steps per seed</th>"
            "<th>final IQM</th>".format(f"{reevaluation['stop_at']:g}") if by_steps
            else "<th>IQM</th><th>95% CI</th><th>returns</th>")
    parts = ["<h2 id='top'>Top configs, re-evaluated on fresh seeds</h2>"
             f"<table><tr><th>#</th><th>trial</th>{head}<th>search score</th></tr>"]
    for place, row in enumerate(rows, 1):
        if by_steps:
            low, high = row["steps_ci"]
            cells = (f"<td>{sum(row['solved'])}/{len(row['solved'])}</td><td>{fmt_steps(row['steps_iqm'])}</td>"
                     f"<td>[{fmt_steps(low)}, {fmt_steps(high)}]</td>"
                     f"<td>{_per_seed_steps(row)}</td><td>{row['iqm']:.1f}</td>")
        else:
            returns = ", ".join(f"{r:.1f}" for r in row["returns"])
            cells = f"<td>{row['iqm']:.1f}</td><td>[{row['ci'][0]:.1f}, {row['ci'][1]:.1f}]</td><td>{returns}</td>"
        parts.append(f"<tr><td>{place}</td><td>{e(row['trial_id'])}</td>{cells}<td>{_search(row)}</td></tr>")
    parts.append(f"</table><p><b>{e(reevaluation['verdict'])}</b></p>")
    return "".join(parts)


def _per_seed_steps(row: dict) -> str:
    """Each seed's env steps to stop_at; an unsolved seed of a candidate stopped once decided shows where."""
    from tune_runner.results.robust import fmt_steps

    stopped = row.get("stopped_at")
    return ", ".join(fmt_steps(steps) if solved or stopped is None else f"unsolved, stopped at {fmt_steps(stopped)}"
                     for steps, solved in zip(row["steps"], row["solved"], strict=False))


def _search(row: dict) -> str:
    from tune_runner.results.robust import fmt_steps

    if row.get("search_steps") is not None:
        return f"solved at {fmt_steps(row['search_steps'])}"
    return f"{row['search_score']:.1f}"
