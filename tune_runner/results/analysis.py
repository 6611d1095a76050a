"""Pick the best trial of a finished (or running) experiment, by Ray Tune's rule.

`read` gives the trials from Tune's own files without importing Ray (tune_runner.results.trials), for the
commands that only read (`best`, `report`); `load` gives Ray Tune's ExperimentAnalysis, which the
search itself uses. Both answer what `best_trial` asks: `.trials`, `.get_best_trial` and each trial's
history; tests/test_e2e.py checks that they pick the same trial.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_runner import paths
from tune_runner.errors import NotFound, UserError, unknown_name
from tune_runner.trainables import metrics

SCOPE_HELP = "last | max | avg-last-N (e.g. avg-last-5)"
STATE_FIX = "Ray Tune wrote it; restore it, or delete it if an older experiment_state-*.json is beside it"


@dataclass(frozen=True)
class Best:
    """The selected trial: its id, config, score under the scope, and last result."""

    trial_id: str
    config: dict
    value: float
    metric: str
    mode: str
    scope: str
    last_result: dict
    trial_path: str


def fmt_value(value: Any) -> str:
    """Numbers short and readable: 1.2e-03, 0.99, 256."""
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
            return f"{value:.2e}"
        return f"{value:.4g}"
    return str(value)


def fmt_config(config: dict[str, Any], keys: tuple[str, ...]) -> str:
    """`k=v` for the searched keys only."""
    return " ".join(f"{k}={fmt_value(config[k])}" for k in keys if k in config)


def last_checkpoint(trial_path: str | Path) -> Path | None:
    """The trial's newest `checkpoint_NNNNNN` folder (Ray numbers them in order), or None; None for no folder
    ("": a population trial's member, results/members.py), never the working directory's."""
    if not str(trial_path):
        return None
    found = [(int(m.group(1)), p) for p in Path(trial_path).glob("checkpoint_*")
             if p.is_dir() and (m := re.fullmatch(r"checkpoint_(\d+)", p.name))]
    return max(found)[1] if found else None


def parse_scope(scope: str) -> int | None:
    """None for `last` and `max`; N for `avg-last-N`. Anything else is a UserError."""
    if scope in ("last", "max"):
        return None
    match = re.fullmatch(r"avg-last-(\d+)", scope)
    if not match or int(match.group(1)) < 1:
        raise UserError(f"--scope {scope}: expected {SCOPE_HELP}")
    return int(match.group(1))


def experiment_path(ref: str, *, storage: Path | str | None = None, command: str = "best") -> Path:
    """An experiment folder from a path or a name under the storage folder (a local one: `command` names
    what refuses a URI storage)."""
    from tune_runner.storage import local_only

    candidate = Path(ref).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    local_only(storage, command=command)
    root = storage or paths.default_storage()
    try:
        paths.check_name(ref, flag="experiment")
    except UserError:  # a path that is not there: a name would have to stay inside the results folder
        raise NotFound(f"experiment {ref!r}: no such folder; give an experiment's folder, or its name under "
                        f"{root} (one folder name, e.g. cartpole-ppo)") from None
    if (root / ref).is_dir():
        return (root / ref).resolve()
    known = [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    if not known:
        raise NotFound(f"experiment {ref!r}: no such folder, and {root} holds no experiments")
    raise NotFound(f"experiment {ref!r}: {unknown_name('experiment', ref, known)} in {root}")


def load(path: Path) -> Any:
    """ExperimentAnalysis over an experiment folder (no Ray session needed)."""
    newest, _ = _check_state(path)
    from ray.tune import ExperimentAnalysis

    from tune_runner.results.members import expand

    try:
        return expand(ExperimentAnalysis(str(path)))
    except DAMAGED as exc:  # a trial's state is damaged
        raise _damaged(newest, exc) from None


def read(path: Path) -> Any:
    """The experiment's trials read from Tune's files without Ray (tune_runner.results.trials); ExperimentAnalysis
    when the state holds a value only Ray can decode."""
    from tune_runner.results import trials as results
    from tune_runner.results.members import expand

    newest, trial_data = _check_state(path)  # read once: checked here, then read as the trials
    try:
        return expand(results.from_state(path, trial_data))
    except results.Unreadable:
        return load(path)
    except DAMAGED as exc:  # a trial's state is damaged
        raise _damaged(newest, exc) from None


# What reading a damaged trial entry of an experiment state raises, in Ray's reader and in ours.
DAMAGED = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def _damaged(state: Path, exc: Exception) -> UserError:
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return UserError(f"{state}: not a readable experiment state ({type(exc).__name__}: {reason}); {STATE_FIX}")


def _check_state(path: Path) -> tuple[Path, list]:
    """The newest experiment_state-*.json of the folder (the one Ray reads: its name holds the time) and its
    trial_data, checked to be a list of trial pairs; one line naming the file when it is not."""
    from tune_runner import files

    states = sorted(path.glob("experiment_state-*.json"))
    if not states:
        raise UserError(f"{path}: not a Ray Tune experiment folder (no experiment_state-*.json)")
    newest = states[-1]
    state = files.read_json_mapping(newest, expected="Ray Tune's experiment state (a JSON object with trial_data)",
                                    fix=STATE_FIX)
    trials = state.get("trial_data")
    if not (isinstance(trials, list) and all(isinstance(t, list) and len(t) == 2 for t in trials)):
        got = files.short(trials) if "trial_data" in state else "nothing (no trial_data key)"
        raise UserError(f"{newest}: trial_data: expected a list of [trial state, run metadata] pairs, got {got}; "
                        f"{STATE_FIX}")
    return newest, trials


def history(analysis: Any, trial_id: str, metric: str) -> list[Any]:
    """A trial's reported values of `metric`, in order: from tune_runner.results.trials, or from an
    ExperimentAnalysis's progress dataframe."""
    if hasattr(analysis, "history"):
        return analysis.history(trial_id, metric)
    frame = analysis.trial_dataframes.get(trial_id)
    if frame is None or metric not in getattr(frame, "columns", ()):
        return []
    return frame[metric].tolist()


def score(history: Any, *, metric: str, mode: str, scope: str) -> float:
    """A trial's score from its reported values of `metric` (or its progress dataframe): last, best
    (`max`) or mean of the last N."""
    if history is None:
        return math.nan
    if hasattr(history, "columns"):  # a dataframe
        if metric not in history.columns:
            return math.nan
        history = history[metric].tolist()
    values = [float(v) for v in history if v is not None and _number(v) and math.isfinite(float(v))]
    if not values:
        return math.nan
    window = parse_scope(scope)
    if scope == "last":
        return values[-1]
    if scope == "max":
        return max(values) if mode == "max" else min(values)
    tail = values[-window:]
    return sum(tail) / len(tail)


def ranked(trials: Iterable[Any], *, metric: str, mode: str, reached: Callable[[dict], bool] | None = None) -> list:
    """Trials with a finite last `metric`, best first by that value. Given `reached` (a spec's stop_at test),
    those whose last result reached stop_at come first, soonest (fewest env steps) first: they all stop at
    about stop_at, so their final values tell them apart no more."""
    sign = -1.0 if mode == "max" else 1.0

    def key(trial: Any) -> tuple[bool, int, float]:
        last = trial.last_result or {}
        solved = reached is not None and reached(last)
        return not solved, int(last.get("env_steps", 0)) if solved else 0, sign * float(last[metric])

    return sorted((t for t in trials if metrics.finite((t.last_result or {}).get(metric))), key=key)


def _number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def best_trial(analysis: Any, *, metric: str, mode: str, scope: str = "last",
               reached: Callable[[dict], bool] | None = None) -> Best:
    """The best trial under `scope`; Ray's own selection where it has that scope. Under `last`, given
    `reached` (the spec's stop_at test), a trial that reached stop_at beats any that did not, and of
    those the one that got there with the fewest env steps wins (scope `solved soonest ...`)."""
    window = parse_scope(scope)
    ray_scope = {"last": "last", "max": "all"}.get(scope) or (f"last-{window}-avg" if window in (5, 10) else None)
    trials = [t for t in analysis.trials if metric in (t.last_result or {})]
    if not trials:
        reported = sorted({k for t in analysis.trials for k in (t.last_result or {})})
        raise UserError(f"--metric {metric}: no trial reported it; "
                        f"{unknown_name('metric', metric, reported) if reported else 'no results yet'}")
    scores = _Scores(analysis, metric=metric, mode=mode, scope=scope)
    solved = [t for t in trials if reached(t.last_result or {})] if reached is not None and scope == "last" else []
    if solved:
        chosen = ranked(solved, metric=metric, mode=mode, reached=reached)[0]
        scope = f"solved soonest: {len(solved)} of {len(analysis.trials)} trials reached stop_at"
    elif ray_scope:
        chosen = analysis.get_best_trial(metric=metric, mode=mode, scope=ray_scope, filter_nan_and_inf=True)
    else:
        finite = [t for t in trials if math.isfinite(scores[t.trial_id])]
        pick = max if mode == "max" else min
        chosen = pick(finite, key=lambda t: scores[t.trial_id]) if finite else None
    if chosen is None:
        raise UserError(f"--metric {metric}: every trial's value is NaN or infinite; nothing to select")
    return Best(trial_id=chosen.trial_id, config=dict(chosen.config), value=scores[chosen.trial_id],
                metric=metric, mode=mode, scope=scope, last_result=dict(chosen.last_result or {}),
                trial_path=str(chosen.path))


def select(spec: Any, loaded: Any, *, metric: str | None = None, mode: str | None = None,
           scope: str = "last") -> tuple[Best, Any]:
    """`tune-rl best`'s selection over a search's trials (from its folder or its MLflow runs): the best
    trial by `metric` and `mode` (default: the spec's) under `scope`, and the spec it was judged by
    (without stop_at when ranked by another metric or mode: stop_at is a value of the space's own)."""
    from dataclasses import replace

    metric, mode = metric or spec.metric, mode or spec.mode
    judged = spec if (metric, mode) == (spec.metric, spec.mode) else replace(spec, metric=metric, mode=mode,
                                                                             stop_at=None)
    return best_trial(loaded, metric=metric, mode=mode, scope=scope, reached=judged.reached), judged


class _Scores(dict):
    """trial id -> score under the scope, each computed when first asked for (a history is a file to read)."""

    def __init__(self, analysis: Any, *, metric: str, mode: str, scope: str) -> None:
        super().__init__()
        self.analysis, self.metric, self.mode, self.scope = analysis, metric, mode, scope

    def __missing__(self, trial_id: str) -> float:
        self[trial_id] = score(history(self.analysis, trial_id, self.metric), metric=self.metric, mode=self.mode,
                               scope=self.scope)
        return self[trial_id]


def trial_best(analysis: Any, trial_id: str, *, metric: str, mode: str, value: float, scope: str) -> Best:
    """A `Best` for a given trial (e.g. the re-evaluation's winner), scored `value` under `scope`."""
    trial = next(t for t in analysis.trials if t.trial_id == trial_id)
    return Best(trial_id=trial.trial_id, config=dict(trial.config), value=value, metric=metric, mode=mode,
                scope=scope, last_result=dict(trial.last_result or {}), trial_path=str(trial.path))


def trial_ending(trial: Any, *, ending: Callable[[dict], str]) -> str:
    """How a trial ended: errored, `ending`'s word for a finished one (done / solved / stopped_early), or Tune's
    own status in lower case for one that has not; the one mapping the summary, report and search counts share."""
    if trial.status == "ERROR":
        return "errored"
    if trial.status == "TERMINATED":
        return ending(trial.last_result or {})
    if trial.status == "PAUSED":  # HyperBand can end a search with a trial paused in an unfilled bracket
        return "stopped_early"
    return trial.status.lower()


def statuses(analysis: Any, *, ending: Callable[[dict], str]) -> Counter:
    """Trials counted as done / solved / stopped early / errored / other (`trial_ending`)."""
    return Counter(trial_ending(trial, ending=ending).replace("_", " ") for trial in analysis.trials)


def top_configs(analysis: Any, *, metric: str, mode: str, k: int, keys: tuple[str, ...]) -> list[dict]:
    """The configs (only `keys`) of the best `k` trials by their last value of `metric` (`ranked`)."""
    return [{key: trial.config[key] for key in keys if key in trial.config}
            for trial in ranked(analysis.trials, metric=metric, mode=mode)[:k]]
