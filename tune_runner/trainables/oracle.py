"""`oracle`: a trainable whose return is a known function of its config, for trying searchers and schedulers.

It trains nothing, so a search over it takes seconds, and its best config is known, so a
searcher's or scheduler's choices can be judged. Use it to check a space file's search
setup before paying for real trials (`--set trainable=oracle --set optimum.lr=1e-3`), and
in tests.

Its config: the searched hyperparameters plus

    optimum: {lr: 1.0e-3, gamma: 0.99, activation: tanh}   # the best config (required)
    log_scale: [lr]            # keys whose distance counts in decades
    noise: 0.0                 # std of Gaussian noise on every reported return
    seed_noise: 0.0            # std of a per-run offset fixed by (seed, config): seed luck
    rate: 0.15                 # share of the gap to the config's peak closed per iteration
    steps_per_iteration: 1000  # env steps each iteration reports
    seed: 0
    sleep_s: 0.0               # seconds each iteration takes (to rehearse long trials)

Fault injection, to rehearse what a search does when trials go wrong:

    fail_at: 5000              # raise at this many env steps ...
    fail_once: true            # ... only in a trial's first attempt (a retry from its checkpoint passes)
    nan_at: 5000               # report a NaN loss from this many env steps on

The return approaches `peak(config) = 500 * exp(-distance²)` (distance: the root of the
summed squared differences to `optimum`; a choice counts 1 when it differs) by `rate` of
the remaining gap per iteration, so a better config also rises higher by any given
env-step count, as a schedule's rungs expect. Its state (return level, env steps, RNG and
the hyperparameters in use) is checkpointed, so PBT's exploit carries the level over and,
once the restore applies the trial's own config again, the new config steers it from there.
Reported: `episode_return_mean`, `env_steps`, `peak`, and `applied/<key>` for every
hyperparameter it is using (tune_runner.trainables.audit): the values that steered this step's return.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import tune

from tune_runner.spec import reserved
from tune_runner.trainables.audit import audit_result, node_id

SETTINGS = ("optimum", "log_scale", "noise", "seed_noise", "rate", "steps_per_iteration", "seed",
            "fail_at", "fail_once", "nan_at", "sleep_s")
STATE_FILE = "oracle.json"


def hyperparameters(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's hyperparameters: everything that is not an oracle setting or the env."""
    return reserved.settings({k: v for k, v in config.items() if k not in SETTINGS}, leave_out=reserved.NOT_ORACLE)


def distance(config: Mapping[str, Any]) -> float:
    """How far the config's hyperparameters are from `optimum` (a choice that differs counts 1)."""
    optimum, logs = config.get("optimum") or {}, set(config.get("log_scale") or ())
    total = 0.0
    for key, best in optimum.items():
        value = config.get(key, best)
        if isinstance(best, (int, float)) and not isinstance(best, bool):
            if key in logs:
                total += (math.log10(float(value)) - math.log10(float(best))) ** 2
            else:
                total += (float(value) - float(best)) ** 2
        else:
            total += 0.0 if value == best else 1.0
    return math.sqrt(total)


def peak(config: Mapping[str, Any]) -> float:
    """The return a config converges to: 500 at the optimum, 184 one unit away, toward 0 beyond."""
    return 500.0 * math.exp(-distance(config) ** 2)


def seed_offset(config: Mapping[str, Any]) -> float:
    """A run's luck: an offset drawn once from (seed, hyperparameters), the same in every process."""
    std = float(config.get("seed_noise", 0.0) or 0.0)
    if not std:
        return 0.0
    key = f"{config.get('seed', 0)}:{sorted((k, repr(v)) for k, v in hyperparameters(config).items())}"
    return random.Random(key).gauss(0.0, std)


