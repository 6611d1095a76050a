"""Space files and flags → one validated experiment spec.

This is the only module that reads a space file. Everything downstream takes an
`ExperimentSpec` and never sees raw YAML or argparse namespaces. The top level's keys and the readers of its values
are tune_runner.spec.top_level's.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tune_runner import paths
from tune_runner.errors import NotFound, UserError, unknown_name
from tune_runner.files import DuplicateKeyError, load_yaml_text, read_yaml_mapping
from tune_runner.spec import reserved, seed_keys
from tune_runner.spec.places import check_places, drop_replaced
from tune_runner.spec.search_space import Param, _short, parse_space
from tune_runner.spec.tier import Tier, read_tier
from tune_runner.spec.top_level import (
    TOP_KEYS,
    budget_steps,
    check_top_keys,
    choice,
    flag_setting,
    number_setting,
    plugin_paths,
    positive_int,
    reevaluate_setting,
    typed,
)

MERGED = ("fixed", "space", "env_config")  # a backend section adds to these; other keys replace
WINDOW_KEY, DEFAULT_WINDOW = "metrics_num_episodes_for_smoothing", 100  # the episodes a return is the mean of


@dataclass(frozen=True)
class Component:
    """A searcher or scheduler: a registered name plus inline settings."""

    name: str
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ExperimentSpec:
    """Everything a search needs, validated. Treat the dict fields as read-only."""

    name: str
    source: str
    description: str
    trainable: str
    env: str
    env_config: dict
    metric: str
    mode: str
    budget_env_steps: int
    searcher: Component
    scheduler: Component
    num_samples: int
    max_concurrent: int | None
    fixed: dict
    space: tuple[Param, ...]
    source_sha256: str = ""
    stop_at: float | None = None
    reevaluate: bool | dict = True
    plugins: tuple[str, ...] = ()
    """Plugin files (absolute) that register this search's envs, models and agents; every trial imports them."""
    discover_plugins: bool = True
    """Whether the working folder's envs/ is imported unasked; false with `plugins: false` or --no-plugins."""
    seeds_per_trial: int = 1
    """Seeds of its config each trial trains as one batched learner (tune_runner.spec.seed_keys)."""
    seed_aggregate: str = seed_keys.DEFAULT_AGGREGATE
    tier: Tier = Tier()
    """Which tier of tests the space is in (quick: as shipped in the suite; slow: a smoke run there, as shipped
    by `make shipped` into bench/SHIPPED.md), and the published result it is measured against."""
    configs_per_trial: int = 1
    """Configs of the searcher each trial trains as one batched learner, each of seeds_per_trial seeds
    (tune_runner.tuning.population); the member is then the unit of search, the trial the unit of compute."""
    refill: bool = True
    """With configs_per_trial > 1: a member that ends (stopped, solved, at its budget) hands its slot to a fresh
    config of the searcher at once, until num_samples configs have started; false: a trial's members end together."""
    stop_at_note: str = ""
    """Where stop_at came from when `--set env=` moved the search off the space's env (retarget_stop_at); not saved."""

    def reached(self, result: dict) -> bool:
        """Whether a result meets `stop_at` (at or above it for max, at or below for min), over a full window
        of episodes where the result counts them (`episodes`, lifetime: the fewest of a trial's seeds).

        The return is the mean of the last `metrics_num_episodes_for_smoothing` finished episodes; before
        that many have finished it is the mean of the few that have, and where an episode ends early on
        success (MountainCar, Acrobot, a landing) those few are the successes: ppo_pendulum's stop_at moved to
        MountainCarContinuous-v0 was "solved" at the first result, 4,095 env steps, by one lucky episode."""
        value = result.get(self.metric)
        if self.stop_at is None or not isinstance(value, (int, float)) or value != value:
            return False
        if not (value >= self.stop_at if self.mode == "max" else value <= self.stop_at):
            return False
        episodes = result.get("episodes")  # a NaN (a pandas row without it) counts as not given
        return not isinstance(episodes, (int, float)) or episodes != episodes or episodes >= self.episode_window(result)

    def episode_window(self, result: dict) -> int:
        """How many finished episodes a trial's return is the mean of: its config's (Tune hands the config back
        with each result), else the space's fixed value, else our learners' and RLlib's default (100)."""
        window = (result.get("config") or {}).get(WINDOW_KEY, self.fixed.get(WINDOW_KEY, DEFAULT_WINDOW))
        return int(window) if isinstance(window, (int, float)) and window >= 1 else DEFAULT_WINDOW

    def ending(self, result: dict) -> str:
        """How a finished trial ended: `done` (full budget), `solved` (stop_at) or `stopped_early`."""
        if self.reached(result):
            return "solved"
        return "done" if int(result.get("env_steps", 0)) >= self.budget_of(result) else "stopped_early"

    def budget_of(self, result: dict) -> int:
        """A trial's env-step budget: the space's, or the smaller one a multi-fidelity searcher (smac) put in
        its config, which Tune hands back with each result."""
        own = (result.get("config") or {}).get(reserved.BUDGET_KEY)
        return self.budget_env_steps if own is None else min(int(own), self.budget_env_steps)

    @property
    def searched(self) -> tuple[str, ...]:
        """Names of the searched hyperparameters, in file order."""
        return tuple(p.name for p in self.space)

    @property
    def num_trials(self) -> int:
        """Trials Tune will run: num_samples times every grid's size."""
        total = self.num_samples
        for param in self.space:
            if param.dist == "grid":
                total *= len(param.args)
        return total

    @property
    def conditional(self) -> bool:
        """Whether some searched parameter has a condition (`when:`)."""
        return any(p.when for p in self.space)

    def param_space(self, *, searched: bool = True) -> dict:
        """Ray Tune's `param_space`: env, env_config, fixed values and search domains; without the domains
        (`searched=False`) where the searcher holds the space itself (a conditional one)."""
        space = {"env": self.env, "env_config": copy.deepcopy(self.env_config)}
        space.update(copy.deepcopy(self.fixed))
        if searched:
            space.update({p.name: p.to_tune() for p in self.space})
        if self.plugins:
            space[reserved.PLUGINS_KEY] = list(self.plugins)
        if self.seeds_per_trial > 1:  # a one-seed search's trial configs stay as they were
            space.update({reserved.SEEDS_KEY: self.seeds_per_trial, reserved.AGGREGATE_KEY: self.seed_aggregate})
        if self.configs_per_trial > 1:
            space[reserved.MEMBERS_KEY] = self.configs_per_trial
        return space

    def as_dict(self) -> dict:
        """The spec as plain data (YAML/JSON-safe), e.g. to store beside the results; the seed settings only
        where they differ from one seed (a one-seed search's saved spec is as it always was)."""
        seeds = {reserved.SEEDS_KEY: self.seeds_per_trial, reserved.AGGREGATE_KEY: self.seed_aggregate} \
            if self.seeds_per_trial > 1 else {}
        if self.configs_per_trial > 1:
            seeds.update({reserved.MEMBERS_KEY: self.configs_per_trial, reserved.REFILL_KEY: self.refill})
        return {
            "name": self.name, "source": self.source, "source_sha256": self.source_sha256,
            "description": self.description, "trainable": self.trainable, "env": self.env,
            # a searched env_config key is each trial's own: the saved spec names it once, in space (spec/places.py)
            "env_config": {k: v for k, v in self.env_config.items() if reserved.PREFIX + k not in self.searched},
            "metric": self.metric, "mode": self.mode,
            "budget": {"env_steps": self.budget_env_steps}, "stop_at": self.stop_at,
            "searcher": {"name": self.searcher.name, **self.searcher.settings},
            "scheduler": {"name": self.scheduler.name, **self.scheduler.settings},
            "num_samples": self.num_samples, "max_concurrent": self.max_concurrent,
            "reevaluate": self.reevaluate, "fixed": self.fixed,
            "plugins": list(self.plugins) if self.plugins or self.discover_plugins else False,
            "space": {p.name: p.as_raw() for p in self.space},
            **seeds, **self.tier.as_dict(),
        }

    def trials_text(self) -> str:
        """How much the search trains: `8 trial(s) x 250,000 env steps`, or with seeds per trial `8 trial(s) of 3
        seeds (iqm) x 250,000 env steps` (each seed takes the budget). A population search counts configs, which
        its trials hold B at a time: `12 configs, 4 per trial x 8,000 env steps` (num_samples is configs there)."""
        seeds = f" of {self.seeds_per_trial} seeds ({self.seed_aggregate})" if self.seeds_per_trial > 1 else ""
        if self.configs_per_trial > 1:
            refill = "" if self.refill else " (no refill)"
            return (f"{self.num_trials} configs{seeds}, {self.configs_per_trial} per trial{refill} x "
                    f"{self.budget_env_steps:,} env steps")
        return f"{self.num_trials} trial(s){seeds} x {self.budget_env_steps:,} env steps"

    def with_overrides(self, **changes: Any) -> ExperimentSpec:
        """A copy with some fields replaced (used by the CLI's plain flags)."""
        return replace(self, **changes)


