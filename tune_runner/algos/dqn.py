"""DQN for discrete actions on gymnasium vector envs, with RLlib's setting names.

Sampling and learning interleave as in RLlib: an iteration samples at least 1000 env steps in
rounds; each round's transitions go into a replay memory, then the learner takes as many
gradient steps as `training_intensity` earns (none before learning starts). In process a round
is one vector step (`collect(num_envs)`) into the learner's own buffer. In rollout mode a
`Replay` of workers runs `collect` elsewhere after `set_weights`, their transitions go into a
shared replay memory, and the whole iteration is one round; the loop is the same code.

Truncation bootstraps: a transition stores `terminated` apart from truncation, and NEXT_STEP
autoreset gives the final observation as its `next_obs`.

**Seeds** (issue 16). With `num_seeds` = K, K independent seeds of the config train side by side
(tune_runner.algos.seeds): K x num_envs_per_env_runner envs, seed i owning the i-th block; K Q and
target networks evaluated as one batched model (tune_runner.algos.qnetwork), K optimizer states in one
buffer with per-seed clipping, and K replay buffers side by side (replay.SeedReplay): a seed only ever
draws its own transitions. Each seed has its own generators, epsilon, lr, update credit and target
updates, all by its own env steps, so seed i trains as the one-seed learner with its seed does (to
float rounding); a round gives each seed the gradient steps it earned, the seeds with fewer sitting the
last ones out. With K = 1 this is the one-seed learner, op for op.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tune_runner.algos import batched
from tune_runner.algos.common import scheduled, to_tensor
from tune_runner.algos.config import DQNConfig
from tune_runner.algos.distributions import masked_logits
from tune_runner.algos.learner import Replay, SeedLearnerBase
from tune_runner.algos.learner_envs import split_obs
from tune_runner.algos.optim import SeedAdam
from tune_runner.algos.qnetwork import QNetwork, dqn_targets, q_networks, td_loss
from tune_runner.algos.replay import NStepAccumulator, SeedReplay
from tune_runner.algos.seeds import SeedStats, seed_metrics

__all__ = ["DQN", "QNetwork", "dqn_targets"]  # QNetwork and dqn_targets live in qnetwork; imported from here too
LOSSES = ("qf_loss", "td_error_mean")


def epsilons(config: DQNConfig, env_steps: np.ndarray) -> np.ndarray:
    """Each seed's exploration rate after its `env_steps` ([K]): DQNConfig.epsilon_at, for all at once."""
    if isinstance(config.epsilon, (int, float)):
        return np.full(len(env_steps), float(config.epsilon))
    steps, values = zip(*config.epsilon, strict=True)
    return np.interp(env_steps, steps, values)


def epsilon_greedy(greedy: np.ndarray, mask: np.ndarray | None, *, epsilons: Sequence[float],
            rngs: Sequence[np.random.Generator], num_actions: int) -> np.ndarray:
    """Epsilon-greedy actions from greedy ones, rows seed-major: seed i's rows explore with epsilons[i], their
    draws (whether, then which action) from rngs[i] alone, as a one-seed learner draws them."""
    n = len(greedy) // len(rngs)
    draws = [(rng.random(n) < epsilon, rng.random((n, num_actions)))
             for rng, epsilon in zip(rngs, epsilons, strict=True)]
    chosen, noise = draws[0] if len(draws) == 1 else (np.concatenate(part) for part in zip(*draws, strict=True))
    # A uniform draw among the allowed actions: argmax of uniform noise over the masked-in ones.
    if mask is not None:
        noise = np.where(mask | ~mask.any(-1, keepdims=True), noise, -1.0)
    return np.where(chosen, noise.argmax(-1), greedy)


ITERATION_ENV_STEPS = 1000  # env steps per seed an iteration samples, at least one vector step


class OwnReplay:
    """A DQN's own data: one vector step of its envs per round, into its own replay buffers."""

    def __init__(self, learner: DQN) -> None:
        self.learner = learner
        self.round_steps = learner.env.envs_per_seed

    def sample(self, num_steps: int) -> dict[str, Any]:
        batch = self.learner.collect(num_steps)
        self.learner.buffer.add(batch.pop("transitions"))
        return batch

    def size(self) -> np.ndarray:
        return self.learner.buffer.sizes()

    def minibatches(self, counts: Sequence[int], batch_size: int) -> list[dict[str, np.ndarray]]:
        return self.learner.buffer.minibatches(counts, batch_size, [rngs.numpy for rngs in self.learner.rngs])

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray, active: np.ndarray) -> None:
        self.learner.buffer.update_priorities(rows, td_errors, active)


