"""`tune-rl verify best.yaml`: re-train an exported config on fresh seeds and check the bundle's claim.

A bundle exported after a re-evaluation claims one of two things (tune_runner.results.export):

- with `stop_at` (`evaluation.steps_ci`): `solved 3/3 seeds, IQM 96k env steps to 475 [95% CI 88k,
  110k]`. It holds when the new seeds solve at least as large a share and the new IQM of env steps to
  solve (a seed that did not solve counts at the budget) lies inside that CI;
- otherwise, or in a bundle written before the ranking by steps: the final metric's IQM and CI. It holds
  when the new IQM of the final metric lies inside that CI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tune_runner.errors import ExitStatus, UserError
from tune_runner.results import robust
from tune_runner.results.bundle import Bundle
from tune_runner.spec.experiment import ExperimentSpec
from tune_runner.tuning import reevaluate


@dataclass(frozen=True)
class Claim:
    """What a bundle says its config does: a CI of the final metric's IQM, or with `solved` (a stop_at
    bundle) how many of how many seeds solved and a CI of the IQM of env steps to solve."""

    ci: tuple[float, float]
    solved: tuple[int, int] | None = None
    steps_iqm: float | None = None
    stop_at: float | None = None

    def text(self) -> str:
        low, high = self.ci
        if self.solved is None:
            return f"the bundle's CI is [{low:.1f}, {high:.1f}]"
        return (f"the bundle's: solved {self.solved[0]}/{self.solved[1]} seeds, IQM "
                f"{robust.fmt_steps(self.steps_iqm or 0.0)} env steps to {self.stop_at:g} "
                f"[{robust.CONFIDENCE:.0%} CI {robust.fmt_steps(low)}, {robust.fmt_steps(high)}]")


def _pair(value: object) -> tuple[float, float] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1])
    return None


def claim(bundle: Bundle) -> Claim:
    """The claim of a bundle's `evaluation`; a UserError naming the key when there is none to check."""
    where, evaluation = str(bundle.path), bundle.evaluation or {}
    if "steps_ci" in evaluation and bundle.stop_at is not None:
        ci, solved = _pair(evaluation.get("steps_ci")), evaluation.get("solved")
        if ci is None:
            raise UserError(f"{where}: evaluation.steps_ci: expected [low, high] env steps, got "
                            f"{evaluation.get('steps_ci')!r}; export the bundle again")
        if not (isinstance(solved, list) and solved and all(isinstance(s, bool) for s in solved)):
            raise UserError(f"{where}: evaluation.solved: expected a list of true/false per seed, got {solved!r}; "
                            f"export the bundle again")
        steps_iqm = evaluation.get("steps_iqm")
        return Claim(ci, (sum(solved), len(solved)), float(steps_iqm) if isinstance(steps_iqm, (int, float))
                     else sum(ci) / 2, float(bundle.stop_at))
    ci = _pair(evaluation.get("ci"))
    if ci is None and evaluation.get("ci") is not None:
        raise UserError(f"{where}: evaluation.ci: expected [low, high], got {evaluation['ci']!r}; "
                        f"export the bundle again")
    if ci is None:
        raise UserError(f"{where}: evaluation.ci: missing; verify needs a bundle exported after a "
                        f"re-evaluation (tune-rl best EXP --reevaluate K --export FILE)")
    return Claim(ci)


def judge(said: Claim, again: robust.Evaluated) -> tuple[bool, str]:
    """Whether the re-run `again` bears the claim out, and the line that says so with both sets of numbers."""
    seeds = robust.seed_span(again.seeds)
    low, high = said.ci
    if said.solved is None:
        inside = bool(again.seeds) and low <= again.iqm <= high
        return inside, (f"IQM {again.iqm:.1f} over seeds {seeds} (returns "
                        f"{', '.join(f'{r:.1f}' for r in again.returns)}); {said.text()}: "
                        f"{'inside, the config holds' if inside else 'OUTSIDE, the config does not reproduce'}")
    target = robust.Target(float(said.stop_at or 0.0), 0)
    solved, of = said.solved
    enough = bool(again.solved) and sum(again.solved) * of >= solved * len(again.solved)
    inside = bool(again.seeds) and low <= again.steps_iqm <= high
    problems = ([] if enough else [f"FEWER seeds solved ({again.solved_text} vs {solved}/{of})"]) + \
        ([] if inside else ["the IQM is OUTSIDE the CI"])
    verdict = ("as large a share solved and the IQM inside the CI, the config holds" if not problems
               else f"{' and '.join(problems)}, the config does not reproduce")
    steps = ", ".join(robust.fmt_steps(s) for s in again.steps)
    return not problems, (f"{robust.headline(again, target)} over seeds {seeds} (env steps {steps}); "
                          f"{said.text()}: {verdict}")


@dataclass(frozen=True)
class Check:
    """A bundle read for verify: the one-trial spec, its config as a candidate, its claim, the first new seed."""

    spec: ExperimentSpec
    pick: robust.Candidate
    said: Claim
    first_seed: int


def load(path: Path) -> Check:
    """Read and check a bundle before anything starts (bad input is a UserError naming the key)."""
    bundle = Bundle.read(path)
    spec = bundle.spec()
    said = claim(bundle)
    reevaluation = (bundle.seeds or {}).get("reevaluation") or []
    if not isinstance(reevaluation, list):
        raise UserError(f"{path}: seeds.reevaluation: expected a list of seeds, got {reevaluation!r}; "
                        f"export the bundle again")
    used = [s for s in reevaluation if isinstance(s, int)]
    source, evaluation = bundle.source or {}, bundle.evaluation or {}
    score = evaluation.get("iqm", 0)
    pick = robust.Candidate(str(source.get("trial_id", "bundle")), dict(spec.fixed),
                            float(score) if isinstance(score, (int, float)) else 0.0)
    return Check(spec, pick, said, max(used, default=reevaluate.SEED_BASE - 1) + 1)


def run(bundle: Check, *, seeds: int, storage: Path, out: TextIO) -> ExitStatus:
    """Re-train the bundle's config on `seeds` seeds it has not seen (on the Ray already up) and judge it."""
    from datetime import datetime

    from tune_runner.trainables.catalog import backend

    # A bundle names its trainable; this is where `tune-rl verify` resolves it, once.
    verdict = reevaluate.reevaluate(bundle.spec, [bundle.pick], record=backend(bundle.spec.trainable), seeds=seeds,
                                    storage=storage, name=f"verify-{bundle.spec.name}-{datetime.now():%Y%m%d-%H%M%S}",
                                    out=out, first_seed=bundle.first_seed)
    holds, line = judge(bundle.said, verdict.winner)
    print(f"verify     {line}", file=out)
    return ExitStatus.OK if holds else ExitStatus.ERROR
