"""Our own learners (PPO, DQN, ...: tune_runner.algos.records) as Tune trainables: the learners of tune_runner.algos
in a trial.

`num_env_runners: 0` (the default) keeps everything in the trial process. With N > 0 the
trial starts the seeds' architecture inside its placement group (tune_runner.trainables.rollouts):
a parameter server, N rollout workers and, for a learner with replay (DQN), a replay-buffer actor.

Hyperparameters carry RLlib's names; `train_batch_size_per_learner` is read as
`train_batch_size` so one space file serves both backends.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, ClassVar

from ray import tune

from tune_runner.algos.config import ALIASES
from tune_runner.algos.records import LEARNERS, learner_record, ours, spoken
from tune_runner.spec.reserved import AGGREGATE_KEY, MEMBERS_KEY, MIN_TIME_KEY, RUNNERS_KEY, SEEDS_KEY, TASK_FN_KEY
from tune_runner.spec.seed_keys import DEFAULT_AGGREGATE
from tune_runner.trainables import checkpoints
from tune_runner.trainables.agents import build_learner
from tune_runner.trainables.checkpoints import CHECKPOINT_FILE  # noqa: F401 - where tests and tools look for it
from tune_runner.trainables.checkpoints import read as read_checkpoint
from tune_runner.trainables.trial import env_config_of, trainer_bundle, trial_device, trial_threads


def check_config(name: str, config: dict[str, Any]) -> str | None:
    """The learner config's own validation, as one line (None when fine)."""
    from tune_runner.trainables import agents

    try:  # the config class alone: ours comes without torch, which the driver need not import (2-4 s of CPU)
        agents.trial_config(name, config)
    except (ValueError, TypeError) as exc:
        return str(exc).strip().splitlines()[0]
    runners = config.get(RUNNERS_KEY, 0)
    if isinstance(runners, bool) or not isinstance(runners, int) or runners < 0:
        return f"num_env_runners must be a whole number >= 0, got {runners!r}"
    least = config.get(MIN_TIME_KEY)
    if least is not None and (isinstance(least, bool) or not isinstance(least, (int, float)) or not 0 <= least < 3600):
        return f"{MIN_TIME_KEY} must be seconds from 0 to 3600 (or null: one learner iteration a report), got {least!r}"
    if runners and not agents.is_ours(name):
        return (f"num_env_runners {runners}: rollout workers run our {spoken(ours())} only; agent {name} steps its "
                f"own envs")
    return None


