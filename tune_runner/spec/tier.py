"""Which tier a shipped space is tested in (issue 45), and what it is measured against.

A space file says `tier: quick` (the default) or `tier: slow`:

- **quick**: the suite runs it exactly as shipped (tests/test_shipped_e2e.py).
- **slow**: its as-shipped search does not fit the suite (LunarLander, MuJoCo, a DQN that needs 100k env
  steps). CI runs it at its `smoke:` budget, which proves the pipeline (every trial finishes, the export
  re-runs, load_policy and the MLflow model act alike); `make shipped` runs it as shipped and records the row
  in bench/SHIPPED.md at a commit of the history (bench/shipped.py), and a test fails when a slow space has
  no row, or only one older than the last change to its file.

`reference:` names the published result the space is measured against (rl-baselines3-zoo's benchmark table:
algo, env, its env steps, its mean reward, where it is from); bench/SHIPPED.md prints it beside ours.
Light on purpose: the spec layer reads it before anything is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tune_runner.errors import UserError
from tune_runner.spec.search_space import _short

TIERS = ("quick", "slow")
REFERENCE_KEYS = {"algo": str, "env": str, "env_steps": int, "mean_reward": (int, float), "source": str}
SMOKE_KEYS = ("budget", "num_samples")


@dataclass(frozen=True)
class Tier:
    """A space's tier, its smoke settings (slow only: {budget: env steps, num_samples: n}) and its reference."""

    name: str = "quick"
    smoke: dict | None = None
    reference: dict | None = None

    def as_dict(self) -> dict[str, Any]:
        """The keys a saved spec holds, only where they differ from a quick space without a reference."""
        out: dict[str, Any] = {"tier": self.name} if self.name != "quick" else {}
        if self.smoke is not None:
            out["smoke"] = dict(self.smoke)
        if self.reference is not None:
            out["reference"] = dict(self.reference)
        return out


def read_tier(raw: dict, where: str) -> Tier:
    """`tier`, `smoke` and `reference` of a space file, each checked, each error one line naming the key."""
    name = raw.get("tier", "quick")
    if name not in TIERS:
        raise UserError(f"{where}: tier: expected quick or slow, got {_short(name)}")
    smoke = raw.get("smoke")
    if name == "slow" and smoke is None:
        raise UserError(f"{where}: smoke: missing; a slow space names the budget CI runs it at, e.g. "
                        f"smoke: {{budget: 20000, num_samples: 2}}")
    if smoke is not None:
        smoke = _smoke(smoke, where, slow=name == "slow")
    reference = raw.get("reference")
    if reference is not None:
        reference = _reference(reference, where)
    return Tier(name, smoke, reference)


def _smoke(value: Any, where: str, *, slow: bool) -> dict:
    if not slow:
        raise UserError(f"{where}: smoke: only a slow space has a smoke budget (a quick one runs as shipped in "
                        f"the suite); drop smoke:, or set tier: slow")
    if not isinstance(value, dict) or set(value) != set(SMOKE_KEYS) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value.values()):
        raise UserError(f"{where}: smoke: expected {{budget: ENV_STEPS, num_samples: N}} (positive integers), "
                        f"got {_short(value)}")
    return dict(value)


def _reference(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{where}: reference: expected a mapping {{algo, env, env_steps, mean_reward, source}}, "
                        f"got {_short(value)}")
    for key, kind in REFERENCE_KEYS.items():
        got = value.get(key)
        if not isinstance(got, kind) or isinstance(got, bool):
            raise UserError(f"{where}: reference.{key}: expected {_kind(kind)}, got {_short(got)}; the reference "
                            f"names {', '.join(REFERENCE_KEYS)} (rl-baselines3-zoo's benchmark table)")
    extra = sorted(set(value) - set(REFERENCE_KEYS))
    if extra:
        raise UserError(f"{where}: reference.{extra[0]}: unknown key; the reference names "
                        f"{', '.join(REFERENCE_KEYS)}")
    return dict(value)


def _kind(kind: type | tuple[type, ...]) -> str:
    return "a number" if isinstance(kind, tuple) else {"str": "a text", "int": "a whole number"}[kind.__name__]