def shipped_spaces() -> dict[str, Path]:
    """Shipped space names → files."""
    return {p.stem: p for p in sorted(paths.shipped("search_spaces").glob("*.yaml"))}


def resolve_space(ref: str) -> Path:
    """A shipped space name or a path to a user's YAML file."""
    path = Path(ref).expanduser()
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in ref:
        if path.is_dir():
            raise UserError(f"--space {ref}: a folder, expected a YAML file; give one of its .yaml files")
        if not path.exists():  # a pipe or an unreadable file: read says what it is
            raise NotFound(f"--space {ref}: no such file; give a path to a YAML file "
                            f"or a shipped space name (tune-rl spaces list)")
        return path
    spaces = shipped_spaces()
    if ref not in spaces:
        raise NotFound(f"--space: {unknown_name('space', ref, spaces)}")
    return spaces[ref]


def load_spec(ref: str, *, overrides: Iterable[str] = ()) -> ExperimentSpec:
    """Load a space by name or path, apply `--set key=value` overrides, validate."""
    path = resolve_space(ref)
    raw = read_yaml_mapping(path, expected="a mapping of settings at the top level")
    check_places(raw, where=str(path))
    overrides = list(overrides)
    chosen, set_keys = raw.get("trainable"), set()
    for item in overrides:
        key, value = parse_override(item)
        chosen = value if key == "trainable" else chosen
        set_keys.add(key)
    check_other_backends(raw, chosen, name=path.stem, where=str(path))
    raw = apply_backend(raw, chosen, where=str(path))
    target = (raw.get("env"), raw.get("stop_at"))
    for item in overrides:
        apply_override(raw, item)
    note = retarget_stop_at(raw, target, set_keys=set_keys)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    spec = build_spec(raw, name=path.stem, source=str(path), sha256=digest)
    return replace(spec, stop_at_note=note) if note else spec


