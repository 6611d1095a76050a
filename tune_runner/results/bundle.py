"""best.yaml, the exported best config, as a frozen `Bundle`: `Bundle.read(path)` is its one reader (every
key known and of its type, each wrong one named with its value) and `bundle.write(path)` its one writer
(atomic, fsynced). tune_runner.results.export builds one from a search; train, verify and evaluate read one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tune_runner.errors import UserError
from tune_runner.files import read_yaml_mapping, short, write_atomically
from tune_runner.spec.experiment import Component, ExperimentSpec
from tune_runner.spec.top_level import budget_steps, number_setting

FORMAT = 1
# Every key of a bundle, in the order a new one is written (its fields below, in that order).
KEYS = ("tune_rl_format", "description", "trainable", "env", "env_config", "metric", "mode", "budget",
        "stop_at", "config", "resolved", "seeds", "evaluation", "result", "source", "checkpoint", "versions")
EXPECTED = "a best-config bundle (a YAML mapping written by tune-rl best EXPERIMENT --export FILE)"
UNMARKED = ("not a tune-rl best-config export (no tune_rl_format key); create one with tune-rl best EXPERIMENT "
            "--export FILE")
TYPES: dict[str, tuple[type, ...]] = {
    "trainable": (str,), "env": (str,), "env_config": (dict, type(None)), "description": (str, type(None)),
    "metric": (str,), "mode": (str,), "config": (dict,), "seeds": (dict, type(None)),
    "evaluation": (dict, type(None)), "result": (dict, type(None)), "source": (dict, type(None)),
    "checkpoint": (str, type(None)), "resolved": (dict, type(None)), "versions": (dict, type(None))}


@dataclass(frozen=True)
class Bundle:
    """What to run (trainable, env, config and what the trainable resolved from it), how it was judged (seeds,
    evaluation, result) and where it came from (source, checkpoint, versions). A key a file lacks (an older
    tune-rl's) is None here and stays out of `keys`, so the bundle writes back as it was read."""

    tune_rl_format: int = FORMAT
    description: str | None = None
    trainable: str | None = None
    env: str | None = None
    env_config: dict[str, Any] | None = None
    metric: str | None = None
    mode: str | None = None
    budget: Any = None  # {env_steps: N}; checked when the bundle becomes a spec, with the space file's messages
    stop_at: Any = None
    config: dict[str, Any] | None = None
    resolved: dict[str, Any] | None = None
    seeds: dict[str, Any] | None = None
    evaluation: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    source: dict[str, Any] | None = None
    checkpoint: str | None = None
    versions: dict[str, Any] | None = None
    keys: tuple[str, ...] = KEYS  # the keys the file holds, in its order
    path: Path | None = dataclasses.field(default=None, compare=False)  # where it was read from

    @classmethod
    def read(cls, path: Path, *, unmarked: str = UNMARKED) -> Bundle:
        """The bundle in `path`, checked; `unmarked` is what to say of a YAML mapping without tune_rl_format."""
        raw = read_yaml_mapping(path, expected=EXPECTED)
        if "tune_rl_format" not in raw:
            raise UserError(f"{path}: {unmarked}")
        _check(raw, path)
        return cls(**raw, keys=tuple(raw), path=path)

    def as_dict(self) -> dict[str, Any]:
        """The bundle as the YAML mapping it is written as."""
        return {key: getattr(self, key) for key in self.keys}

    def write(self, path: Path) -> Path:
        """Write the bundle to `path` (a crash or a full disk leaves no half-written file); its resolved path."""
        path = path.expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(self.as_dict(), sort_keys=False, default_flow_style=False)
        write_atomically(path, text.encode("utf-8"), what="best-config bundle",
                         fix="free disk space or export it elsewhere")
        return path

    def spec(self, *, overrides: dict[str, Any] | None = None) -> ExperimentSpec:
        """The bundle as a one-trial spec: every value fixed (`overrides` on top), nothing searched."""
        where = str(self.path)
        for key in ("trainable", "env", "config", "budget"):
            if key not in self.keys:
                raise UserError(f"{where}: {key}: missing")
        budget = budget_steps(self.budget, where)
        source = self.source or {}
        return ExperimentSpec(
            name=str(source.get("space") or Path(where).stem), source=where, description=str(self.description or ""),
            trainable=str(self.trainable), env=str(self.env), env_config=dict(self.env_config or {}),
            metric=str(self.metric or "episode_return_mean"), mode=str(self.mode or "max"),
            budget_env_steps=budget, searcher=Component("random"), scheduler=Component("fifo"), num_samples=1,
            max_concurrent=None, fixed={**(self.config or {}), **(overrides or {})}, space=(),
            stop_at=number_setting(self.as_dict(), "stop_at", where))


def _check(raw: dict[str, Any], path: Path) -> None:
    """Every key of a bundle known and of its type; the first that is not, named with its value."""
    for key, value in raw.items():
        if key not in KEYS:
            raise UserError(f"{path}: {key}: unknown key in a best-config export")
        kinds = TYPES.get(key)
        if kinds is not None and not isinstance(value, kinds):
            names = " or ".join("null" if k is type(None) else {"dict": "a mapping", "str": "text"}[k.__name__]
                                for k in kinds)
            raise UserError(f"{path}: {key}: expected {names}, got {short(value)}; export the bundle again")
    if raw.get("mode", "max") not in ("max", "min"):
        raise UserError(f"{path}: mode: expected max or min, got {short(raw['mode'])}; export the bundle again")
