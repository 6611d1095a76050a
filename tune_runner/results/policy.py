"""A trained policy, acting greedily, from whatever a search left behind: `load_policy(path)`.

`path` may be a checkpoint of our ppo/dqn (learner.pkl; the trial config is the trial folder's
params.json, one level up), an RLlib checkpoint (new API stack: only the RLModule is read, from
<checkpoint>/learner_group/learner/rl_module/<module id>), a trial folder (its newest
checkpoint_NNNNNN) or a best-config bundle (the checkpoint it names). No Ray session starts;
RLlib is imported only for RLlib checkpoints.

The policy acts as RLlib's old Algorithm did: `compute_single_action(obs)` and
`compute_actions({"a": obs_a, "b": obs_b}) -> {"a": action_a, ...}`, and also on a stacked batch
(array in, array out). A masked env's observation is a dict of `observations` and `action_mask`;
a forbidden action is never chosen. RLlib's connectors are not run: the RLModule sees the raw
observations, which is what RLlib's default pipeline feeds it (a MeanStdFilter would differ).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from tune_runner import files
from tune_runner.algos.action_space import ActionSpace
from tune_runner.algos.common import to_tensor
from tune_runner.algos.distributions import masked_logits, segments_argmax
from tune_runner.algos.learner_envs import split_obs
from tune_runner.algos.normalize import normalized
from tune_runner.algos.records import LEARNERS, ours
from tune_runner.algos.spaces import MASK_KEYS
from tune_runner.errors import UserError
from tune_runner.results.analysis import last_checkpoint
from tune_runner.results.pyfunc_model import uses_cnn
from tune_runner.spec import reserved
from tune_runner.trainables import checkpoints
from tune_runner.trainables.trial import env_config_of

EXPECTED = (f"expected a checkpoint folder (learner.pkl of our {'/'.join(ours())}, or an RLlib checkpoint), a trial "
            "folder holding checkpoint_NNNNNN folders, or a bundle written by tune-rl best --export")
RLLIB_MODULES = Path("learner_group", "learner", "rl_module")  # Algorithm > LearnerGroup > Learner > MultiRLModule
PARAMS_FILE = "params.json"  # Tune's copy of the trial config, in the trial folder


class Policy:
    """Greedy actions of a trained policy; `env_id`/`env_config` say where it was trained."""

    def __init__(self, *, env_id: str, env_config: Mapping[str, Any], kind: str, checkpoint: Path) -> None:
        self.env_id, self.env_config = env_id, dict(env_config)
        self.kind, self.checkpoint = kind, checkpoint

    def compute_single_action(self, observation: Any) -> Any:
        """The action for one observation (an int for a Discrete action space)."""
        if isinstance(observation, Mapping):
            batch: Any = {k: np.asarray(v)[None] for k, v in observation.items()}
        else:
            batch = np.asarray(observation)[None]
        return _plain(self._act(batch)[0])

    def compute_actions(self, observations: Any) -> Any:
        """{id: observation} -> {id: action}, or a stacked batch (array, or a masked dict of arrays) -> array."""
        if not isinstance(observations, Mapping) or set(observations) == MASK_KEYS:
            return self._act(observations)
        ids = list(observations)
        if not ids:
            return {}
        singles = [observations[i] for i in ids]
        if all(isinstance(o, Mapping) for o in singles):
            batch: Any = {k: np.stack([np.asarray(o[k]) for o in singles]) for k in singles[0]}
        else:
            batch = np.stack([np.asarray(o) for o in singles])
        return {i: _plain(a) for i, a in zip(ids, self._act(batch), strict=True)}

    def _act(self, batch: Any) -> np.ndarray:
        """Actions for a batch of observations (first axis)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind} on {self.env_id}, {self.checkpoint})"


