"""The Ray Tune trainable that runs one RLlib Algorithm per trial (`rllib/<ALGO>`), reporting our metric names.

Apart from tune_runner.trainables.backends so that module loads without Ray: `RLlibBackend.trainable_class`
subclasses this per algorithm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray import tune

from tune_runner.errors import closest
from tune_runner.spec.reserved import TASK_FN_KEY
from tune_runner.trainables import metrics
from tune_runner.trainables.trial import ENV_KEYS, PREFIX, env_config_of, load_trial_plugins, nest

EPISODE_WINDOW_FILE = "tune_rl_episode_window.json"  # beside RLlib's state in an rllib/* checkpoint


class RLlibTrainable(tune.Trainable):
    """One RLlib Algorithm per trial, reporting tune-rl's metric names."""

    algo_name = "PPO"

    def setup(self, config: dict[str, Any]) -> None:
        load_trial_plugins(config)  # a user's env registers itself with Tune (RLlib finds it there)
        self.algo = rllib_config(self.algo_name, config).build_algo()
        self._last: dict[str, float] = {}

    def step(self) -> dict[str, float]:
        from tune_runner.trainables.audit import audit_result, check_finite, node_id

        result = metrics.from_rllib(self.algo.train(), previous=self._last)
        check_finite(result)
        self._last = result
        return {**result, **audit_result(self.config, self.applied()), "node_id": node_id()}

    def applied(self) -> dict[str, float]:
        """The audited hyperparameters as the (first) learner uses them: its optimizer's lr, its config."""
        from tune_runner.trainables.audit import AUDITED

        keys = [k for k in AUDITED if k in self.config]

        def read(learner: Any) -> dict[str, float]:
            out = {}
            for key in keys:
                if key == "lr":
                    optimizers = list(learner._named_optimizers.values())
                    if optimizers:
                        out[key] = float(learner._get_optimizer_lr(optimizers[0]))
                else:
                    value = getattr(learner.config, learner.config._translate_special_keys(key, warn_deprecated=False),
                                    None)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        out[key] = value
            return out

        for item in self.algo.learner_group.foreach_learner(read):  # call results (local) or values (remote)
            return item if isinstance(item, dict) else item.get()
        return {}

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Reuse this actor for the next trial (saves a process start and RLlib's imports)."""
        self.algo.stop()
        self.setup(new_config)
        self.config = new_config
        return True

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        from tune_runner.trainables import rllib_episodes

        self.algo.save_to_path(checkpoint_dir)
        # Our episode window is no part of RLlib's state: it goes beside it, so PBT's exploit and a
        # resume continue the same last-N mean (and lifetime episode count) as the trial they copy.
        state = rllib_episodes.window_of(self.algo).get_state()
        (Path(checkpoint_dir) / EPISODE_WINDOW_FILE).write_text(json.dumps(state))

    def load_checkpoint(self, checkpoint: str) -> None:
        from tune_runner.trainables import rllib_episodes

        self.algo.restore_from_path(checkpoint)
        self._reapply_lr()
        window = rllib_episodes.window_of(self.algo)
        rllib_episodes.collect_all(self.algo)  # episodes this trial's runners finished before the restore
        saved = Path(checkpoint) / EPISODE_WINDOW_FILE
        # A checkpoint from before the window was saved: it restarts empty (NaN until an episode ends).
        window.set_state(json.loads(saved.read_text()) if saved.is_file() else {"returns": [], "lengths": [],
                                                                                  "episodes": 0})
        # RLlib keeps the lifetime count under env_runners/ (its result repeats it at the top level).
        lifetime = self.algo.metrics.peek(("env_runners", "num_env_steps_sampled_lifetime"), default=0)
        self._last = {**window.metrics(), "env_steps": lifetime}

    def _reapply_lr(self) -> None:
        """Restoring a checkpoint loads its optimizers' param groups, lr included; without an lr
        schedule RLlib never sets it again, so a PBT-perturbed lr would silently be the donor's."""
        lr = self.config.get("lr")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool):
            return  # a schedule: RLlib's own scheduler sets it after every update

        def reset(learner: Any) -> None:
            for optimizer in learner._named_optimizers.values():
                learner._set_optimizer_lr(optimizer, lr=float(lr))

        self.algo.learner_group.foreach_learner(reset)

    def cleanup(self) -> None:
        self.algo.stop()

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """RLlib's own request for this config (driver + env runners + learners)."""
        from ray.rllib.algorithms.registry import _get_algorithm_class

        return _get_algorithm_class(cls.algo_name).default_resource_request(
            rllib_config(cls.algo_name, config))


MODEL_CONFIG = "model_config"  # the new API stack's network settings (RLlib's DefaultModelConfig), a dict here


def model_config_problem(config: dict[str, Any]) -> str | None:
    """One line when `model_config` is not a dict of DefaultModelConfig's fields (RLlib would fail in the trial)."""
    value = nest({k: v for k, v in config.items() if k == MODEL_CONFIG or k.startswith(MODEL_CONFIG + ".")}).get(
        MODEL_CONFIG)
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"model_config must be a mapping of RLlib's DefaultModelConfig fields, got {value!r}"
    import dataclasses

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    fields = [f.name for f in dataclasses.fields(DefaultModelConfig)]
    for key in value:
        if key not in fields:
            near = closest(key, fields)
            return (f"model_config.{key}: not a field of RLlib's DefaultModelConfig; "
                    + (f"did you mean {near!r}?" if near else f"its fields are {', '.join(fields)}"))
    return None


def rllib_config(algo: str, config: dict[str, Any]) -> Any:
    """An RLlib AlgorithmConfig from our flat trial config (dotted keys nest).

    Our callbacks count the finished episodes (tune_runner.trainables.rllib_episodes: the return we report),
    `env_task_fn` becomes an `on_train_result` callback after it (RLlib 2.60 no longer calls it
    itself; it then sees our return), and an env with action masks gets our masking RLModule.
    """
    from ray.rllib.algorithms.registry import _get_algorithm_class

    from tune_runner.trainables import curriculum, masking, rllib_episodes

    algo_config = _get_algorithm_class(algo).get_default_config()
    env_config = env_config_of(config)
    algo_config.environment(config["env"], env_config=env_config)
    settings = nest({k: v for k, v in config.items()
                     if k not in ENV_KEYS and k != TASK_FN_KEY and not k.startswith(PREFIX)})
    model_config = settings.pop(MODEL_CONFIG, None)  # a read-only property: update_from_dict cannot set it
    algo_config.update_from_dict(settings)
    if model_config is not None:
        algo_config.rl_module(model_config=dict(model_config))
    rllib_episodes.install(algo_config)
    if config.get(TASK_FN_KEY):
        rllib_episodes.add_callbacks(algo_config, on_train_result=curriculum.rllib_callback(config[TASK_FN_KEY]))
    masking.install(algo_config, algo=algo, observation_space=masking.env_observation_space(config["env"], env_config))
    return algo_config