def check_config(config: Mapping[str, Any]) -> str | None:
    """One line on what is wrong with an oracle config, or None."""
    optimum = config.get("optimum")
    if not isinstance(optimum, Mapping) or not optimum:
        return "optimum: the oracle needs its best config, e.g. optimum: {lr: 1.0e-3}"
    for key in hyperparameters(config):
        if key not in optimum:
            return f"{key}: the oracle has no optimum for it; add optimum.{key}"
    for key in config.get("log_scale") or ():
        for value in (optimum.get(key), config.get(key)):
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                return f"{key}: on log_scale, so it must be a positive number, got {value!r}"
    for key in ("noise", "seed_noise"):
        value = config.get(key, 0.0)
        if not isinstance(value, (int, float)) or value < 0:
            return f"{key} must be a number >= 0, got {value!r}"
    rate = config.get("rate", 0.15)
    if not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        return f"rate must be in (0, 1], got {rate!r}"
    steps = config.get("steps_per_iteration", 1000)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        return f"steps_per_iteration must be a positive whole number, got {steps!r}"
    return None


class Oracle(tune.Trainable):
    """The oracle as a class trainable with exact checkpoints (PBT and resume work on it)."""

    def setup(self, config: dict[str, Any]) -> None:
        self.level, self.env_steps = 0.0, 0
        self.rng = random.Random(int(config.get("seed", 0)))
        self.restored = False
        self.apply(config)
        self.population = OraclePopulation(config, trial_id=getattr(self, "trial_id", None)) \
            if config.get(reserved.MEMBERS_KEY) else None

    def apply(self, config: Mapping[str, Any]) -> None:
        """Take a config's hyperparameters into use (what a real learner does with its optimizer)."""
        self.applied = hyperparameters(config)

    def step(self) -> dict[str, Any]:
        import time

        from tune_runner.trainables.audit import check_finite

        time.sleep(float(self.config.get("sleep_s", 0.0) or 0.0))
        if self.population is not None:
            return self.population.step()
        fail_at = self.config.get("fail_at")
        if fail_at is not None and self.env_steps >= fail_at and not (self.config.get("fail_once") and self.restored):
            raise RuntimeError(f"oracle: injected failure at {self.env_steps:,} env steps")
        self.level, self.env_steps, result = advance(self.level, self.env_steps, self.rng, settings=self.config,
                                                     config={**self.config, **self.applied})
        nan_at = self.config.get("nan_at")
        if nan_at is not None and self.env_steps >= nan_at:
            result["policy_loss"] = math.nan
        check_finite(result)
        import ray

        gpus = ",".join(str(g) for g in ray.get_gpu_ids()) if ray.is_initialized() else ""
        return {**result, **audit_result(self.config, self.applied), "node_id": node_id(), "gpu_ids": gpus,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        from tune_runner.files import write_atomically

        if self.population is not None:
            write_atomically(Path(checkpoint_dir) / STATE_FILE, json.dumps(self.population.get_state()).encode())
            return

        # The hyperparameters in use travel with the state, as a learner's optimizer state carries its lr.
        state = {"level": self.level, "env_steps": self.env_steps, "rng": _rng_to_json(self.rng.getstate()),
                 "applied": self.applied}
        write_atomically(Path(checkpoint_dir) / STATE_FILE, json.dumps(state).encode())

    def load_checkpoint(self, checkpoint: str) -> None:
        state = json.loads((Path(checkpoint) / STATE_FILE).read_text())
        if self.population is not None:
            self.population.set_state(state)
            return
        self.level, self.env_steps = float(state["level"]), int(state["env_steps"])
        self.rng.setstate(_rng_from_json(state["rng"]))
        self.applied = dict(state.get("applied", self.applied))  # the donor's, after PBT's exploit
        self.restored = True
        self.reapply_config()

    def reapply_config(self) -> None:
        """After a restore, use the config Tune gave this trial, not the one the checkpoint came from
        (what our learners do with a restored optimizer's lr). The audit fails a trial that does not."""
        self.apply(self.config)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.config = new_config
        self.setup(new_config)
        return True

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """`cpus_per_trial` / `gpus_per_trial` from the config (1 CPU by default)."""
        from ray.tune.execution.placement_groups import PlacementGroupFactory

        from tune_runner.trainables.trial import trainer_bundle

        return PlacementGroupFactory([trainer_bundle(config)])


class OraclePopulation:
    """The oracle as a population trial (configs_per_trial): one oracle run per member, each as a one-config
    trial of its values would run (its seed: seed_keys.member_seed, as our learners' members' seeds)."""

    def __init__(self, config: Mapping[str, Any], *, trial_id: str | None) -> None:
        from tune_runner.trainables.members import Members

        self.config = dict(config)
        self.members = Members(config, trial_id=trial_id)
        self.runs = [self._fresh(j, slot.values) for j, slot in enumerate(self.members.slots)]

    def _fresh(self, slot: int, values: Mapping[str, Any]) -> dict[str, Any]:
        from tune_runner.spec.seed_keys import member_seed

        config = {k: v for k, v in self.config.items() if k not in reserved.RESERVED}
        config.update(values, seed=member_seed(self.config, slot))
        return {"config": config, "level": 0.0, "env_steps": 0, "rng": random.Random(config["seed"])}

    def replace(self, slot: int, values: Mapping[str, Any]) -> None:
        self.runs[slot] = self._fresh(slot, values)

    def step(self) -> dict[str, Any]:
        from tune_runner.spec.seed_keys import seed_key

        if not self.members.apply(self.members.orders(), self.replace):
            return self.members.final()
        result: dict[str, Any] = {}
        for j, run in enumerate(self.runs):
            run["level"], run["env_steps"], own = advance(run["level"], run["env_steps"], run["rng"],
                                                          settings=run["config"], config=run["config"])
            result.update({seed_key(j, name): value for name, value in own.items()})
        return {**self.members.result(result), "node_id": node_id()}

    def get_state(self) -> dict[str, Any]:
        runs = [{"config": r["config"], "level": r["level"], "env_steps": r["env_steps"],
                 "rng": _rng_to_json(r["rng"].getstate())} for r in self.runs]
        return {"runs": runs, "members": self.members.get_state()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.members.set_state(state["members"])
        self.runs = []
        for saved in state["runs"]:
            rng = random.Random()
            rng.setstate(_rng_from_json(saved["rng"]))
            self.runs.append({"config": saved["config"], "level": float(saved["level"]),
                              "env_steps": int(saved["env_steps"]), "rng": rng})


class OracleStaleRestore(Oracle):
    """`oracle/stale-restore`: the oracle with a classic bug, to see PBT's audit catch it.

    A restore brings back the hyperparameters the checkpoint was saved with, as a restored
    optimizer brings back its old learning rate, and stops there; after PBT's exploit the trial
    keeps training with the donor's values while its config says otherwise. The audit fails it.
    """

    def reapply_config(self) -> None:
        pass


def advance(level: float, env_steps: int, rng: random.Random, *, settings: Mapping[str, Any],
            config: Mapping[str, Any]) -> tuple[float, int, dict[str, Any]]:
    """One oracle iteration: the return level `rate` (of `settings`) closer to `config`'s peak, its env steps on,
    and what it reports (the level with the run's luck and noise)."""
    level += float(settings.get("rate", 0.15)) * (peak(config) - level)
    env_steps += int(settings.get("steps_per_iteration", 1000))
    noise = float(settings.get("noise", 0.0))
    value = level + seed_offset(config) + (rng.gauss(0.0, noise) if noise else 0.0)
    return level, env_steps, {"episode_return_mean": value, "env_steps": env_steps, "peak": peak(config)}


def stateless_oracle(config: dict[str, Any]) -> None:
    """The oracle as a function trainable without checkpoints (as many users' own trainables are)."""
    level, steps = 0.0, 0
    rng = random.Random(int(config.get("seed", 0)))
    while True:
        level, steps, result = advance(level, steps, rng, settings=config, config=config)
        tune.report(result)


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return version, tuple(internal), gauss
