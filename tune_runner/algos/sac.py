"""SAC for Box actions on gymnasium vector envs: a tanh-squashed Gaussian policy, twin Q networks with polyak
target networks, and automatic entropy tuning (Haarnoja et al., 2018; Stable-Baselines3's update, op order and
constants).

Sampling and learning interleave as in our DQN (tune_runner.algos.dqn): an iteration samples at least 1000 env
steps a seed, one vector step per round; each round's transitions go into each seed's replay buffer, then the
learner takes the gradient steps `training_intensity` earned (None: one per env step). Before
num_steps_sampled_before_learning_starts a seed acts uniformly at random, as SB3's learning_starts does. The
policy acts in [-1, 1]^A (tanh of the Gaussian sample), the replay keeps those actions, and the env gets them
scaled to the Box's bounds (`ActionSpace.from_unit`): the greedy action is tanh(mean) scaled, which evaluate,
load_policy and the exported MLflow model compute the same way (tune_runner/tune_rl_policy.py).
Truncation bootstraps: a transition keeps `terminated` apart from truncation, and NEXT_STEP autoreset gives the
final observation as its `next_obs`. With `observation_filter: MeanStdFilter` the replay keeps raw observations
and a minibatch is scaled with the statistics of its seed at the time of the update, as SB3's VecNormalize does.

**Seeds** (issue 16). K seeds train side by side as one model: the policies as one BatchedMLP of K, the twin Q
networks (and their targets) as one BatchedMLP of 2K (seed i's Q1 and Q2 are its rows 2i and 2i + 1), each seed's
temperature one entry of a SeedVector, each with its SeedAdam (the Q networks' of 2K rows). Every random draw
(the uniform warm-up actions, the policy's noise, the minibatch rows) comes from the seed's own generators and
each seed keeps its own replay, update credit and counters, so seed i trains as the one-seed learner with its
seed does, bit for bit on a CPU (the one-seed policy keeps the seed axis and runs baddbmm as K seeds' does).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tune_runner.algos import batched
from tune_runner.algos.common import mlp, scheduled, to_tensor
from tune_runner.algos.learner import SeedLearnerBase
from tune_runner.algos.normalize import ObsFilter, normalized
from tune_runner.algos.optim import SeedAdam
from tune_runner.algos.replay import SeedReplay
from tune_runner.algos.sac_config import SACConfig
from tune_runner.algos.sac_networks import SACOptimizers, TwinQ, rehomed, squashed_sample
from tune_runner.algos.seeds import SeedStats, seed_metrics

LOSSES = ("qf_loss", "policy_loss", "alpha_loss", "entropy")
ITERATION_ENV_STEPS = 1000  # env steps per seed an iteration samples, at least one vector step


class SAC(SeedLearnerBase):
    """A SAC learner of `config.num_seeds` seeds with its own vector envs and replay buffers; no Ray inside."""

    config_class = SACConfig
    action_spaces = ("Box",)
    networks = ("pi", "q", "q_target", "log_alpha")

    def __init__(self, config: SACConfig, *, env_id: str, env_config: Mapping[str, Any] | None = None,
                 device: str = "cpu") -> None:
        self.config, self.env_id, self.env_config, self.device = config, env_id, env_config, torch.device(device)
        env = self._seed_envs(config, env_id, env_config)
        actions = env.actions
        if not actions.continuous or not (np.isfinite(actions.low).all() and np.isfinite(actions.high).all()):
            env.close()
            raise ValueError(f"{env_id}: SAC needs a Box action space with finite bounds, got a {actions.kind} one "
                             f"{'of unbounded numbers' if actions.continuous else ''}; use ppo"
                             f"{'' if actions.continuous else ' or dqn'}")
        self.action_dim, self.obs_dim = env.num_actions, env.obs_dim
        self.pi, self.q, self.q_target = self._networks()
        start = torch.full((1,), math.log(config.initial_alpha), device=self.device)
        self.log_alpha = batched.SeedVector([start] * self.num_seeds)
        self.members = [config.member(i) for i in range(self.num_seeds)] if config.population else None
        k = self.num_seeds
        self.optimizer = SACOptimizers(SeedAdam(list(self.pi.parameters()), num_seeds=k, lr=scheduled(config.lr, 0)),
                                       SeedAdam(list(self.q.parameters()), num_seeds=2 * k, lr=scheduled(config.lr, 0)),
                                       SeedAdam([self.log_alpha.weight], num_seeds=k, lr=0.0))
        self._q_flat = self.optimizer.parts["q"].flat
        self._target_flat = rehomed(list(self.q_target.parameters()), 2 * k)
        self.refresh_population()
        self.obs_filter = ObsFilter(k, self.obs_dim) if config.observation_filter == "MeanStdFilter" else None
        self.buffer = SeedReplay(k, config.capacity, fields={
            "obs": ((self.obs_dim,), np.float32), "actions": ((self.action_dim,), np.float32),
            "rewards": ((), np.float32), "next_obs": ((self.obs_dim,), np.float32), "terminated": ((), np.float32)})
        self.stats = SeedStats(k, env.envs_per_seed, window=config.metrics_num_episodes_for_smoothing)
        self.seed_env_steps = np.zeros(k, dtype=np.int64)
        self._update_credit = [0.0] * k

    def _networks(self) -> tuple[batched.BatchedMLP, TwinQ, TwinQ]:
        """Each seed's policy and twin Q networks, initialised as a one-seed learner with its seed does (torch's
        default init, as SB3's); the targets start as copies of the Q networks and take no gradient."""
        c, pis, qs = self.config, [], []
        for seed in self.seeds:
            with torch.random.fork_rng(devices=[]):  # seeded init without moving the global torch stream
                torch.manual_seed(seed)
                pis.append(mlp([self.obs_dim, *c.fcnet_hiddens, 2 * self.action_dim], c.fcnet_activation))
                qs += [mlp([self.obs_dim + self.action_dim, *c.fcnet_hiddens, 1], c.fcnet_activation)
                       for _ in range(2)]
        pis, qs = [net.to(self.device) for net in pis], [net.to(self.device) for net in qs]
        return batched.BatchedMLP(pis, seed_axis=True), TwinQ(qs), TwinQ(qs).requires_grad_(False)

    def refresh_population(self) -> None:
        """Gamma ([K, 1]), tau ([2K, 1], a row per Q network) and the temperatures' lr, each a number where the
        seeds agree (a one-seed learner's ops)."""
        self.gamma = self._per_seed("gamma", 1)
        tau = self._per_seed("tau", 1)
        self.tau = tau if isinstance(tau, float) else tau.repeat_interleave(2, dim=0)
        members = self.members or [self.config] * self.num_seeds
        alpha_lrs = [scheduled(m.lr, 0) if m.alpha_lr is None else m.alpha_lr for m in members]
        self.optimizer.parts["alpha"].lr = alpha_lrs[0] if len(set(alpha_lrs)) == 1 else alpha_lrs

    def _per_seed(self, name: str, *shape: int) -> float | torch.Tensor:
        """Setting `name`: the config's number, or (a population whose seeds differ in it) a tensor [K, *shape]."""
        values = self.config.population.get(name)
        if values is None or len(set(values)) == 1:
            return float(values[0]) if values else float(getattr(self.config, name))
        return torch.tensor(values, dtype=torch.float32, device=self.device).view(-1, *shape)

    # ---- acting -------------------------------------------------------------------------------

    def _normalized(self, obs: np.ndarray, seed_axis: bool) -> np.ndarray:
        """[K, n, obs] observations (or [K * n, obs] with `seed_axis` False) scaled by each seed's statistics."""
        if self.obs_filter is None:
            return obs
        stats = self.obs_filter.stats
        if seed_axis:
            return normalized(obs, stats.mean[:, None], stats.var[:, None])
        return normalized(obs.reshape(self.num_seeds, -1, obs.shape[-1]), stats.mean[:, None],
                          stats.var[:, None]).reshape(obs.shape)

    @torch.no_grad()
    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Seed 0's actions for a batch of observations, scaled to the Box's bounds: tanh(mean), or with
        `explore` a sample of the squashed Gaussian."""
        obs = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        if self.obs_filter is not None:  # seed 0's statistics, left as they are
            obs = normalized(obs, self.obs_filter.stats.mean[0], self.obs_filter.stats.var[0])
        batch = to_tensor(obs, self.device)
        out = self.pi(batch.expand(self.num_seeds, *batch.shape))[0].cpu()
        if not explore:
            return self.env.actions.greedy(out[:, :self.action_dim].numpy(), squashed=True)
        unit, _ = squashed_sample(out, torch.randn((len(out), self.action_dim), generator=self.rngs[0].torch))
        return self.env.actions.from_unit(unit.numpy())

    # ---- sampling -----------------------------------------------------------------------------

    @torch.no_grad()
    def _unit_actions(self, obs: np.ndarray) -> np.ndarray:
        """Each seed's actions in [-1, 1]^A for its rows of [K * n, obs] observations: uniform draws from its numpy
        generator before its learning starts, else a sample of its policy with its torch generator's noise."""
        k, n = self.num_seeds, self.env.envs_per_seed
        starts = self.seed_env_steps < self.config.num_steps_sampled_before_learning_starts
        actions = np.empty((k, n, self.action_dim), np.float32)
        for i in np.flatnonzero(starts).tolist():
            actions[i] = self.rngs[i].numpy.uniform(-1.0, 1.0, (n, self.action_dim))
        if not starts.all():
            out = self.pi(to_tensor(obs, self.device).view(k, n, -1)).cpu()
            noise = torch.zeros(k, n, self.action_dim)
            for i in np.flatnonzero(~starts).tolist():
                torch.randn((n, self.action_dim), generator=self.rngs[i].torch, out=noise[i])
            unit = squashed_sample(out, noise)[0].numpy()
            actions[~starts] = unit[~starts]
        return actions.reshape(k * n, self.action_dim)

    def collect(self, num_steps: int) -> dict[str, Any]:
        """Act for ceil(num_steps / num_envs_per_env_runner) vector steps of every seed's envs.

        Returns `transitions` (numpy rows, `seed` naming each one's seed, raw observations), `env_steps` (all
        seeds'; autoreset steps excluded), `seed_env_steps` and the finished episodes' `episode_returns` /
        `episode_lens` / `episode_seeds`; counts them into this learner's stats.
        """
        env, parts, finished, k = self.env, [], [], self.num_seeds
        steps = np.zeros(k, dtype=np.int64)
        for _ in range(-(-num_steps // env.envs_per_seed)):
            obs = env.obs.astype(np.float32, copy=True)
            acting = obs if self.obs_filter is None else self.obs_filter(obs, update=True)
            unit = self._unit_actions(acting)
            step = env.step(env.actions.from_unit(unit))
            valid = step.valid
            parts.append({"obs": obs[valid], "actions": unit[valid], "rewards": step.rewards[valid].astype(np.float32),
                          "next_obs": env.obs[valid].astype(np.float32),
                          "terminated": step.terminated[valid].astype(np.float32),
                          "seed": np.flatnonzero(valid) // env.envs_per_seed})
            finished.append(self.stats.update(step))
            n = valid.reshape(k, -1).sum(axis=1)
            self.seed_env_steps += n
            steps += n
        transitions = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        returns, lens, seeds = (np.concatenate(part) for part in zip(*finished, strict=True))
        return {"transitions": transitions, "env_steps": int(steps.sum()), "seed_env_steps": steps,
                "episode_returns": returns, "episode_lens": lens, "episode_seeds": seeds}

    # ---- learning -----------------------------------------------------------------------------

    def updates_owed(self, env_steps: np.ndarray) -> list[int]:
        """Gradient steps each seed earned with `env_steps` ([K]) newly sampled under training_intensity; none
        before its learning starts or while its replay holds less than one minibatch; fractions carry over."""
        c = self.config
        intensity = c.training_intensity or c.train_batch_size  # None: one gradient step per env step
        counts = []
        for i, (sampled, size, done) in enumerate(zip(env_steps.tolist(), self.buffer.sizes().tolist(),
                                                      self.seed_env_steps.tolist(), strict=True)):
            if done >= c.num_steps_sampled_before_learning_starts and size >= c.train_batch_size:
                self._update_credit[i] += sampled * intensity / c.train_batch_size
            counts.append(int(self._update_credit[i]))
            self._update_credit[i] -= counts[-1]
        return counts

    def _noise(self, shape: tuple[int, ...], active: np.ndarray) -> torch.Tensor:
        """Standard normal noise [K, *shape] on the learner's device, seed i's from its own (CPU) generator; zeros
        (no draw) for idle seeds."""
        if self.num_seeds == 1:
            return torch.randn(shape, generator=self.rngs[0].torch).unsqueeze(0).to(self.device)
        noise = torch.zeros(self.num_seeds, *shape)
        for i in np.flatnonzero(active).tolist():
            torch.randn(shape, generator=self.rngs[i].torch, out=noise[i])
        return noise.to(self.device)

    def _update(self, sample: Mapping[str, np.ndarray], active: np.ndarray) -> torch.Tensor:
        """One gradient step of each active seed on its minibatch ([K, batch, ...] arrays); the losses [K, 4].

        Every loss comes from this step's parameters and one backward pass gives every gradient, as RLlib's SAC
        computes them (SB3 steps the critics first and takes the policy's loss from the stepped ones): the policy
        acts on the minibatch's observations and next observations in one pass, and its loss reads the Q networks
        through their detached weights (`TwinQ.detached`), so it moves the policy alone. Then each Adam steps and
        the targets take their polyak step.
        """
        everyone = bool(active.all())
        s = {key: to_tensor(self._normalized(v, True) if key in ("obs", "next_obs") else v, self.device)
             for key, v in sample.items()}
        n, a = s["rewards"].shape[1], self.action_dim
        both, logp_both = squashed_sample(self.pi(torch.cat([s["obs"], s["next_obs"]], 1)), self._noise((2 * n, a),
                                                                                                          active))
        actions, logp = both[:, :n], logp_both[:, :n]
        log_alpha = self.log_alpha.weight.view(-1, 1)
        alpha = log_alpha.detach().exp()  # [K, 1]
        with torch.no_grad():
            next_q = self.q_target(s["next_obs"], both[:, n:]).min(1).values - alpha * logp_both[:, n:]
            target = s["rewards"] + self.gamma * (1.0 - s["terminated"]) * next_q
        qf_loss = 0.5 * (self.q(s["obs"], s["actions"]) - target.unsqueeze(1)).square().mean(-1).sum(1)  # SB3's
        policy_loss = (alpha * logp - self.q.detached(s["obs"], actions).min(1).values).mean(-1)
        alpha_loss = -(log_alpha * (logp.detach() - a)).mean(-1)  # target entropy -A
        parts = self.optimizer.parts
        for optimizer in parts.values():
            optimizer.zero_grad()
        (qf_loss + policy_loss + alpha_loss).sum().backward()  # no parameter in two losses, none in two seeds
        parts["q"].step(None if everyone else active.repeat(2))
        parts["pi"].step(None if everyone else active)
        parts["alpha"].step(None if everyone else active)
        with torch.no_grad():
            self._target_flat.lerp_(self._q_flat, self.tau if everyone else self._idle_tau(active))
        return torch.stack([qf_loss, policy_loss, alpha_loss, -logp.mean(-1)], -1).detach().cpu()

    def _idle_tau(self, active: np.ndarray) -> torch.Tensor:
        """tau per Q network row, 0 for the idle seeds' (their targets stay as they were)."""
        tau = self.tau if isinstance(self.tau, torch.Tensor) else torch.full((2 * self.num_seeds, 1), self.tau,
                                                                              device=self.device)
        return tau * torch.as_tensor(active.repeat(2), dtype=tau.dtype, device=self.device)[:, None]

    def train_on(self, minibatches: Sequence[Mapping[str, np.ndarray]], counts: Sequence[int]) -> np.ndarray:
        """Gradient steps on `minibatches` ([K, batch] each), seed i on its first counts[i]; the summed losses
        [K, 4]."""
        sums = torch.zeros(self.num_seeds, len(LOSSES))
        for u, minibatch in enumerate(minibatches):
            active = np.array([count > u for count in counts])
            losses = self._update(minibatch, active)
            sums += losses if active.all() else losses * torch.as_tensor(active, dtype=losses.dtype)[:, None]
        return sums.numpy()

    def train_iteration(self, source: Any = None) -> dict[str, float]:
        """At least 1000 env steps per seed in rounds of one vector step, each with the lrs from the schedule and
        the gradient steps each seed earned; our metric names, per seed and aggregated when there are several.
        The losses are left out of a seed's iteration without a gradient step. No rollout mode (`source`) yet."""
        if source is not None:
            raise ValueError("sac trains on its own envs, without rollout workers: set num_env_runners: 0")
        start, sampled, k = time.perf_counter(), 0, self.num_seeds
        sums, updates = np.zeros((k, len(LOSSES))), np.zeros(k, dtype=np.int64)
        per_round = self.env.envs_per_seed
        rngs = [rngs.numpy for rngs in self.rngs]
        for _ in range(-(-max(ITERATION_ENV_STEPS, per_round) // per_round)):
            lrs = self.apply_lr_schedule()
            batch = self.collect(per_round)
            self.buffer.add(batch["transitions"])
            sampled += batch["env_steps"]
            counts = self.updates_owed(batch["seed_env_steps"])
            if any(counts):
                sums += self.train_on(self.buffer.minibatches(counts, self.config.train_batch_size, rngs), counts)
                updates += counts
        alphas = self.log_alpha.weight.detach().view(-1).exp().tolist()
        per_seed = [{**self.seed_episode_metrics(i),
                     **(dict(zip(LOSSES, (sums[i] / updates[i]).tolist(), strict=True)) if updates[i] else {}),
                     "alpha": alphas[i], "lr": lrs[i]} for i in range(k)]
        return {**seed_metrics(per_seed, how=self.config.seed_aggregate),
                "sps": sampled / (time.perf_counter() - start)}

    # ---- state --------------------------------------------------------------------------------

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """The policy (and the observation statistics) a worker acts with."""
        weights = {"pi": batched.seed_weights(self.pi)}
        if self.obs_filter is not None:
            weights["obs_filter"] = self.obs_filter.stats.to_arrays()
        return weights

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        batched.load_seed_weights(self.pi, weights["pi"])
        if self.obs_filter is not None:
            self.obs_filter.stats.load_arrays(weights["obs_filter"])

    def get_state(self, *, include_buffer: bool = True) -> dict[str, Any]:
        """SeedLearnerBase.get_state, with the replay buffers unless left out (then small, not exact)."""
        states = [self.seed_state(i, include_buffer=include_buffer) for i in range(self.num_seeds)]
        return states[0] if self.num_seeds == 1 else {"num_seeds": self.num_seeds, "seeds": states}

    def seed_state(self, seed: int, *, include_buffer: bool = True) -> dict[str, Any]:
        """A one-seed learner's state; with the Box's bounds (`squashed`: a loaded policy acts with tanh of the
        mean scaled to them) and the observation statistics when they are on."""
        actions = self.env.actions
        state = {**super().seed_state(seed), "update_credit": self._update_credit[seed],
                 "buffer": self.buffer.get_state(seed) if include_buffer else None,
                 "action_space": {"low": actions.low.copy(), "high": actions.high.copy(), "shape": actions.shape,
                                  "squashed": True}}
        if self.obs_filter is not None:
            state["obs_filter"] = self.obs_filter.stats.get_state(seed)
        return state

    def set_seed_state(self, seed: int, state: Mapping[str, Any]) -> bool:
        exact = super().set_seed_state(seed, state)
        self._update_credit[seed] = float(state["update_credit"])
        if state["buffer"] is not None:
            self.buffer.set_state(seed, state["buffer"])
        if self.obs_filter is not None:
            if "obs_filter" not in state:
                raise ValueError("the learner state holds no obs_filter statistics, and this config normalizes "
                                 "(observation_filter is MeanStdFilter)")
            self.obs_filter.stats.set_state(seed, state["obs_filter"])
        return exact
