"""PBT's audit: a trial must train with the hyperparameters PBT gave it.

After an exploit, PBT hands a trial a perturbed config and a donor's checkpoint. A
trainable that restores the donor's optimizer or algorithm config along with its weights
silently keeps the donor's values (RLlib users have reported exactly this for PPO's `lr`
and `clip_param`). Every trainable of ours therefore reports, with each result, the value
of each audited hyperparameter that it is actually using (`applied/<key>`, read back from
the live optimizer and learner) beside the one in its config (`requested/<key>`), and
raises `AuditError` when they differ. The runner's callback compares the applied values
with the trial's config as Tune holds it, counts exploits, and reports both.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

# Hyperparameters read back from a live trainable, where it has them.
AUDITED = ("lr", "clip_param", "entropy_coeff", "vf_loss_coeff", "kl_coeff", "gamma", "lambda_", "lambda",
           "num_epochs", "minibatch_size", "target_network_update_freq", "grad_clip")
PREFIX_APPLIED, PREFIX_REQUESTED = "applied/", "requested/"


class AuditError(RuntimeError):
    """A trial trains with other hyperparameters than its config says."""


def is_number(value: Any) -> bool:
    """A real number, NumPy's float32 and int64 included (a user agent's loss is often one); not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def mismatches(requested: Mapping[str, Any], applied: Mapping[str, Any]) -> list[str]:
    """One line per audited key whose applied value differs from the requested one."""
    lines = []
    for key, value in applied.items():
        want = requested.get(key)
        if is_number(want) and is_number(value) and not math.isclose(float(want), float(value),
                                                                     rel_tol=1e-6, abs_tol=1e-12):
            lines.append(f"{key}: config says {want!r}, the trainable uses {value!r}")
    return lines


def audit_result(config: Mapping[str, Any], applied: Mapping[str, Any]) -> dict[str, float]:
    """The audit's result keys for one step; raises AuditError on a mismatch."""
    applied = {k: float(v) for k, v in applied.items() if is_number(v) and is_number(config.get(k))}
    problems = mismatches(config, applied)
    if problems:
        raise AuditError("PBT audit failed: " + "; ".join(problems))
    out = {PREFIX_APPLIED + k: v for k, v in applied.items()}
    out.update({PREFIX_REQUESTED + k: float(config[k]) for k in applied})
    return out


def applied_from_result(result: Mapping[str, Any]) -> dict[str, float]:
    """`applied/<key>` values of a result, keyed by `<key>`."""
    return {k[len(PREFIX_APPLIED):]: v for k, v in result.items() if k.startswith(PREFIX_APPLIED)}


class _Audit:
    """Counts exploits (a trial's config changing under it) and audits every result.

    Tune hands a result to the scheduler before the callbacks, so when PBT exploits on
    result N, the trial's config has already changed by the time this callback sees N.
    Result N was produced with the config seen at result N-1 (or at the trial's start);
    that is what it is audited against. `make_callback` makes it a Tune callback.
    """

    def __init__(self, out: Any) -> None:
        self.out = out
        self.configs: dict[str, dict] = {}
        self.exploits = 0
        self.audited = 0
        self.failures: list[str] = []

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.configs.setdefault(trial.trial_id, dict(trial.config))

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        produced_with = self.configs.get(trial.trial_id, dict(trial.config))
        now = dict(trial.config)
        if {k: v for k, v in now.items() if is_number(v)} != \
                {k: v for k, v in produced_with.items() if is_number(v)}:
            self.exploits += 1
        self.configs[trial.trial_id] = now
        applied = applied_from_result(result)
        if not applied:
            return
        self.audited += 1
        problems = mismatches(produced_with, applied)
        if problems:
            line = f"{trial.trial_id}: PBT audit failed: {'; '.join(problems)}"
            self.failures.append(line)
            print(f"  AUDIT  {line}", file=self.out, flush=True)

    def summary(self) -> str:
        verdict = f"{len(self.failures)} mismatch(es)" if self.failures else "every applied value matched"
        return f"{self.exploits} exploit(s); audit of {self.audited} results: {verdict}"


def make_callback(out: Any) -> Any:
    """A Tune callback that checks every result against the trial's config as Tune holds it."""
    from ray.tune import Callback

    class PBTAudit(_Audit, Callback):
        """The audit as a Tune callback: made here, so that importing this module imports no Ray."""

    return PBTAudit(out)


# Losses and statistics that must stay finite, besides any `loss` / `*_loss` key (a user agent's);
# the return may be NaN before the first episode ends.
FINITE_KEYS = ("policy_loss", "vf_loss", "qf_loss", "total_loss", "entropy", "kl", "td_error_mean")


class NonFiniteError(RuntimeError):
    """A trainable produced NaN or infinity: the trial stops as errored instead of feeding NaN to the searcher."""


def computed(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result without the values its learner did not compute (None), e.g. a user agent's loss
    before its first update: Tune then sees the key missing, as our learners leave it out."""
    return {key: value for key, value in result.items() if value is not None}


def check_finite(result: Mapping[str, Any]) -> None:
    """Raise NonFiniteError naming the first non-finite loss, or an infinite/NaN return after episodes.

    Only computed values are judged: a loss left out (no gradient step this iteration) is fine,
    a NaN that a learner computed is divergence.
    """
    losses = [k for k in result if isinstance(k, str) and (k == "loss" or k.endswith("_loss"))]
    for key in dict.fromkeys([*FINITE_KEYS, *losses]):
        value = result.get(key)
        if is_number(value) and not math.isfinite(value):
            raise NonFiniteError(f"{key} is {value} at {int(result.get('env_steps', 0)):,} env steps; the trial "
                                 f"diverged (try a lower lr or a grad_clip)")
    value = result.get("episode_return_mean")
    if is_number(value) and (math.isinf(value) or (math.isnan(value) and result.get("episodes", 0))):
        raise NonFiniteError(f"episode_return_mean is {value} at {int(result.get('env_steps', 0)):,} env steps "
                             f"after {result.get('episodes')} episodes")


def node_id() -> str:
    """The Ray node this trial runs on (results carry it, so a test or a user can see where trials ran)."""
    import ray

    if not ray.is_initialized():  # outside Ray (tests, notebooks): get_runtime_context would start one
        return ""
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (tests, notebooks)
        return ""