class OwnPolicy(Policy):
    """The acting network of our ppo (policy logits) or dqn (Q-values), argmax over the allowed actions; for
    ppo on Box actions the Gaussian's mean, clipped to the bounds as the env got it in training (sac: tanh of
    the mean scaled to the bounds); on
    MultiDiscrete (or MultiBinary) actions the argmax of each number's logits, in the space's shape."""

    def __init__(self, net: torch.nn.Module, *, obs_dim: int, actions: ActionSpace | None = None,
                 obs_stats: Mapping[str, Any] | None = None, squashed: bool = False, **about: Any) -> None:
        super().__init__(**about)
        self.net, self.obs_dim, self.actions, self.obs_stats = net.eval(), obs_dim, actions, obs_stats
        self.squashed = squashed  # sac: the Box action is tanh(mean) scaled to the bounds

    @property
    def box(self) -> ActionSpace | None:
        """The Box action space it acts in, or None for discrete actions."""
        return self.actions if self.actions is not None and self.actions.continuous else None

    @torch.no_grad()
    def _act(self, batch: Any) -> np.ndarray:
        # The learners' own steps (split_obs, to_tensor, masked_logits, argmax), so the actions are theirs.
        obs, mask = split_obs(batch)
        if obs.shape[1] != self.obs_dim:
            raise ValueError(f"observations of {obs.shape[1]} features, the policy expects {self.obs_dim} "
                             f"(batch shape {obs.shape}); one observation goes to compute_single_action")
        cpu = torch.device("cpu")
        if self.obs_stats is not None:  # observation_filter: MeanStdFilter, with the statistics it was saved with
            obs = normalized(obs, self.obs_stats["mean"], self.obs_stats["var"])
        if self.box is not None:
            return self.box.greedy(self.net(to_tensor(obs, cpu)).numpy(), squashed=self.squashed)
        logits = masked_logits(self.net(to_tensor(obs, cpu)), None if mask is None else to_tensor(mask, cpu))
        if self.actions is not None:  # MultiDiscrete
            return self.actions.for_env(segments_argmax(logits, self.actions.nvec).numpy())
        return logits.argmax(-1).numpy()


class RLlibPolicy(Policy):
    """An RLlib RLModule's deterministic actions (forward_inference), masked when the env masks."""

    def __init__(self, module: Any, **about: Any) -> None:
        super().__init__(**about)
        # forward_inference switches a module in training mode to eval and back on every call (slow, recursive).
        self.module = module.eval()

    @torch.no_grad()
    def _act(self, batch: Any) -> np.ndarray:
        from ray.rllib.core import Columns

        obs, mask = self._inputs(batch)
        out = self.module.forward_inference({Columns.OBS: obs})
        if mask is None and Columns.ACTIONS in out:  # DQN picks its actions itself
            return out[Columns.ACTIONS].cpu().numpy()
        logits = out.get(Columns.ACTION_DIST_INPUTS)
        if logits is None:  # only actions, and a mask to apply: the Q-values behind them
            logits = self.module.compute_q_values({Columns.OBS: obs})["qf_preds"]
        if mask is not None:
            return masked_logits(logits, mask).argmax(-1).cpu().numpy()
        # RLlib's GetActions connector with explore=False: the distribution's deterministic sample.
        dist = self.module.get_inference_action_dist_cls().from_logits(logits).to_deterministic()
        return dist.sample().cpu().numpy()

    def _inputs(self, batch: Any) -> tuple[Any, torch.Tensor | None]:
        """(module input, mask for us to apply or None); a Dict-space module takes the mask itself."""
        space = self.module.observation_space
        if isinstance(batch, Mapping) and set(batch) == MASK_KEYS and not isinstance(space, gym.spaces.Dict):
            mask = torch.as_tensor(np.asarray(batch["action_mask"]).astype(bool))
            return self._tensor(batch["observations"], space), mask
        if isinstance(batch, Mapping):
            return {k: self._tensor(v, space[k]) for k, v in batch.items()}, None
        return self._tensor(batch, space), None

    @staticmethod
    def _tensor(values: Any, space: Any) -> torch.Tensor:
        array = np.asarray(values, dtype=space.dtype if space.dtype is not None else np.float32)
        if array.shape[1:] != space.shape:
            raise ValueError(f"observations of shape {array.shape[1:]}, the policy expects {space.shape} "
                             f"(batch shape {array.shape}); one observation goes to compute_single_action")
        return torch.from_numpy(np.ascontiguousarray(array))


