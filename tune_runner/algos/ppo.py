"""PPO on gymnasium vector envs, in one file, with RLlib's setting names.

Discrete actions: a softmax policy; MultiDiscrete and MultiBinary ones: one softmax per number of the
action, over its segment of the policy's logits. Box actions: a diagonal Gaussian whose mean is the policy
network's output and whose log standard deviation is one learned vector per seed, independent of
the observation (`log_std_init`, RLlib's and SB3's default shape). The env gets the sample clipped
to the space's bounds; the learner keeps the unclipped sample, whose log-probability the loss needs.
`observation_filter: MeanStdFilter` and `normalize_rewards` (tune_runner.algos.normalize) keep each
seed's running statistics; a rollout worker acts with the learner's and sends back the moments of
what it saw.

An iteration sets the lr from its schedule, samples train_batch_size env steps with the current
policy (no gradients), then `learn`s: GAE, then num_epochs passes of clipped-surrogate minibatch
updates. The samples come from the learner's own envs (`collect`) or, in rollout mode, from a
`Sampler` whose workers ran `collect` elsewhere after `set_weights` and shipped the batches
(plain numpy arrays) back; the iteration is the same code either way.

Losses follow RLlib's new API stack: separate policy and value networks, advantages
normalised over the whole batch, and `vf_clip_param` clipping the squared value error itself.

**Seeds** (issue 16). With `num_seeds` = K, K independent seeds of the config train side by side
(tune_runner.algos.seeds: which seeds, and how their metrics are reported): K x
num_envs_per_env_runner envs, seed i owning the i-th block of columns of every [time, env] array;
K networks evaluated as one batched model and K optimizer states in one buffer
(tune_runner.algos.batched). Each seed draws from its own generators, normalises its own
advantages and cuts its own minibatches, so seed i trains exactly as the one-seed learner with its
seed does (to float rounding). With K = 1 this is the one-seed learner, op for op.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from tune_runner.algos import batched
from tune_runner.algos.common import keep_freed_memory, mlp, scheduled, to_tensor
from tune_runner.algos.config import PPOConfig
from tune_runner.algos.distributions import (
    gaussian_entropy,
    gaussian_logp,
    masked_logits,
    sample_actions,
    sample_seed_actions,
    sde_log_std,
    segments_argmax,
    segments_gather,
    segments_log_softmax,
)
from tune_runner.algos.learner import Sampler, SeedLearnerBase
from tune_runner.algos.learner_envs import split_obs
from tune_runner.algos.networks import BUILT_IN, build_model, image_model
from tune_runner.algos.normalize import ObsFilter, RewardScaler, normalized
from tune_runner.algos.optim import SeedAdam
from tune_runner.algos.ppo_loss import LOSSES, ppo_losses
from tune_runner.algos.rollout import compute_gae, merge_rollouts, rollout_arrays
from tune_runner.algos.seed_streams import CounterStreams, SeedNoise, minibatch_plan
from tune_runner.algos.seeds import SeedStats, by_seed, seed_metrics, standardized
from tune_runner.algos.spaces import PPO_ACTION_SPACES


def rows(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor[index] for an index of any shape into the first axis: index_select on the flat index, which runs at
    about twice the speed of advanced indexing on a [K, width] index."""
    return tensor.index_select(0, index.reshape(-1)).view(*index.shape, *tensor.shape[1:])


