"""DQN for discrete actions on gymnasium vector envs, in one file, with RLlib's setting names.

Sampling and learning interleave as in RLlib: an iteration samples at least 1000 env steps in
rounds; each round's transitions go into a replay memory, then the learner takes as many
gradient steps as `training_intensity` earns (none before learning starts). In process a round
is one vector step (`collect(num_envs)`) into the learner's own buffer. In rollout mode a
`Replay` of workers runs `collect` elsewhere after `set_weights`, their transitions go into a
shared replay memory, and the whole iteration is one round; the loop is the same code.

Truncation bootstraps: a transition stores `terminated` apart from truncation, and NEXT_STEP
autoreset gives the final observation as its `next_obs`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from tune_runner.algos.common import (
    EpisodeStats,
    FlatAdam,
    Rngs,
    make_vec_env,
    masked_logits,
    mlp,
    scheduled,
    split_obs,
    state_dict_copy,
    to_tensor,
)
from tune_runner.algos.config import DQNConfig
from tune_runner.algos.learner import LearnerBase, Replay
from tune_runner.algos.networks import BUILT_IN, build_model
from tune_runner.algos.replay import NStepAccumulator, ReplayBuffer


def dqn_targets(*, rewards: torch.Tensor, discount: torch.Tensor, terminated: torch.Tensor,
                next_q_target: torch.Tensor, next_q_online: torch.Tensor | None) -> torch.Tensor:
    """The TD targets `rewards + discount * V(next_obs)` of a batch of (n-step) transitions.

    `rewards` is the discounted n-step reward sum and `discount` gamma ** (steps taken), so the
    1-step case is discount == gamma. V(next) is 0 after a termination; a truncated transition
    (terminated False) bootstraps from its final observation. With `next_q_online` (double Q)
    the online network picks the next action and `next_q_target` values it; without,
    V(next) = max_a next_q_target. Both Q arrays are [batch, actions], already masked.
    """
    if next_q_online is not None:
        next_value = next_q_target.gather(1, next_q_online.argmax(-1, keepdim=True)).squeeze(1)
    else:
        next_value = next_q_target.max(-1).values
    next_value = torch.where(terminated, 0.0, next_value)
    return rewards + discount * next_value


class QNetwork(nn.Module):
    """Q-values from an MLP; with `dueling`, V(s) + A(s, a) - mean_a A(s, a)."""

    def __init__(self, *, obs_dim: int, num_actions: int, hiddens: tuple[int, ...], activation: str,
                 dueling: bool) -> None:
        super().__init__()
        self.dueling = dueling
        if dueling:
            self.trunk = mlp([obs_dim, *hiddens], activation, activate_last=True)
            self.value, self.advantage = nn.Linear(hiddens[-1], 1), nn.Linear(hiddens[-1], num_actions)
        else:
            self.trunk = mlp([obs_dim, *hiddens, num_actions], activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.dueling:
            return self.trunk(obs)
        features = self.trunk(obs)
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(-1, keepdim=True)


ITERATION_ENV_STEPS = 1000  # env steps an iteration samples, at least one vector step


class OwnReplay:
    """A DQN's own data: one vector step of its envs per round, into its own replay buffer."""

    def __init__(self, learner: DQN) -> None:
        self.learner = learner
        self.round_steps = learner.env.num_envs

    def sample(self, num_steps: int) -> dict[str, Any]:
        batch = self.learner.collect(num_steps)
        self.learner.buffer.add_batch(batch.pop("transitions"))
        return batch

    def size(self) -> int:
        return len(self.learner.buffer)

    def minibatches(self, count: int, batch_size: int) -> list[dict[str, np.ndarray]]:
        return [self.learner.buffer.sample(batch_size, self.learner.rngs.numpy) for _ in range(count)]