class OwnTrainable(tune.Trainable):
    """One of our learners per trial; exact checkpoints (networks, optimizer, RNGs, counters, buffer). Its subclass
    per agent names the learner (`own_trainable_class`)."""

    learner_name: ClassVar[str]

    def setup(self, config: dict[str, Any]) -> None:
        import torch

        torch.set_num_threads(trial_threads())
        self.members = None
        if config.get(MEMBERS_KEY):  # a population trial: B configs x K seeds as one learner
            from tune_runner.trainables.members import Members

            self.members = Members(config, trial_id=getattr(self, "trial_id", None))
            config = {**config, SEEDS_KEY: self.members.num_seeds, "population": self.members.population()}
        self.learner = build_learner(self.learner_name, config, device=trial_device())
        self.task_fn = None
        if config.get(TASK_FN_KEY):
            from tune_runner.trainables import curriculum

            self.task_fn = curriculum.resolve_task_fn(config[TASK_FN_KEY])
            curriculum.check_seeds_settable(self.learner, env_id=config["env"])
        self.runners = None
        if self.members is not None:
            return
        if config.get(RUNNERS_KEY, 0) > 0:
            from tune_runner.trainables.rollouts import RolloutGroup

            self.runners = RolloutGroup(self.learner_name, config, num_runners=config[RUNNERS_KEY])

    def step(self) -> dict[str, float]:
        from tune_runner.trainables.audit import audit_result, check_finite, computed, node_id

        if self.members is not None and not self.members.apply(self.members.orders(), self.learner.replace_member):
            return self.members.final()
        result = computed(self._train())
        check_finite(result)
        if self.members is not None:
            result = self.members.result(result)
        elif int(self.config.get(SEEDS_KEY, 1)) > 1:  # the aggregate is what schedulers and searchers judge
            from tune_runner.algos.seeds import with_aggregates

            result = with_aggregates(result, self.config.get(AGGREGATE_KEY, DEFAULT_AGGREGATE))
        if self.task_fn is not None:
            result.update(self._advance_curriculum(result))
        device = getattr(self.learner, "device", "cpu")
        # How the envs are stepped; rollout workers build theirs by the same rule as this learner (one process each)
        backend = getattr(getattr(self.learner, "env", None), "backend", None)
        return {**result, **audit_result(self.config, self.applied()), "node_id": node_id(),
                "device": getattr(device, "type", str(device)), **({"vector_env": backend} if backend else {})}

    def _train(self) -> dict[str, Any]:
        """The learner's iterations of one report: one, or with `min_time_s_per_iteration` as many as start within
        that many seconds (RLlib's setting of that name). Each report costs a round trip through Tune's driver
        (about 4-5 ms and driver CPU on 2 cores) that a 1,024-step CartPole iteration (30 ms) pays 30 times a
        second. The report is the last iteration's result, its `sps` over all of them."""
        import time

        least, start = float(self.config.get(MIN_TIME_KEY) or 0.0), time.perf_counter()
        before = int(getattr(self.learner, "env_steps", 0) or 0)
        while True:
            result = self.runners.train_iteration(self.learner) if self.runners is not None \
                else self.learner.train_iteration()
            elapsed = time.perf_counter() - start
            if elapsed >= least:
                break
        if least and "env_steps" in result and elapsed > 0:
            result = {**result, "sps": (int(result["env_steps"]) - before) / elapsed}
        return result

    def _advance_curriculum(self, result: dict[str, float]) -> dict[str, float]:
        """Set the next task on every env that samples (ours, or the rollout workers'), each seed's from its own
        result; `task`, their mean."""
        from tune_runner.trainables import curriculum

        iteration = self.iteration + 1  # Tune counts it after step()
        if self.runners is not None:
            tasks = self.runners.advance_curriculum(self.config[TASK_FN_KEY], result, training_iteration=iteration)
        else:
            tasks = curriculum.advance_seeds(self.task_fn, learner=self.learner, result=result,
                                             env_ctx=env_config_of(self.config), training_iteration=iteration)
        mean = curriculum.mean_task(tasks)
        return {} if mean is None else {"task": mean}

    def applied(self) -> dict[str, float]:
        """The audited hyperparameters as the learner uses them: the optimizer's lr, the learner's config."""
        from tune_runner.trainables.audit import AUDITED

        out = {}
        per_seed = getattr(getattr(self.learner, "config", None), "population", None) or {}
        for key in AUDITED:
            if key not in self.config or ALIASES.get(key, key) in per_seed:  # a population's: no one value to audit
                continue
            if key == "lr":
                if hasattr(self.learner, "optimizer"):  # a user's agent may keep its lr elsewhere
                    out[key] = _furthest(self.learner.optimizer.lr, self.config[key])
            else:
                out[key] = getattr(getattr(self.learner, "config", None), ALIASES.get(key, key), None)
        return out

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        checkpoints.write(Path(checkpoint_dir), learner=self.learner.get_state(),
                          runners=self.runners.get_state() if self.runners is not None else None,
                          members=members.get_state() if (members := getattr(self, "members", None)) else None)

    def load_checkpoint(self, checkpoint: str) -> None:
        state = read_checkpoint(Path(checkpoint))
        if getattr(self, "members", None) is not None and state.get("members") is not None:  # before the learner
            self.members.set_state(state["members"])
            self.learner.set_population(self.members.population())
        self.learner.set_state(state["learner"])
        if self.runners is not None and state.get("runners") is not None:
            self.runners.set_state(state["runners"])

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Reuse the actor for the next trial: a new learner, no new process."""
        self.cleanup()
        self.setup(new_config)
        self.config = new_config
        return True

    def cleanup(self) -> None:
        if self.runners is not None:
            self.runners.stop()
        close = getattr(self.learner, "close", None)
        if callable(close):
            close()

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """One bundle for the trainer, one CPU bundle per rollout worker (the seeds' layout)."""
        from ray.tune.execution.placement_groups import PlacementGroupFactory


        runners = int(config.get(RUNNERS_KEY, 0) or 0)
        return PlacementGroupFactory([trainer_bundle(config)] + [{"CPU": 1}] * runners)


def _furthest(applied: Any, requested: Any) -> Any:
    """The applied value to audit: one seed's lr, or of several seeds' (a K-seed optimizer) the one furthest
    from the requested value, so that a single seed training on a stale lr fails PBT's audit."""
    if not isinstance(applied, (list, tuple)):
        return applied
    try:
        return max(applied, key=lambda value: abs(float(value) - float(requested)))
    except (TypeError, ValueError):  # a schedule: the audit compares numbers only
        return applied[0]


def own_trainable_class(name: str) -> type[tune.Trainable]:
    """The Tune trainable for agent `name`: for ours `Own<NAME>` (OwnPPO), a name of this module that old pickles and
    Ray's workers find (module `__getattr__`); for a user's `Agent_<name>`, pickled by value."""
    record = learner_record(name)
    if record is not None:
        return _own_class(record.trainable_name, name)
    return type(f"Agent_{name}", (OwnTrainable,), {"learner_name": name, "__module__": __name__})


@functools.cache
def _own_class(class_name: str, name: str) -> type[tune.Trainable]:
    """One class per learner and process: the class Tune registered is the one its name finds here."""
    return type(class_name, (OwnTrainable,), {"learner_name": name, "__module__": __name__})


def __getattr__(attr: str) -> Any:
    """`OwnPPO`, `OwnDQN`, ...: our learners' trainables by their class names (imports, pickles, tests)."""
    for name in ours():
        if LEARNERS.get(name).trainable_name == attr:
            return own_trainable_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