class DQN(SeedLearnerBase):
    """A DQN learner of `config.num_seeds` seeds with its own vector envs and replay buffers; no Ray inside."""

    config_class = DQNConfig
    networks = ("q", "target")  # saved per seed (SeedLearnerBase); a rollout worker only needs q

    def __init__(self, config: DQNConfig, *, env_id: str, env_config: Mapping[str, Any] | None = None,
                 device: str = "cpu") -> None:
        self.config, self.env_id, self.env_config, self.device = config, env_id, env_config, torch.device(device)
        env = self._seed_envs(config, env_id, env_config)
        if env.actions.kind != "Discrete":
            env.close()
            got = f"a {env.actions.kind} of {env.actions.size if env.continuous else len(env.nvec)} number(s)"
            raise ValueError(f"{env_id}: DQN needs a Discrete action space starting at 0, got {got}; use ppo")
        self.q, self.target = q_networks(config, obs_dim=env.obs_dim, num_actions=env.num_actions, seeds=self.seeds,
                                         device=self.device, obs_shape=env.obs_shape, obs_dtype=env.obs_dtype)
        self.optimizer = SeedAdam(self.q.parameters(), num_seeds=self.num_seeds, lr=scheduled(config.lr, 0))
        self.buffer = SeedReplay(self.num_seeds, config.capacity, prioritized=config.prioritized, fields={
            "obs": ((env.obs_dim,), np.float32), "actions": ((), np.int64), "rewards": ((), np.float32),
            "next_obs": ((env.obs_dim,), np.float32), "terminated": ((), bool), "discount": ((), np.float32),
            **({"next_mask": ((env.num_actions,), bool)} if env.masked else {})})
        self.members = [config.member(i) for i in range(self.num_seeds)] if config.population else None
        self.nstep = NStepAccumulator(n=config.n_step, gamma=self._gammas(), num_envs=env.num_envs,
                                      obs_dim=env.obs_dim, envs_per_seed=env.envs_per_seed)
        self.stats = SeedStats(self.num_seeds, env.envs_per_seed, window=config.metrics_num_episodes_for_smoothing)
        self.seed_env_steps = np.zeros(self.num_seeds, dtype=np.int64)
        self._last_target_update = [0] * self.num_seeds  # each seed's env steps at its last target update
        self._update_credit = [0.0] * self.num_seeds  # fractional gradient steps owed under training_intensity

    def _gammas(self) -> float | np.ndarray:
        """The discount: a number, or (a population whose seeds differ in it) one per env."""
        gammas = [member.gamma for member in self.members] if self.members else [self.config.gamma]
        return np.repeat(np.asarray(gammas, np.float64), self.env.envs_per_seed) if len(set(gammas)) > 1 \
            else gammas[0]

    def refresh_population(self) -> None:
        self.nstep.gamma = self._gammas()

    # ---- acting -------------------------------------------------------------------------------

    def _by_seed(self, rows: np.ndarray | None) -> torch.Tensor | None:
        """[K * n, ...] rows (seed-major) as a tensor [K, n, ...]; one seed's without the seed axis, as always."""
        if rows is None:
            return None
        tensor = to_tensor(rows, self.device)
        return tensor if self.num_seeds == 1 else tensor.view(self.num_seeds, -1, *tensor.shape[1:])

    @torch.no_grad()
    def _greedy(self, obs: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Each seed's greedy actions for its rows of [K * n] (seed-major) observations."""
        q = masked_logits(self.q(self._by_seed(obs)), self._by_seed(mask))
        return q.argmax(-1).reshape(-1).cpu().numpy()

    @torch.no_grad()
    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Seed 0's actions for a batch of observations (a Dict batch for masked envs); explore is epsilon-greedy."""
        obs, mask = split_obs(obs)
        batch = to_tensor(obs, self.device)
        q = self.q(batch) if self.num_seeds == 1 else self.q(batch.expand(self.num_seeds, *batch.shape))[0]
        greedy = masked_logits(q, None if mask is None else to_tensor(mask, self.device)).argmax(-1).cpu().numpy()
        if not explore:
            return greedy
        return epsilon_greedy(greedy, mask, epsilons=epsilons(self.config, self.seed_env_steps[:1]),
                              rngs=[self.rngs[0].numpy], num_actions=self.env.num_actions)

    # ---- sampling -----------------------------------------------------------------------------

    def collect(self, num_steps: int) -> dict[str, Any]:
        """Run epsilon-greedy for ceil(num_steps / num_envs_per_env_runner) vector steps of every seed's envs.

        Returns `transitions` (dict of numpy arrays, one row each, `seed` naming its seed), `env_steps`
        (transitions of all seeds; autoreset steps excluded), `seed_env_steps` (each seed's) and the
        finished episodes' `episode_returns` / `episode_lens` / `episode_seeds`; counts them into this
        learner's stats, whose env steps per seed also drive each seed's epsilon.
        """
        env, parts, finished, k = self.env, [], [], self.num_seeds
        steps, rngs = np.zeros(k, dtype=np.int64), [rngs.numpy for rngs in self.rngs]
        for _ in range(-(-num_steps // env.envs_per_seed)):
            obs, mask = env.obs, env.mask
            greedy = self._greedy(obs, mask)
            actions = epsilon_greedy(greedy, mask, epsilons=epsilons(self.config, self.seed_env_steps), rngs=rngs,
                                     num_actions=env.num_actions)
            step = env.step(actions)
            parts.append(self.nstep.push(obs=obs, actions=actions, step=step, next_obs=env.obs,
                                         next_mask=env.mask))
            finished.append(self.stats.update(step))
            n = step.valid.reshape(k, -1).sum(axis=1)
            self.seed_env_steps += n
            steps += n
        transitions = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        returns, lens, seeds = (np.concatenate(part) for part in zip(*finished, strict=True))
        return {"transitions": transitions, "env_steps": int(steps.sum()), "seed_env_steps": steps,
                "episode_returns": returns, "episode_lens": lens, "episode_seeds": seeds}

    # ---- learning -----------------------------------------------------------------------------

    def merge(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Several workers' batches as one: each seed's env steps summed, the transitions joined (none when they
        went into a shared replay)."""
        merged: dict[str, Any] = {"seed_env_steps": np.sum([b["seed_env_steps"] for b in batches], axis=0),
                                  "episode_seeds": np.concatenate([b["episode_seeds"] for b in batches])}
        if all("transitions" in b for b in batches):
            keys = batches[0]["transitions"]
            merged["transitions"] = {k: np.concatenate([b["transitions"][k] for b in batches]) for k in keys}
        return merged

    def updates_owed(self, env_steps: np.ndarray | int, *, replay_size: np.ndarray | int) -> list[int]:
        """Gradient steps each seed earned with `env_steps` newly sampled env steps ([K], or one number for all)
        under training_intensity.

        None before a seed's num_steps_sampled_before_learning_starts, or while its replay holds less
        than one minibatch; fractions carry over to the next call.
        """
        c, k = self.config, self.num_seeds
        # training_intensity is trained / sampled transitions; None means one step per vector step.
        intensity = c.training_intensity or c.train_batch_size / c.num_envs_per_env_runner
        steps, sizes = (x.tolist() if isinstance(x, np.ndarray) else [x] * k for x in (env_steps, replay_size))
        counts = []
        for i, (sampled, size, done) in enumerate(zip(steps, sizes, self.seed_env_steps.tolist(), strict=True)):
            if done >= c.num_steps_sampled_before_learning_starts and size >= c.train_batch_size:
                self._update_credit[i] += sampled * intensity / c.train_batch_size
            counts.append(int(self._update_credit[i]))  # the credit less its whole steps: exact, as -1 in a loop was
            self._update_credit[i] -= counts[-1]
        return counts

    def train_on(self, minibatches: Sequence[Mapping[str, np.ndarray]], counts: Sequence[int],
                 replay: Replay | None = None) -> np.ndarray:
        """Gradient steps on `minibatches` ([K, batch] each), seed i on its first counts[i]; each seed's losses
        and mean |TD errors|, summed, [K, 2]. Minibatches of a prioritized replay (with `rows`) send their new
        |TD errors| back to it after each step."""
        sums, counts = np.zeros((self.num_seeds, len(LOSSES))), np.asarray(counts)
        for u, minibatch in enumerate(minibatches):
            active = counts > u
            everyone = bool(active.all())
            losses = self._update(minibatch, None if everyone else active).numpy()
            sums += losses if everyone else np.where(active[:, None], losses, 0.0)
            if "rows" in minibatch and replay is not None:
                td = self.td_errors.reshape(self.num_seeds, -1)
                replay.update_priorities(minibatch["rows"], td, active)
        return sums

    def update_target(self) -> None:
        """Copy each seed's Q network into its target network once target_network_update_freq of its env steps
        passed."""
        if not self.config.use_target_network:
            return
        for i, (steps, last) in enumerate(zip(self.seed_env_steps.tolist(), self._last_target_update, strict=True)):
            if steps - last >= self.config.target_network_update_freq:
                self.target.load_seed_state(i, self.q.seed_state(i))
                self._last_target_update[i] = steps

    def _update(self, sample: Mapping[str, np.ndarray], active: np.ndarray | None) -> torch.Tensor:
        """One gradient step of each active seed (None: all) on its minibatch ([K, batch, ...] arrays); every
        seed's loss and mean |TD error|, [K, 2] (one seed: [2])."""
        c = self.config
        # One seed trains on [batch, ...] tensors without the seed axis: the one-seed learner's graph, op for op.
        s = {k: to_tensor(v[0] if self.num_seeds == 1 else v, self.device) for k, v in sample.items()}
        q = self.q(s["obs"]).gather(-1, s["actions"][..., None]).squeeze(-1)
        with torch.no_grad():
            next_mask = s.get("next_mask")
            bootstrap = self.target if c.use_target_network else self.q
            target = dqn_targets(
                rewards=s["rewards"], discount=s["discount"], terminated=s["terminated"],
                next_q_target=masked_logits(bootstrap(s["next_obs"]), next_mask),
                next_q_online=masked_logits(self.q(s["next_obs"]), next_mask) if c.double_q else None)
        td_error = q - target
        losses, total = td_loss(c.td_error_loss_fn, q, target, s.get("weights"))
        self.optimizer.zero_grad()
        total.backward()
        if c.grad_clip is not None:
            self.optimizer.clip_grad_norm_(c.grad_clip)
        self.optimizer.step(active)
        if "weights" in s:  # a prioritized replay's minibatch: its rows' new priorities (train_on sends them back)
            self.td_errors = td_error.detach().abs().cpu().numpy()
        return torch.stack([losses, td_error.detach().abs().mean(-1)], dim=-1).cpu()

    def train_iteration(self, source: Replay | None = None) -> dict[str, float]:
        """At least 1000 env steps per seed (own envs, or `source`'s) in rounds, each with the lrs from the
        schedule and the gradient steps each seed earned, then the target updates due; our metric names, per
        seed and aggregated when there are several (tune_runner.algos.seeds).

        qf_loss and td_error_mean are left out of a seed's iteration without a gradient step.
        """
        replay = source if source is not None else OwnReplay(self)
        per_round = replay.round_steps or ITERATION_ENV_STEPS
        start, sampled = time.perf_counter(), 0
        sums, updates = np.zeros((self.num_seeds, len(LOSSES))), np.zeros(self.num_seeds, dtype=np.int64)
        for _ in range(-(-max(ITERATION_ENV_STEPS, per_round) // per_round)):
            lrs = self.apply_lr_schedule()
            batch = replay.sample(per_round)
            sampled += batch["env_steps"]
            counts = self.updates_owed(batch["seed_env_steps"], replay_size=replay.size())
            if any(counts):
                sums += self.train_on(replay.minibatches(counts, self.config.train_batch_size), counts, replay)
                updates += counts
            self.update_target()
        eps = epsilons(self.config, self.seed_env_steps).tolist()
        per_seed = [{**self.seed_episode_metrics(i),
                     **(dict(zip(LOSSES, (sums[i] / updates[i]).tolist(), strict=True)) if updates[i] else {}),
                     "epsilon": eps[i], "lr": lrs[i]} for i in range(self.num_seeds)]
        sps = sampled / (time.perf_counter() - start)
        return {**seed_metrics(per_seed, how=self.config.seed_aggregate), "sps": sps}

    # ---- state --------------------------------------------------------------------------------

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """The Q network's parameters as numpy arrays (what a rollout worker needs); with several seeds each
        array has the seed as its first axis."""
        return {"q": batched.seed_weights(self.q)}

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        batched.load_seed_weights(self.q, weights["q"])

    def get_state(self, *, include_buffer: bool = True) -> dict[str, Any]:
        """SeedLearnerBase.get_state; the replay buffers are in by default (PBT's exploit copies a trial's
        state into another, and a DQN without its buffer relearns from scratch); leave them out for small
        checkpoints."""
        states = [self.seed_state(i, include_buffer=include_buffer) for i in range(self.num_seeds)]
        return states[0] if self.num_seeds == 1 else {"num_seeds": self.num_seeds, "seeds": states}

    def _envs(self, seed: int) -> slice:
        return slice(seed * self.env.envs_per_seed, (seed + 1) * self.env.envs_per_seed)

    def seed_state(self, seed: int, *, include_buffer: bool = True) -> dict[str, Any]:
        return {**super().seed_state(seed), "nstep": self.nstep.get_state(self._envs(seed)),
                "last_target_update": self._last_target_update[seed], "update_credit": self._update_credit[seed],
                "buffer": self.buffer.get_state(seed) if include_buffer else None}

    def set_seed_state(self, seed: int, state: Mapping[str, Any]) -> bool:
        exact = super().set_seed_state(seed, state)
        self._last_target_update[seed] = int(state["last_target_update"])
        self._update_credit[seed] = float(state["update_credit"])
        if state["buffer"] is not None:
            self.buffer.set_state(seed, state["buffer"])
        if exact and self.nstep.n == state["nstep"]["n"]:
            self.nstep.set_state(state["nstep"], self._envs(seed))
        else:
            self.nstep.clear(self._envs(seed))
        return exact