def _plain(action: np.ndarray) -> Any:
    """A numpy scalar action as a Python int/float; vector actions stay arrays."""
    return action.item() if np.ndim(action) == 0 else action


# ---- loading ------------------------------------------------------------------------------------------


def load_policy(path: str | Path) -> Policy:
    """The policy in `path`: a checkpoint folder (ours or RLlib's), a trial folder, or a bundle YAML."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():  # a bundle (a pipe or an unreadable file: its read says what it is)
        return _from_bundle(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such file or folder; {EXPECTED}")
    if checkpoints.holds_one(path):
        return _own(path)
    if (path / RLLIB_MODULES).is_dir():
        return _rllib(path)
    newest = last_checkpoint(path)
    if newest is not None:
        return load_policy(newest)
    hint = ""
    if any(path.glob("experiment_state-*.json")):
        hint = " (this is an experiment folder: pass one of its trial folders, or its best.yaml)"
    elif (path / PARAMS_FILE).is_file():
        hint = " (this trial folder holds no checkpoint)"
    elif path.name.startswith("checkpoint_"):
        hint = f" (a checkpoint without one: only {', '.join(ours())} and rllib/* trainables have a policy)"
    raise UserError(f"{path}: not a policy{hint}; {EXPECTED}")


def _from_bundle(path: Path) -> Policy:
    from tune_runner.results.bundle import Bundle

    bundle = Bundle.read(path, unmarked=f"not a best-config bundle (no tune_rl_format key); {EXPECTED}")
    checkpoint = bundle.checkpoint
    logged = (bundle.source or {}).get("mlflow_run")
    if not checkpoint and logged:  # tune-rl best runs:/<id>: MLflow holds no trial checkpoints
        raise UserError(f"{path}: checkpoint: null, exported from MLflow ({logged}), which holds no trial "
                        f"checkpoints; export from the search's results folder (tune-rl best EXPERIMENT --export "
                        f"FILE), or pass a checkpoint folder")
    if not checkpoint:
        raise UserError(f"{path}: checkpoint: missing (exported by an older tune-rl, or the trial saved none); "
                        f"export again with tune-rl best EXPERIMENT --export FILE, or pass a checkpoint folder")
    if not Path(checkpoint).is_dir():
        raise UserError(f"{path}: checkpoint: {checkpoint} no longer exists; pass the checkpoint folder where it "
                        f"is now, or export again with tune-rl best EXPERIMENT --export FILE")
    if checkpoints.holds_one(Path(checkpoint)):  # in a population trial's checkpoint, the bundle's member
        return _own(Path(checkpoint), member=(bundle.source or {}).get("trial_id"))
    return load_policy(checkpoint)


def _trial_config(checkpoint: Path) -> dict[str, Any] | None:
    """The trial config Tune saved beside the checkpoint (<trial>/params.json), or None."""
    params = checkpoint.parent / PARAMS_FILE
    if not params.exists():
        return None
    config = files.read_json_mapping(params, expected="Tune's params.json (the trial config, a JSON object)")
    if not isinstance(config.get("env"), str):
        got = "missing" if "env" not in config else f"expected a gymnasium env id, got {files.short(config['env'])}"
        raise UserError(f"{params}: env: {got}; a trial config names its gymnasium env")
    for key, kind, what in (("env_config", dict, "a mapping of env settings"),
                            (reserved.PLUGINS_KEY, list, "a list of plug-in files")):
        if config.get(key) is not None and not isinstance(config[key], kind):
            raise UserError(f"{params}: {key}: expected {what}, got {files.short(config[key])}; it should be the "
                            f"params.json Tune wrote for this trial")
    from tune_runner.trainables.trial import load_trial_plugins

    load_trial_plugins(config)  # the user's env (and agent, model) register themselves again here
    return config


def _own(checkpoint: Path, *, member: str | None = None) -> OwnPolicy:
    config = _trial_config(checkpoint)
    if config is None:
        raise UserError(f"{checkpoint}: no {PARAMS_FILE} in {checkpoint.parent}; our checkpoints need their trial "
                        f"folder's config beside them: pass the checkpoint inside its trial folder")
    state = checkpoints.learner_state(checkpoint, fix="damaged or cut short: pass another of the trial's "
                                      "checkpoint_NNNNNN folders", member=member)
    learner = _agent_name(checkpoint) or _learner_of(state, trial=checkpoint.parent.name)
    # A registered model or our CNN (image observations): the learner rebuilds its networks.
    if learner not in LEARNERS or config.get("model", "mlp") != "mlp" or uses_cnn(state):
        return _learner_policy(learner, state=state, config=config, checkpoint=checkpoint)
    net, obs_dim = own_network(learner, state=state, config=config, where=checkpoint)
    return OwnPolicy(net, obs_dim=obs_dim, actions=saved_actions(state, where=checkpoint),
                     obs_stats=state.get("obs_filter"),
                     squashed=bool((state.get("action_space") or {}).get("squashed")),
                     env_id=config["env"], env_config=env_config_of(config), kind=learner, checkpoint=checkpoint)


def _learner_of(state: Mapping[str, Any], *, trial: str = "") -> str:
    """Which of our learners wrote a state, for a checkpoint without its experiment's spec: the one whose Ray Tune
    class names the trial folder (OwnSAC_Pendulum-v1_00000), else the first whose acting network is in it (ppo and
    sac both call theirs `pi`), else the last one's, to be named in the error."""
    names = ours()
    named = [name for name in names if trial.startswith(f"{LEARNERS.get(name).trainable_name}_")]
    if named and LEARNERS.get(named[0]).policy_key in state:
        return named[0]
    return next((name for name in names if LEARNERS.get(name).policy_key in state), names[-1])