class PPO(SeedLearnerBase):
    """A PPO learner of `config.num_seeds` seeds with its own vector envs; no Ray inside."""

    config_class = PPOConfig
    action_spaces = PPO_ACTION_SPACES
    networks = ("pi", "vf")  # Box actions add "log_std"

    def __init__(self, config: PPOConfig, *, env_id: str, env_config: Mapping[str, Any] | None = None,
                 device: str = "cpu") -> None:
        self.config, self.env_id, self.env_config, self.device = config, env_id, env_config, torch.device(device)
        if self.device.type == "cpu":
            keep_freed_memory()  # K seeds' activations are megabytes: reuse them, do not fault them in anew
        self._seed_envs(config, env_id, env_config)
        self.streams = CounterStreams(self.seeds, self.device)
        self.noise = SeedNoise([rngs.torch for rngs in self.rngs], self.streams, self.device)
        self.pi, self.vf = self._networks()
        params = [*self.pi.parameters(), *self.vf.parameters()]
        self.continuous = self.env.continuous
        self.sde = self.continuous and config.use_sde
        if self.continuous:
            self.networks = (*type(self).networks, "log_std")
            shape = (self.env.num_actions,)
            if self.sde:  # a log std per (feature, action number): the features are the last hidden layer's
                if not isinstance(self.pi, batched.BatchedMLP):
                    raise ValueError(f"use_sde needs the built-in mlp on flat observations; {env_id}'s observations "
                                     f"{self.env.obs_shape} get a CNN: set use_sde: false")
                shape = ((config.fcnet_hiddens or (self.env.obs_dim,))[-1], self.env.num_actions)
            start = torch.full(shape, float(config.log_std_init), device=self.device)
            self.log_std = batched.SeedVector([start] * self.num_seeds)
            params.append(self.log_std.weight)
        self.optimizer = SeedAdam(params, num_seeds=self.num_seeds, lr=scheduled(config.lr, 0))
        self.obs_filter = ObsFilter(self.num_seeds, self.env.obs_dim) \
            if config.observation_filter == "MeanStdFilter" else None
        self.members = [config.member(i) for i in range(self.num_seeds)] if config.population else None
        self.reward_scaler = RewardScaler(self.num_seeds, self.env.envs_per_seed, gamma=self._per_seed("gamma", 1)) \
            if config.normalize_rewards else None
        self.refresh_population()
        self.normalizers = [kept for kept in (self.obs_filter, self.reward_scaler) if kept is not None]
        self.stats = SeedStats(self.num_seeds, self.env.envs_per_seed, window=config.metrics_num_episodes_for_smoothing)
        self.seed_env_steps = np.zeros(self.num_seeds, dtype=np.int64)
        self._buffers: dict[str, np.ndarray] = {}

    def refresh_population(self) -> None:
        """The losses' settings, a number or (a population) one per seed, made once: no tensor per update; and the
        reward scaler's discount."""
        self.loss_settings = {"clip_param": self._per_seed_tensor("clip_param", 1),
                              "vf_loss_coeff": self._per_seed_tensor("vf_loss_coeff"),
                              "entropy_coeff": self._per_seed_tensor("entropy_coeff")}
        if self.reward_scaler is not None:
            self.reward_scaler.gamma = self._per_seed("gamma", 1)

    def _per_seed(self, name: str, *shape: int) -> Any:
        """Setting `name` as the seeds use it: the config's number, or where `population` gives the seeds different
        values, a float64 array of one value per seed shaped [K, *shape] (ones, to broadcast against the seeds'
        rows)."""
        values = self.config.population.get(name)
        if values is None or len(set(values)) == 1:
            return float(values[0]) if values else getattr(self.config, name)
        return np.asarray(values, dtype=np.float64).reshape(-1, *shape)

    def _per_seed_tensor(self, name: str, *shape: int) -> float | torch.Tensor:
        """`_per_seed` for the losses: a number, or a float32 tensor [K, *shape] on the learner's device."""
        value = self._per_seed(name, *shape)
        return value if isinstance(value, float) else torch.as_tensor(value, dtype=torch.float32, device=self.device)

    def _networks(self) -> tuple[nn.Module, nn.Module]:
        """Each seed's policy and value networks, initialised as a one-seed learner with its seed does; batched."""
        c, env, pairs = self.config, self.env, []
        model, model_config = image_model(c.model, c.model_config, obs_shape=env.obs_shape, obs_dtype=env.obs_dtype)
        with torch.random.fork_rng(devices=[]):  # seeded init without moving the global torch stream
            # Orthogonal init (batched.orthogonal_mlps); a small policy head starts near uniform, which steadies the
            # first updates
            if model == BUILT_IN:
                sizes = [env.obs_dim, *c.fcnet_hiddens]
                nets = [(mlp([*sizes, n], c.fcnet_activation), gain) for n, gain in ((env.num_actions, 0.01), (1, 1.0))]
                pi, vf = batched.orthogonal_mlps(self.seeds, nets, device=self.device)
                return pi, vf
            for seed in self.seeds:
                # The CPU generator, which draws the init (the nets are made on the CPU): torch.manual_seed also
                # queues every CUDA generator's, a traceback each, a tenth of building 1024 seeds without CUDA
                torch.default_generator.manual_seed(seed)
                pair = tuple(build_model(model, num_inputs=env.obs_dim, num_outputs=n, model_config=model_config)
                             for n in (env.num_actions, 1))
                pairs.append(pair if self.device.type == "cpu" else [net.to(self.device) for net in pair])
        pis, vfs = zip(*pairs, strict=True)
        return (batched.StackedModule(pis, num_inputs=env.obs_dim, name=model),
                batched.StackedModule(vfs, num_inputs=env.obs_dim, name=model))

    # ---- acting -------------------------------------------------------------------------------

    def _by_seed(self, rows: np.ndarray | None) -> torch.Tensor | None:
        """[K * n, ...] rows (seed-major) as a tensor [K, n, ...]."""
        if rows is None:
            return None
        tensor = to_tensor(rows, self.device)
        return tensor.view(self.num_seeds, -1, *tensor.shape[1:])

    @torch.no_grad()
    def _values(self, obs: np.ndarray, last_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """V of a [time, env] rollout's observations and of the observations after it."""
        k, (length, width) = self.num_seeds, obs.shape[:2]
        n = width // k
        flat = np.concatenate([by_seed(obs, k).reshape(k, length * n, -1), last_obs.reshape(k, n, -1)], axis=1)
        values = self.vf(to_tensor(flat, self.device)).squeeze(-1).cpu().numpy()
        rollout = values[:, :length * n].reshape(k, length, n).swapaxes(0, 1).reshape(length, width)
        return rollout, values[:, length * n:].reshape(width)

    @torch.no_grad()
    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Seed 0's actions for a batch of observations (a Dict batch for masked envs); explore samples, else argmax
        (Box: the mean). Actions come as the env takes them, [batch, *shape]: Box ones clipped to the bounds,
        MultiDiscrete ones of the space's dtype."""
        obs, mask = split_obs(obs)
        if self.obs_filter is not None:  # seed 0's statistics, left as they are
            obs = normalized(obs, self.obs_filter.stats.mean[0], self.obs_filter.stats.var[0])
        batch = to_tensor(obs, self.device)
        if self.sde:
            features, mean = (out[0] for out in self.pi.forward_features(batch.expand(self.num_seeds, *batch.shape)))
            if explore:  # a fresh noise matrix per observation
                matrix = self._sde_log_std()[0]
                noise = matrix.exp() * torch.randn((len(mean), *matrix.shape), generator=self.rngs[0].torch)
                mean = mean + (features.unsqueeze(-2) @ noise).squeeze(-2)
            return self.env.actions.for_env(mean.cpu().numpy())
        logits = self.pi(batch.expand(self.num_seeds, *batch.shape))[0]
        if self.continuous:
            if explore:
                std = self.log_std(3)[0].exp()
                logits = logits + std * torch.randn(logits.shape, generator=self.rngs[0].torch)
            return self.env.actions.for_env(logits.cpu().numpy())
        logits, nvec = masked_logits(logits, None if mask is None else to_tensor(mask, self.device)), self.env.nvec
        actions = sample_actions(logits, generator=self.rngs[0].torch, nvec=nvec) if explore \
            else segments_argmax(logits, nvec)
        return self.env.actions.for_env(actions.cpu().numpy())

    # ---- sampling -----------------------------------------------------------------------------

    def _rollout_buffers(self, length: int) -> dict[str, np.ndarray]:
        # Reused across iterations: only a different rollout length allocates.
        if self._buffers.get("rewards", np.empty(0)).shape[:1] != (length,):
            self._buffers = rollout_arrays(self.env, length)
        return self._buffers

    @torch.no_grad()
    def collect(self, num_steps: int) -> dict[str, Any]:
        """Run the current policy for ceil(num_steps / num_envs_per_env_runner) vector steps of every seed's envs.

        Returns [time, env] numpy arrays (views of buffers that the next call overwrites; seed i's envs
        are the i-th block of columns), the observations after the last step (`last_obs`), `env_steps`
        (transitions of all seeds; autoreset steps excluded), `seed_env_steps` (each seed's) and the
        finished episodes' `episode_returns` / `episode_lens` / `episode_seeds`. Counts them into this
        learner's stats. Values are left to `learn`, in one batched pass.
        """
        env, noise, finished = self.env, self.noise, []
        buf = self._rollout_buffers(-(-num_steps // env.envs_per_seed))
        log_std = (self._sde_log_std() if self.sde else self.log_std(3)) if self.continuous else None
        obs_filter, scaler, nvec = self.obs_filter, self.reward_scaler, env.nvec
        every = self.config.sde_sample_freq
        for t in range(len(buf["rewards"])):
            buf["obs"][t], mask = env.obs if obs_filter is None else obs_filter(env.obs, update=True), None
            if env.masked:
                buf["mask"][t] = mask = env.mask
            # Actions on the learner's device, with each seed's noise drawn there (seed_streams.SeedNoise)
            if self.sde:  # noise = features @ E, E drawn per env at the rollout's start and every `every` steps
                if t == 0 or (every > 0 and t % every == 0):
                    sde_noise = log_std.exp().unsqueeze(1) * noise.normal(
                        (self.num_seeds, env.envs_per_seed, *log_std.shape[1:]))
                features, mean = self.pi.forward_features(self._by_seed(buf["obs"][t]))
                actions = mean + (features.unsqueeze(-2) @ sde_noise).squeeze(-2)
                buf["actions"][t] = actions.view(-1, env.num_actions).cpu().numpy()
                buf["logp"][t] = gaussian_logp(actions, mean, sde_log_std(features, log_std)).view(-1).cpu().numpy()
            elif self.continuous:  # [K, n, size]: the unclipped sample is kept, the env clips it
                mean = self.pi(self._by_seed(buf["obs"][t]))
                actions = mean + log_std.exp() * noise.normal(mean.shape)
                buf["actions"][t] = actions.view(-1, env.num_actions).cpu().numpy()
                buf["logp"][t] = gaussian_logp(actions, mean, log_std).view(-1).cpu().numpy()
            else:  # [K, n] actions, or [K, n, numbers] of a MultiDiscrete space
                out = self.pi(self._by_seed(buf["obs"][t]))
                logp_all = segments_log_softmax(masked_logits(out, self._by_seed(mask)), nvec)
                actions = sample_seed_actions(logp_all, noise=noise, nvec=nvec)
                buf["actions"][t] = actions.view(-1, *actions.shape[2:]).cpu().numpy()
                buf["logp"][t] = segments_gather(logp_all, actions, nvec).view(-1).cpu().numpy()
            step = env.step(buf["actions"][t])
            buf["rewards"][t], buf["terminated"][t], buf["truncated"][t], buf["valid"][t] = step
            if scaler is not None:
                buf["rewards"][t] = scaler(step.rewards, valid=step.valid, done=step.terminated | step.truncated)
            finished.append(self.stats.update(step))  # the raw rewards: the returns we report
        steps = by_seed(buf["valid"], self.num_seeds).sum(axis=(1, 2))
        self.seed_env_steps += steps
        returns, lens, seeds = (np.concatenate(part) for part in zip(*finished, strict=True))
        last_obs = env.obs.copy() if obs_filter is None else obs_filter(env.obs, update=False)
        return {**buf, "last_obs": last_obs, "env_steps": int(steps.sum()), "seed_env_steps": steps,
                "episode_returns": returns, "episode_lens": lens, "episode_seeds": seeds,
                "obs_moments": None if obs_filter is None else obs_filter.take(),
                "reward_moments": None if scaler is None else scaler.take()}

    # ---- learning -----------------------------------------------------------------------------

    def merge(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Rollouts of several workers as one (`merge_rollouts`)."""
        return merge_rollouts(batches, num_seeds=self.num_seeds)

    def learn(self, batch: Mapping[str, Any]) -> list[dict[str, float]]:
        """GAE on a `collect` batch, then num_epochs x minibatches of PPO updates; each seed's mean losses.

        A seed without a single transition in the batch (every env between episodes) trains nothing and
        reports no loss.
        """
        c, k = self.config, self.num_seeds
        if not batch["valid"].any():
            return [{} for _ in range(k)]
        values, last_values = self._values(batch["obs"], batch["last_obs"])
        width = batch["rewards"].shape[1] // k  # each seed's envs, side by side: a seed's value for each
        gamma, lambda_ = (np.repeat(v, width) if isinstance(v, np.ndarray) else v
                          for v in (self._per_seed("gamma"), self._per_seed("lambda_")))
        advantages, targets = compute_gae(
            rewards=batch["rewards"], values=values, terminated=batch["terminated"],
            truncated=batch["truncated"], last_values=last_values, gamma=gamma, lambda_=lambda_)
        valid = by_seed(batch["valid"], k)  # each seed's samples in turn, each in its one-seed order
        counts = valid.reshape(k, -1).sum(axis=1)
        data = {"obs": batch["obs"], "actions": batch["actions"], "logp": batch["logp"], "value_targets": targets,
                **({"mask": batch["mask"]} if "mask" in batch else {})}
        data = {key: by_seed(value, k)[valid] for key, value in data.items()}
        advantages = by_seed(advantages, k)[valid]
        data["advantages"] = standardized(advantages, counts) if c.normalize_advantage else advantages
        # GAE runs in float64 (the bool masks promote it); the loss in the networks' float32, as one dtype is faster
        tensors = {key: to_tensor(value.astype(np.float32) if value.dtype == np.float64 else value, self.device)
                   for key, value in data.items()}
        sums, updates = torch.zeros(k, len(LOSSES)), np.zeros(k, dtype=np.int64)
        for mb in minibatch_plan(counts, num_epochs=c.num_epochs, minibatch_size=c.minibatch_size,
                                 streams=self.streams):  # on the learner's device
            # One seed trains on [width, ...] tensors, without the seed axis: the graph is the one-seed learner's
            index = mb.index[0] if k == 1 else mb.index
            losses = self._update({key: rows(value, index) for key, value in tensors.items()}, mask=mb.mask,
                                  active=mb.active)
            sums += losses if mb.mask is None else losses * torch.as_tensor(mb.active, dtype=losses.dtype)[:, None]
            updates += mb.active
        return [dict(zip(LOSSES, (sums[i] / int(updates[i])).tolist(), strict=True)) if updates[i] else {}
                for i in range(k)]

    def _update(self, mb: dict[str, torch.Tensor], *, mask: torch.Tensor | None, active: np.ndarray) -> torch.Tensor:
        """One gradient step of each active seed on its minibatch ([K, width, ...] tensors, or [width, ...] for one
        seed); the losses [K, 4] (or [4])."""
        c = self.config
        new_logp, entropy = self._logp_entropy(mb)
        losses = ppo_losses(
            new_logp=new_logp, old_logp=mb["logp"],
            advantages=mb["advantages"], values=self.vf(mb["obs"]).squeeze(-1), value_targets=mb["value_targets"],
            entropy=entropy, vf_clip_param=c.vf_clip_param, mask=mask, **self.loss_settings)
        self.optimizer.zero_grad()
        total = losses["total_loss"]  # [K], or a scalar without the seed axis
        (total.sum() if total.dim() else total).backward()  # the seeds share no parameter: each its own gradient
        if c.grad_clip is not None:
            self.optimizer.clip_grad_norm_(c.grad_clip)
        self.optimizer.step(None if mask is None else active)  # no padding: every seed has a minibatch
        return torch.stack([losses[key] for key in LOSSES], dim=-1).detach().cpu()

    def _logp_entropy(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The current policy's log-probability of each minibatch action, and its entropy at each observation."""
        if self.sde:  # [K, batch, F] @ [K, F, A], or one seed's [batch, F] @ [F, A]
            features, out = self.pi.forward_features(mb["obs"])
            log_std = sde_log_std(features, self.log_std.weight)
            return gaussian_logp(mb["actions"], out, log_std), gaussian_entropy(log_std)
        out = self.pi(mb["obs"])
        if self.continuous:
            log_std = self.log_std(out.dim())
            return gaussian_logp(mb["actions"], out, log_std), gaussian_entropy(log_std).expand(out.shape[:-1])
        nvec = self.env.nvec
        logp_all = segments_log_softmax(masked_logits(out, mb.get("mask")), nvec)
        # p * log p with masked actions is 0 * -inf; those terms are 0. Zero log p before the product, not
        # after it (torch.where): the gradient of exp(x) * x at -inf is NaN, and where() would pass on 0 * NaN.
        # With MultiDiscrete actions the sum runs over every number's choices: the sum of their entropies.
        entropy = -(logp_all.exp() * logp_all.masked_fill(~logp_all.isfinite(), 0.0)).sum(-1)
        return segments_gather(logp_all, mb["actions"], nvec), entropy

    def _sde_log_std(self) -> torch.Tensor:
        """gSDE's log-std matrices, [K, F, A] (with the seed axis for one seed too)."""
        weight = self.log_std.weight
        return weight if self.num_seeds > 1 else weight.unsqueeze(0)

    def seed_state(self, seed: int) -> dict[str, Any]:
        """A one-seed learner's state; with Box actions also the bounds the env clips to (a policy loaded from
        the checkpoint clips the same), and the normalization statistics when they are on."""
        state = super().seed_state(seed)
        actions = self.env.actions
        if self.continuous:
            state["action_space"] = {"low": actions.low.copy(), "high": actions.high.copy(), "shape": actions.shape}
        elif actions.nvec:
            state["action_space"] = {"nvec": list(actions.nvec), "shape": actions.shape, "dtype": actions.dtype}
        for kept in self.normalizers:
            state[kept.key] = kept.stats.get_state(seed)
        if self.reward_scaler is not None:
            state["reward_scaler"]["returns"] = self.reward_scaler.returns[seed].copy()
        return state

    def set_seed_state(self, seed: int, state: Mapping[str, Any]) -> bool:
        exact = super().set_seed_state(seed, state)
        for kept in self.normalizers:
            if kept.key not in state:
                raise ValueError(f"the learner state holds no {kept.key} statistics, and this config normalizes "
                                 f"({kept.setting} is on)")
            kept.stats.set_state(seed, state[kept.key])
        if self.reward_scaler is not None:
            returns = state["reward_scaler"]["returns"]
            self.reward_scaler.returns[seed] = returns if exact and len(returns) == self.env.envs_per_seed else 0.0
        return exact

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """The networks, and the normalization statistics a rollout worker acts with."""
        weights = super().get_weights()
        for kept in self.normalizers:
            weights[kept.key] = kept.stats.to_arrays()
        return weights

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        super().set_weights(weights)
        for kept in self.normalizers:
            kept.stats.load_arrays(weights[kept.key])

    def count_batch(self, batch: Mapping[str, Any]) -> None:
        """A rollout worker's batch into the env steps and episodes, and what it saw into the statistics."""
        super().count_batch(batch)
        for kept in self.normalizers:
            if batch.get(kept.moments) is not None:
                kept.stats.merge(batch[kept.moments])

    def train_iteration(self, source: Sampler | None = None) -> dict[str, float]:
        """The lr from its schedule, train_batch_size env steps per seed (own envs, or `source`'s), learn; our
        metric names, per seed and aggregated when there are several (tune_runner.algos.seeds)."""
        start = time.perf_counter()
        lrs = self.apply_lr_schedule()
        n = self.config.train_batch_size
        batch = self.collect(n) if source is None else source.sample(n)
        losses = self.learn(batch)
        per_seed = [{**self.seed_episode_metrics(i), **losses[i], "lr": lrs[i]} for i in range(self.num_seeds)]
        return {**seed_metrics(per_seed, how=self.config.seed_aggregate),
                "sps": batch["env_steps"] / (time.perf_counter() - start)}
