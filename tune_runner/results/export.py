"""The exported best config: a YAML bundle (tune_runner.results.bundle) that `tune-rl train --config` runs again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_runner.results.analysis import Best
from tune_runner.results.bundle import FORMAT, Bundle
from tune_runner.spec import reserved
from tune_runner.spec.experiment import ExperimentSpec

if TYPE_CHECKING:
    from tune_runner.trainables.backends import Backend


def exported_config(config: dict[str, Any]) -> dict[str, Any]:
    """A trial config as a bundle's `config:` (and `tune-rl best` shows it): without the keys tune-rl reserves
    for the env, its own bookkeeping and the machine's resources (spec/reserved.py)."""
    return reserved.settings(config, leave_out=reserved.NOT_EXPORTED)


def bundle(spec: ExperimentSpec, best: Best, *, record: Backend, experiment: str, verdict: Any = None,
           origin: dict[str, str] | None = None) -> Bundle:
    """The exported bundle, standing on its own: what to run (trainable, env, the config and every
    value the trainable resolved from it), how it was judged (seeds, protocol, IQM and CI when
    re-evaluated), and where it came from (space file and hash, experiment, trial, its newest checkpoint
    for `tune-rl evaluate`, versions, commit). `origin` joins `source` for a search read from MLflow
    (mlflow_run, mlflow_uri); such a best has no trial folder, so no checkpoint. `record`: the spec's
    trainable, resolved once by the caller; it resolves the config's values."""
    from tune_runner.trainables.trial import best_member, env_config_of

    # A bundle is one config, which `tune-rl train --config` runs as it trained: of a population, its best seed's.
    trial_config, member = best_member(best.config, best.last_result, metric=spec.metric, mode=spec.mode)
    # A searched `env_config.NAME` is folded into env_config: the bundle names the env as the trial built it.
    config = {k: v for k, v in exported_config(trial_config).items() if not k.startswith(reserved.PREFIX)}
    env_config = env_config_of({"env_config": spec.env_config, **best.config})
    result = {k: best.last_result[k] for k in (spec.metric, "env_steps", "training_iteration")
              if k in best.last_result}
    seeds, evaluation = _judged(spec, best, seed=config.get("seed", 0), verdict=verdict)
    return Bundle(
        tune_rl_format=FORMAT,
        description=f"best trial of {experiment} ({spec.name})"
                    + ("" if member is None else f", its population's seed {member}"),
        trainable=spec.trainable,
        env=best.config.get("env", spec.env),
        env_config=env_config,
        metric=spec.metric,
        mode=spec.mode,
        budget={"env_steps": spec.budget_env_steps},
        stop_at=spec.stop_at,
        config=_plain(config),
        resolved=_plain(record.resolved_config({**config, "env": spec.env, "env_config": env_config})),
        seeds=_plain(seeds),
        evaluation=_plain(evaluation),
        result=_plain({**result, "score": best.value, "scope": best.scope}),
        source={"experiment": experiment, "trial_id": best.trial_id, "space": spec.name,
                "space_file": spec.source, "space_sha256": spec.source_sha256, **(origin or {})},
        checkpoint=_checkpoint(best),
        versions=versions(),
    )


def _judged(spec: ExperimentSpec, best: Best, *, seed: Any, verdict: Any) -> tuple[dict, dict[str, Any]]:
    """(seeds, evaluation): the search's seed and a single run's protocol, or the re-evaluation's."""
    seeds = {"search": seed}
    evaluation: dict[str, Any] = {"protocol": f"single run: {spec.metric} at the end of the trial ({best.scope})"}
    if verdict is not None:
        seeds["reevaluation"] = list(verdict.winner.seeds)
        evaluation = _evaluation(spec, verdict)
    return seeds, evaluation


def _checkpoint(best: Best) -> str | None:
    """The trial's newest checkpoint, for `tune-rl evaluate`; None for a best read from MLflow (no trial folder)."""
    from tune_runner.results.analysis import last_checkpoint

    checkpoint = last_checkpoint(best.trial_path) if best.trial_path else None
    return str(checkpoint.resolve()) if checkpoint else None


def _evaluation(spec: ExperimentSpec, verdict: Any) -> dict[str, Any]:
    """How the re-evaluation judged the winner. With stop_at, `ranked_by` says the ranking was by solved
    share, then the IQM of env steps to solve; `summary`, `solved`, `steps`, `steps_iqm` and `steps_ci` hold
    it (what `tune-rl verify` checks). `iqm`, `ci` and `returns` are the final metric's, as always."""
    from tune_runner.results import robust

    winner, target = verdict.winner, verdict.target
    ranked_by = f"the IQM of the final {spec.metric}"
    if target is not None:
        ranked_by = (f"the share of seeds that reached {spec.metric} {'>=' if spec.mode == 'max' else '<='} "
                     f"{target.label}, then the IQM of env steps to reach it (a seed that did not counts at "
                     f"the budget, {target.budget:,})")
    evaluation: dict[str, Any] = {
        "protocol": f"top {len(verdict.ranked)} configs re-trained on {len(winner.seeds)} fresh seeds with the "
                    f"search's budget; ranked by {ranked_by}; interquartile mean with a percentile-bootstrap "
                    f"{robust.CONFIDENCE:.0%} CI ({robust.BOOTSTRAP_RESAMPLES} resamples, seed 0)",
        "ranked_by": ranked_by}
    if target is not None:
        evaluation.update(summary=robust.headline(winner, target), solved=list(winner.solved),
                          steps=list(winner.steps), steps_iqm=winner.steps_iqm, steps_ci=list(winner.steps_ci))
    evaluation.update(iqm=winner.iqm, ci=list(winner.ci), returns=list(winner.returns), clear_winner=verdict.clear,
                      verdict=verdict.sentence(), ranking=[_ranking_row(e, target) for e in verdict.ranked])
    return evaluation


def _ranking_row(evaluated: Any, target: Any) -> dict[str, Any]:
    from tune_runner.results.robust import headline

    row = {"trial_id": evaluated.candidate.trial_id, "iqm": evaluated.iqm, "ci": list(evaluated.ci)}
    if target is not None:
        row.update(summary=headline(evaluated, target), solved=sum(evaluated.solved), seeds=len(evaluated.solved),
                   steps_iqm=evaluated.steps_iqm, steps_ci=list(evaluated.steps_ci))
    return row


def versions() -> dict[str, str | None]:
    """tune-rl, Ray, torch and gymnasium versions, and our git commit when running from a checkout."""
    import subprocess
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in ("tune-rl", "ray", "torch", "gymnasium"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                                text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    found["git_commit"] = commit or None
    return found


def load(path: Path, *, overrides: dict[str, Any] | None = None) -> ExperimentSpec:
    """An exported bundle as a one-trial spec: every value fixed, nothing searched."""
    return Bundle.read(path).spec(overrides=overrides)


def _plain(value: Any) -> Any:
    """YAML-safe plain data: tuples → lists, numpy scalars → Python numbers."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    return value