def saved_actions(state: Mapping[str, Any], *, where: Path) -> ActionSpace | None:
    """The Box (bounds and shape) or MultiDiscrete (nvec, shape, dtype) action space a ppo checkpoint was trained
    on, or None for Discrete actions."""
    saved = state.get("action_space")
    if saved is None:
        return None
    try:
        shape = tuple(int(n) for n in saved["shape"])
        if "nvec" in saved:
            return ActionSpace.multi(tuple(int(n) for n in saved["nvec"]), shape=shape,
                                     dtype=str(np.dtype(saved["dtype"])))
        low, high = (np.asarray(saved[key], dtype=np.float32).reshape(-1) for key in ("low", "high"))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where / checkpoints.CHECKPOINT_FILE}: not a readable checkpoint (its action_space: "
                        f"{type(exc).__name__}: {exc}); pass a checkpoint folder written by our ppo") from None
    return ActionSpace(size=len(low), shape=shape, low=low, high=high, kind="Box")


class LearnerPolicy(Policy):
    """A whole learner restored from its checkpoint, acting greedily: a user's agent, or ours with a
    registered model (their networks are the user's code, so the learner builds them)."""

    def __init__(self, learner: Any, **about: Any) -> None:
        super().__init__(**about)
        self.learner = learner

    def _act(self, batch: Any) -> np.ndarray:
        return np.asarray(self.learner.compute_actions(batch, explore=False))


def _agent_name(checkpoint: Path) -> str | None:
    """The search's trainable, from the experiment's saved spec (two folders up), if there is one."""
    from tune_runner.spec.saved import saved_trainable

    return saved_trainable(checkpoint.parent.parent)


def _learner_policy(name: str, *, state: Mapping[str, Any], config: dict[str, Any], checkpoint: Path) -> Policy:
    from tune_runner.trainables.agents import build_learner
    from tune_runner.trainables.trial import one_seed_config

    try:  # one seed: the state is the policy's seed alone (checkpoints.policy_seed)
        learner = build_learner(name, one_seed_config(config))
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's plugin code: one line naming it
        raise UserError(f"{checkpoint}: agent {name} could not be rebuilt from its trial config "
                        f"({type(exc).__name__}: {exc}); are its plugins where the search found them?") from None
    if not callable(getattr(learner, "set_state", None)):
        raise UserError(f"{checkpoint}: agent {name} has no set_state; it cannot be restored from a checkpoint")
    learner.set_state(state)
    return LearnerPolicy(learner, env_id=config["env"], env_config=env_config_of(config), kind=name,
                         checkpoint=checkpoint)