def retarget_stop_at(raw: dict, target: tuple[Any, Any], *, set_keys: set[str], owner: str = "space") -> str:
    """A space's `stop_at` is a return on its own env: with `--set env=` another env (and no `--set stop_at=`),
    the new env's own bar, gymnasium's `reward_threshold` (MountainCarContinuous-v0: 90), or none. Returns the
    note the search's header prints, or ""."""
    env, stop_at = target
    if "env" not in set_keys or "stop_at" in set_keys or stop_at is None or raw.get("env") == env:
        return ""
    threshold = None
    if raw.get("metric", "episode_return_mean") == "episode_return_mean" and raw.get("mode", "max") == "max":
        threshold = env_reward_threshold(str(raw.get("env")))
    raw["stop_at"] = threshold
    was = f"the {owner}'s stop_at {stop_at:g} was for {env}" if isinstance(stop_at, (int, float)) else \
        f"the {owner}'s stop_at was for {env}"
    if threshold is None:
        return f"no stop_at: {was} and {raw.get('env')} has no reward_threshold (--set stop_at=VALUE for one)"
    return f"{raw.get('env')}'s reward_threshold; {was}"


def env_reward_threshold(env_id: str) -> float | None:
    """gymnasium's `reward_threshold` for a registered id (the return its authors call solved), else None."""
    try:
        import gymnasium

        threshold = gymnasium.spec(env_id).reward_threshold
    except Exception:  # noqa: BLE001 - not a gymnasium id (a Ray-registered or plug-in env): no bar
        return None
    return float(threshold) if isinstance(threshold, (int, float)) else None


def check_other_backends(raw: dict, trainable: Any, *, name: str, where: str) -> None:
    """Validate the space as each backend section not chosen would make it: a value is checked wherever it stands,
    not only once its trainable is chosen. An error names the section: `s.yaml: backends.rllib/PPO: ...`."""
    sections = raw.get("backends")
    if not isinstance(sections, dict):
        return  # apply_backend says what is wrong with it
    for other in sections:
        if other != trainable:
            section = f"{where}: backends.{other}"
            build_spec(apply_backend(copy.deepcopy(raw), other, where=where), name=name, source=section)


def apply_backend(raw: dict, trainable: Any, *, where: str) -> dict:
    """Merge the `backends:` section for the chosen trainable into the space (then drop the section).

        trainable: ppo
        fixed: {num_envs_per_env_runner: 32}
        backends:
          rllib/PPO: {budget: {env_steps: 50000}, fixed: {num_envs_per_env_runner: 8}}

    The section's values replace the top level's wherever they stand: a key it fixes is no longer searched, a key
    it searches no longer fixed, an env_config key it sets no longer fixed as env_config.KEY (spec.places; within
    one section, as within the top level, a value is given once).
    """
    sections = raw.pop("backends", None)
    if sections is None:
        return raw
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        raise UserError(f"{where}: backends: expected a mapping of trainable name: {{settings}}, "
                        f"got {_short(sections)}")
    section = sections.get(trainable) or {}
    merged = copy.deepcopy(raw)
    for key in section:
        if key not in TOP_KEYS or key in ("trainable", "backends"):
            raise UserError(f"{where}: backends.{trainable}.{key}: not allowed in a backend section")
    drop_replaced(merged, section)  # a value fixed for this backend is no longer searched, and the other way round
    for key, value in section.items():
        if key in MERGED and isinstance(value, dict) and isinstance(merged.get(key, {}), dict):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