class DQN(LearnerBase):
    """A DQN learner with its own vector env and replay buffer; no Ray inside."""

    config_class = DQNConfig

    def __init__(self, config: DQNConfig, *, env_id: str, env_config: Mapping[str, Any] | None = None,
                 device: str = "cpu") -> None:
        self.config, self.env_id, self.device = config, env_id, torch.device(device)
        self.env = env = make_vec_env(env_id, env_config=env_config, num_envs=config.num_envs_per_env_runner,
                                      seed=config.seed, vectorize_mode=config.gym_env_vectorize_mode)
        self.rngs = Rngs(config.seed)
        with torch.random.fork_rng(devices=[]):  # seeded init without moving the global torch stream
            torch.manual_seed(config.seed)
            if config.model == BUILT_IN:
                self.q = QNetwork(obs_dim=env.obs_dim, num_actions=env.num_actions, hiddens=config.fcnet_hiddens,
                                  activation=config.fcnet_activation, dueling=config.dueling).to(self.device)
            else:
                self.q = build_model(config.model, num_inputs=env.obs_dim, num_outputs=env.num_actions,
                                     model_config=config.model_config).to(self.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = FlatAdam(self.q.parameters(), lr=scheduled(config.lr, 0))
        self.buffer = ReplayBuffer(config.capacity, fields={
            "obs": ((env.obs_dim,), np.float32), "actions": ((), np.int64), "rewards": ((), np.float32),
            "next_obs": ((env.obs_dim,), np.float32), "terminated": ((), bool), "discount": ((), np.float32),
            **({"next_mask": ((env.num_actions,), bool)} if env.masked else {})})
        self.nstep = NStepAccumulator(n=config.n_step, gamma=config.gamma, num_envs=env.num_envs,
                                      obs_dim=env.obs_dim)
        self.stats = EpisodeStats(env.num_envs, window=config.metrics_num_episodes_for_smoothing)
        self.env_steps = 0
        self._last_target_update = 0
        self._update_credit = 0.0  # fractional gradient steps owed under training_intensity

    # ---- acting -------------------------------------------------------------------------------

    def _greedy(self, obs: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        with torch.no_grad():
            q = self.q(to_tensor(obs, self.device))
            q = masked_logits(q, None if mask is None else to_tensor(mask, self.device))
        return q.argmax(-1).cpu().numpy()

    def _act(self, obs: np.ndarray, mask: np.ndarray | None, epsilon: float) -> np.ndarray:
        actions = self._greedy(obs, mask)
        rng = self.rngs.numpy
        explore = rng.random(len(obs)) < epsilon
        # A uniform draw among the allowed actions: argmax of uniform noise over the masked-in ones.
        noise = rng.random((len(obs), self.env.num_actions))
        if mask is not None:
            noise = np.where(mask | ~mask.any(-1, keepdims=True), noise, -1.0)
        return np.where(explore, noise.argmax(-1), actions)

    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Actions for a batch of observations (a Dict batch for masked envs); explore is epsilon-greedy."""
        obs, mask = split_obs(obs)
        return self._act(obs, mask, self.config.epsilon_at(self.env_steps)) if explore else self._greedy(obs, mask)

    # ---- sampling -----------------------------------------------------------------------------

    def collect(self, num_steps: int) -> dict[str, Any]:
        """Run epsilon-greedy for ceil(num_steps / num_envs) vector steps; the finished n-step transitions.

        Returns `transitions` (dict of numpy arrays, one row each), `env_steps` (autoreset steps
        excluded) and the finished episodes' `episode_returns` / `episode_lens`; counts them into
        this learner's stats, whose env_steps also drive the epsilon schedule.
        """
        env, parts, finished, steps = self.env, [], [], 0
        for _ in range(-(-num_steps // env.num_envs)):
            obs = env.obs
            actions = self._act(obs, env.mask, self.config.epsilon_at(self.env_steps))
            step = env.step(actions)
            parts.append(self.nstep.push(obs=obs, actions=actions, step=step, next_obs=env.obs,
                                         next_mask=env.mask))
            finished.append(self.stats.update(step))
            n = int(step.valid.sum())
            self.env_steps, steps = self.env_steps + n, steps + n
        transitions = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return {"transitions": transitions, "env_steps": steps,
                "episode_returns": np.concatenate([r for r, _ in finished]),
                "episode_lens": np.concatenate([n for _, n in finished])}

    # ---- learning -----------------------------------------------------------------------------

    def merge(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Transitions of several workers as one batch (none when they went into a shared replay)."""
        if not all("transitions" in b for b in batches):
            return {}
        keys = batches[0]["transitions"]
        return {"transitions": {k: np.concatenate([b["transitions"][k] for b in batches]) for k in keys}}

    def updates_owed(self, env_steps: int, *, replay_size: int) -> int:
        """Gradient steps that `env_steps` newly sampled env steps earn under training_intensity.

        None before num_steps_sampled_before_learning_starts, or while the replay holds less than
        one minibatch; fractions carry over to the next call.
        """
        c = self.config
        if self.env_steps < c.num_steps_sampled_before_learning_starts or replay_size < c.train_batch_size:
            return 0
        # training_intensity is trained / sampled transitions; None means one step per vector step.
        intensity = c.training_intensity or c.train_batch_size / c.num_envs_per_env_runner
        self._update_credit += env_steps * intensity / c.train_batch_size
        count = 0
        while self._update_credit >= 1.0:
            self._update_credit -= 1.0
            count += 1
        return count

    def train_on(self, minibatches: Iterable[Mapping[str, np.ndarray]]) -> tuple[float, float]:
        """One gradient step per minibatch; the losses and the mean |TD errors|, each summed."""
        loss_sum = td_sum = 0.0
        for minibatch in minibatches:
            loss, td = self._update(minibatch).tolist()
            loss_sum, td_sum = loss_sum + loss, td_sum + td
        return loss_sum, td_sum

    def update_target(self) -> None:
        """Copy the Q network into the target network once target_network_update_freq env steps passed."""
        if self.env_steps - self._last_target_update >= self.config.target_network_update_freq:
            self.target.load_state_dict(self.q.state_dict())
            self._last_target_update = self.env_steps

    def _update(self, sample: dict[str, np.ndarray]) -> torch.Tensor:
        c = self.config
        s = {k: to_tensor(v, self.device) for k, v in sample.items()}
        q = self.q(s["obs"]).gather(1, s["actions"][:, None]).squeeze(1)
        with torch.no_grad():
            next_mask = s.get("next_mask")
            target = dqn_targets(
                rewards=s["rewards"], discount=s["discount"], terminated=s["terminated"],
                next_q_target=masked_logits(self.target(s["next_obs"]), next_mask),
                next_q_online=masked_logits(self.q(s["next_obs"]), next_mask) if c.double_q else None)
        td_error = q - target
        loss_fn = nn.functional.huber_loss if c.td_error_loss_fn == "huber" else nn.functional.mse_loss
        loss = loss_fn(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        if c.grad_clip is not None:
            self.optimizer.clip_grad_norm_(c.grad_clip)
        self.optimizer.step()
        return torch.stack([loss.detach(), td_error.detach().abs().mean()]).cpu()

    def train_iteration(self, source: Replay | None = None) -> dict[str, float]:
        """At least 1000 env steps (own envs, or `source`'s) in rounds, each with the lr from its schedule
        and the gradient steps it earned, then a target update if due; our metric names.

        qf_loss and td_error_mean are left out of an iteration without a gradient step.
        """
        replay = source if source is not None else OwnReplay(self)
        per_round = replay.round_steps or ITERATION_ENV_STEPS
        start, sampled, updates, loss_sum, td_sum = time.perf_counter(), 0, 0, 0.0, 0.0
        for _ in range(-(-max(ITERATION_ENV_STEPS, per_round) // per_round)):
            self.apply_lr_schedule()
            steps = replay.sample(per_round)["env_steps"]
            sampled += steps
            count = self.updates_owed(steps, replay_size=replay.size())
            if count:
                loss, td = self.train_on(replay.minibatches(count, self.config.train_batch_size))
                loss_sum, td_sum, updates = loss_sum + loss, td_sum + td, updates + count
            self.update_target()
        losses = {"qf_loss": loss_sum / updates, "td_error_mean": td_sum / updates} if updates else {}
        return {**self.episode_metrics(), **losses, "epsilon": self.config.epsilon_at(self.env_steps),
                "lr": self.optimizer.lr, "sps": sampled / (time.perf_counter() - start)}

    # ---- state --------------------------------------------------------------------------------

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """Q network parameters as numpy arrays (what a rollout worker needs)."""
        return {"q": {k: v.numpy() for k, v in state_dict_copy(self.q).items()}}

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        self.q.load_state_dict({k: torch.as_tensor(v) for k, v in weights["q"].items()})

    def get_state(self, *, include_buffer: bool = True) -> dict[str, Any]:
        """Everything `set_state` needs to continue exactly; picklable, shares no memory with the learner.

        The replay buffer is in by default (PBT's exploit copies a trial's state into another,
        and a DQN without its buffer relearns from scratch); leave it out for small checkpoints.
        """
        return {"q": state_dict_copy(self.q), "target": state_dict_copy(self.target),
                "optimizer": self.optimizer.state_dict(), "rngs": self.rngs.get_state(),
                "stats": self.stats.get_state(), "env_steps": self.env_steps, "env": self.env.get_state(),
                "nstep": self.nstep.get_state(), "last_target_update": self._last_target_update,
                "update_credit": self._update_credit,
                "buffer": self.buffer.get_state() if include_buffer else None}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `get_state`. This learner's config wins (PBT may have changed lr)."""
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rngs.set_state(state["rngs"])
        self.stats.set_state(state["stats"])
        self.env_steps = int(state["env_steps"])
        self._last_target_update, self._update_credit = state["last_target_update"], state["update_credit"]
        if state["buffer"] is not None:
            self.buffer.set_state(state["buffer"])
        exact = self.env.set_state(state["env"], seed=self.rngs.python.randrange(2**31))
        if exact and self.nstep.n == state["nstep"]["n"]:
            self.nstep.set_state(state["nstep"])
        else:
            self.stats.drop_running()
            self.nstep.clear()

    def close(self) -> None:
        self.env.close()