def own_network(learner: str, *, state: Mapping[str, Any], config: dict[str, Any],
                where: Path) -> tuple[torch.nn.Module, int]:
    """(the learner's acting network with the checkpoint's weights, observation size), built as the learner does."""
    from tune_runner.trainables.agents import config_class
    from tune_runner.trainables.trial import learner_settings, one_seed_config

    try:
        settings = config_class(learner).from_dict(learner_settings(one_seed_config(config)))
    except (ValueError, TypeError) as exc:  # a value of the wrong type in params.json
        raise UserError(f"{where.parent / PARAMS_FILE}: {str(exc).splitlines()[0]}; the trial config of "
                        f"{where.name} does not build a {learner} learner") from None
    record = LEARNERS.get(learner)
    acting = record.acting_network()
    try:
        weights = state[record.policy_key]
        obs_dim, actions = acting.sizes(weights, settings)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        lack = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else f"not tensors ({type(exc).__name__})"
        raise UserError(f"{where / checkpoints.CHECKPOINT_FILE}: not a readable checkpoint (its {learner} weights: "
                        f"{lack}); pass a checkpoint folder written by our {learner} with this trial config") from None
    net = acting.network(settings, obs_dim=obs_dim, actions=actions)
    try:
        net.load_state_dict(weights)
    except RuntimeError as exc:
        raise UserError(f"{where}: the weights do not fit the network of its trial config "
                        f"({str(exc).splitlines()[0]})") from None
    return net, obs_dim


def _rllib(checkpoint: Path) -> RLlibPolicy:
    modules = checkpoint / RLLIB_MODULES
    found = sorted(p.name for p in modules.iterdir() if p.is_dir())
    if "default_policy" in found or len(found) == 1:
        module_id = "default_policy" if "default_policy" in found else found[0]
    else:
        raise UserError(f"{checkpoint}: {len(found)} RLModules ({', '.join(found) or 'none'}); only single-agent "
                        f"checkpoints (one module, or default_policy) can be evaluated")
    config = _trial_config(checkpoint) or _rllib_env(checkpoint)
    from ray.rllib.core.rl_module.rl_module import RLModule

    with _quiet_rllib():
        module = RLModule.from_checkpoint(modules / module_id)
    return RLlibPolicy(module, env_id=config["env"], env_config=env_config_of(config),
                       kind=f"rllib {module.__class__.__name__}", checkpoint=checkpoint)


def _rllib_env(checkpoint: Path) -> dict[str, Any]:
    """env and env_config from the Algorithm's pickled config, for a checkpoint outside its trial folder."""
    pkl, fix = checkpoint / "class_and_ctor_args.pkl", "pass the checkpoint inside its trial folder"
    if not pkl.exists():
        raise UserError(f"{checkpoint}: no {PARAMS_FILE} beside it and its Algorithm config is unreadable "
                        f"({pkl.name}: missing); {fix}")
    data = files.read_bytes(pkl, expected=f"RLlib's pickled Algorithm config (no {PARAMS_FILE} is beside it)",
                            fix=fix)
    try:
        config = pickle.loads(data)["ctor_args_and_kwargs"][0][0]  # noqa: S301 - an RLlib checkpoint
    except files.CHECKPOINT_ERRORS as exc:
        raise UserError(f"{checkpoint}: no {PARAMS_FILE} beside it and its Algorithm config is unreadable "
                        f"({pkl.name}: {type(exc).__name__}); {fix}") from None
    if not isinstance(config, dict) or not isinstance(config.get("env"), str):
        env = config.get("env") if isinstance(config, dict) else config
        raise UserError(f"{pkl}: env: expected a gymnasium env id, got {files.short(env)}; its env is not a "
                        f"gymnasium id, and only registered envs can be evaluated")
    return config


@contextlib.contextmanager
def _quiet_rllib() -> Iterator[None]:
    """RLlib's deprecation warnings about its own classes say nothing the user can act on."""
    loggers = [logging.getLogger(name) for name in ("ray.rllib", "ray._common.deprecation")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