def parse_override(item: str) -> tuple[str, Any]:
    """`key=value` → (key, value), the value read as YAML with lenient numbers."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {item}: expected KEY=VALUE, e.g. --set lr=3.0e-4")
    return key.strip(), parse_value(text)


def parse_value(text: str) -> Any:
    """A flag value: numbers first (so `1e-5` is a float here), then YAML."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        return load_yaml_text(text)
    except DuplicateKeyError as exc:
        raise UserError(f"{text}: {exc}") from None
    except yaml.YAMLError:
        return text


def apply_override(raw: dict, item: str) -> None:
    """Apply one `--set`: budget, a top-level setting, env_config.X, or a fixed value.

    Setting a searched hyperparameter (or a searched env_config.X) pins it: it leaves the space.
    """
    key, value = parse_override(item)
    if key in ("budget", "budget.env_steps"):
        raw["budget"] = {"env_steps": value}
    elif key.startswith(reserved.PREFIX):
        raw.setdefault("env_config", {})
        if isinstance(raw["env_config"], dict):
            raw["env_config"][key.removeprefix(reserved.PREFIX)] = value
        for section in ("space", "fixed"):  # the --set value replaces the file's, wherever that stands
            if isinstance(raw.get(section), dict):
                raw[section].pop(key, None)
    elif key in TOP_KEYS and key not in ("fixed", "space", "env_config"):
        raw[key] = value
    else:
        space = raw.get("space")
        if isinstance(space, dict):
            space.pop(key, None)
        fixed = raw.setdefault("fixed", {})
        if not isinstance(fixed, dict):
            raise UserError(f"--set {item}: cannot apply, 'fixed' in the space file is not a mapping")
        fixed[key] = value


def build_spec(raw: dict, *, name: str, source: str, sha256: str = "") -> ExperimentSpec:
    """Validate a parsed space mapping into an ExperimentSpec."""
    where = source
    check_top_keys(raw, where=where)
    check_places(raw, where=where)
    mode = typed(raw, "mode", str, where, default="max")
    if mode not in ("max", "min"):
        raise UserError(f"{where}: mode: must be 'max' or 'min', got {mode!r}")
    fixed = typed(raw, "fixed", dict, where, default={})
    space = parse_space(raw.get("space"), where=where, fixed=fixed)
    for key in TOP_KEYS:  # a setting of the search, not of the trainable: read at the top level only
        if key in fixed or key in {p.name for p in space}:
            search = "; search one of its keys as space: {env_config.NAME: {choice: [...]}}" \
                if key == "env_config" else ""
            section = "fixed" if key in fixed else "space"
            raise UserError(f"{where}: {section}.{key}: set it at the top level of the file, not under "
                            f"fixed/space{search}")
    return ExperimentSpec(
        name=name, source=source, source_sha256=sha256,
        description=typed(raw, "description", str, where, default=""),
        trainable=typed(raw, "trainable", str, where),
        env=typed(raw, "env", str, where),
        env_config=typed(raw, "env_config", dict, where, default={}),
        metric=typed(raw, "metric", str, where, default="episode_return_mean"),
        mode=mode,
        budget_env_steps=budget_steps(raw["budget"], where),
        stop_at=number_setting(raw, "stop_at", where),
        searcher=_component(raw, "searcher", where, default="random"),
        scheduler=_component(raw, "scheduler", where, default="fifo"),
        num_samples=positive_int(raw, "num_samples", where, default=1),
        max_concurrent=positive_int(raw, "max_concurrent", where, default=None),
        seeds_per_trial=positive_int(raw, reserved.SEEDS_KEY, where, default=1),
        seed_aggregate=choice(raw, reserved.AGGREGATE_KEY, seed_keys.AGGREGATES, where),
        configs_per_trial=positive_int(raw, reserved.MEMBERS_KEY, where, default=1),
        refill=flag_setting(raw, reserved.REFILL_KEY, where, default=True),
        fixed=fixed,
        space=space,
        reevaluate=reevaluate_setting(raw.get("reevaluate", True), where),
        plugins=plugin_paths(raw.get("plugins", []), where) or (),
        discover_plugins=raw.get("plugins") is not False,
        tier=read_tier(raw, where),
    )


def _component(raw: dict, key: str, where: str, *, default: str) -> Component:
    value = raw.get(key, default)
    if isinstance(value, str):
        return Component(value, {})
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        settings = {k: v for k, v in value.items() if k != "name"}
        return Component(value["name"], settings)
    raise UserError(f"{where}: {key}: expected a name like 'asha' or a mapping "
                    f"{{name: asha, grace_period: ...}}, got {_short(value)}")
