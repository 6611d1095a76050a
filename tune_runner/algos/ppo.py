"""PPO for discrete actions on gymnasium vector envs, in one file, with RLlib's setting names.

An iteration sets the lr from its schedule, samples train_batch_size env steps with the current
policy (no gradients), then `learn`s: GAE, then num_epochs passes of clipped-surrogate minibatch
updates. The samples come from the learner's own envs (`collect`) or, in rollout mode, from a
`Sampler` whose workers ran `collect` elsewhere after `set_weights` and shipped the batches
(plain numpy arrays) back; the iteration is the same code either way.

Losses follow RLlib's new API stack: separate policy and value networks, advantages
normalised over the whole batch, and `vf_clip_param` clipping the squared value error itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
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
from tune_runner.algos.config import PPOConfig
from tune_runner.algos.learner import LearnerBase, Sampler
from tune_runner.algos.networks import BUILT_IN, build_model

# Rollout arrays indexed [time, env]; the rest of a batch is merged differently.
NOT_TIME_MAJOR = ("last_obs", "env_steps", "episode_returns", "episode_lens")


def compute_gae(*, rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                last_values: np.ndarray, gamma: float, lambda_: float) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, value targets) of a [time, env] rollout.

    `values[t + 1]` (`last_values` after the last step) must be the value of the observation
    that step t returned: the episode's final observation when step t ended it, which is what
    NEXT_STEP autoreset hands over. A truncated episode thus bootstraps from its final state,
    a terminated one from nothing, and neither carries advantage across the episode boundary.
    """
    next_values = np.concatenate([values[1:], last_values[None]])
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    carry = gamma * lambda_ * (1.0 - (terminated | truncated))
    advantages = np.zeros_like(deltas)
    running = np.zeros_like(deltas[0])
    for t in reversed(range(len(deltas))):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages, advantages + values


def ppo_losses(*, new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor,
               value_targets: torch.Tensor, entropy: torch.Tensor, clip_param: float, vf_clip_param: float | None,
               vf_loss_coeff: float, entropy_coeff: float) -> dict[str, torch.Tensor]:
    """PPO's minibatch losses from per-sample tensors; each output is a scalar (batch mean).

    policy_loss: -mean(min(A * r, A * clip(r, 1 - clip_param, 1 + clip_param))), r = exp(new - old logp).
    vf_loss: mean((V - target)^2), each squared error first capped at `vf_clip_param` (RLlib's
    meaning) unless it is None. total_loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff
    * entropy. kl is the low-variance estimator of KL(old || new) (Schulman's k3): mean((r - 1) - log r).
    """
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    policy_loss = -torch.min(advantages * ratio, advantages * ratio.clamp(1 - clip_param, 1 + clip_param)).mean()
    vf_loss = (values - value_targets).pow(2)
    if vf_clip_param is not None:
        vf_loss = vf_loss.clamp(max=vf_clip_param)
    vf_loss = vf_loss.mean()
    entropy = entropy.mean()
    total_loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
    kl = ((ratio - 1) - log_ratio).mean()
    return {"policy_loss": policy_loss, "vf_loss": vf_loss, "entropy": entropy, "kl": kl, "total_loss": total_loss}


def sample_actions(logits: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
    """One action per row, drawn from softmax(logits); a -inf logit is never drawn.

    Gumbel-max (argmax of logits minus log(-log(u)), u uniform in [0, 1)): exact, and about
    three times faster than torch.multinomial on the small batches of a rollout step.
    """
    gumbel = torch.rand(logits.shape, generator=generator).log_().neg_().log_()
    return (logits.cpu() - gumbel).argmax(-1)


def init_layers(net: nn.Sequential, *, out_gain: float) -> nn.Sequential:
    """Orthogonal init; a small policy head starts near uniform, which steadies the first updates."""
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for layer in linears:
        nn.init.orthogonal_(layer.weight, gain=out_gain if layer is linears[-1] else math.sqrt(2))
        nn.init.zeros_(layer.bias)
    return net


class PPO(LearnerBase):
    """A PPO learner with its own vector env; no Ray inside."""

    config_class = PPOConfig

    def __init__(self, config: PPOConfig, *, env_id: str, env_config: Mapping[str, Any] | None = None,
                 device: str = "cpu") -> None:
        self.config, self.env_id, self.device = config, env_id, torch.device(device)
        self.env = make_vec_env(env_id, env_config=env_config, num_envs=config.num_envs_per_env_runner,
                                seed=config.seed, vectorize_mode=config.gym_env_vectorize_mode)
        self.rngs = Rngs(config.seed)
        sizes = [self.env.obs_dim, *config.fcnet_hiddens]
        with torch.random.fork_rng(devices=[]):  # seeded init without moving the global torch stream
            torch.manual_seed(config.seed)
            if config.model == BUILT_IN:
                self.pi = init_layers(mlp([*sizes, self.env.num_actions], config.fcnet_activation), out_gain=0.01)
                self.vf = init_layers(mlp([*sizes, 1], config.fcnet_activation), out_gain=1.0)
            else:
                self.pi, self.vf = (build_model(config.model, num_inputs=self.env.obs_dim, num_outputs=n,
                                                model_config=config.model_config) for n in (self.env.num_actions, 1))
        self.pi.to(self.device)
        self.vf.to(self.device)
        self.optimizer = FlatAdam([*self.pi.parameters(), *self.vf.parameters()], lr=scheduled(config.lr, 0))
        self.stats = EpisodeStats(self.env.num_envs, window=config.metrics_num_episodes_for_smoothing)
        self.env_steps = 0
        self._buffers: dict[str, np.ndarray] = {}

    # ---- acting -------------------------------------------------------------------------------

    def _logits(self, obs: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor | None) -> torch.Tensor:
        logits = self.pi(to_tensor(obs, self.device))
        return masked_logits(logits, None if mask is None else to_tensor(mask, self.device))

    @torch.no_grad()
    def _values(self, obs: np.ndarray, last_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """V of a [time, env] rollout's observations and of the observations after it."""
        flat = np.concatenate([obs.reshape(-1, obs.shape[-1]), last_obs])
        values = self.vf(to_tensor(flat, self.device)).squeeze(-1).cpu().numpy()
        return values[:-len(last_obs)].reshape(obs.shape[:2]), values[-len(last_obs):]

    @torch.no_grad()
    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Actions for a batch of observations (a Dict batch for masked envs); explore samples, else argmax."""
        logits = self._logits(*split_obs(obs))
        actions = sample_actions(logits, generator=self.rngs.torch) if explore else logits.argmax(-1)
        return actions.cpu().numpy()

    # ---- sampling -----------------------------------------------------------------------------

    def _rollout_buffers(self, length: int) -> dict[str, np.ndarray]:
        # Reused across iterations: only a different rollout length allocates.
        if self._buffers.get("rewards", np.empty(0)).shape[:1] != (length,):
            shape, env = (length, self.env.num_envs), self.env
            self._buffers = {"obs": np.zeros((*shape, env.obs_dim), np.float32),
                             "actions": np.zeros(shape, np.int64), "logp": np.zeros(shape, np.float32),
                             "rewards": np.zeros(shape, np.float32), "terminated": np.zeros(shape, bool),
                             "truncated": np.zeros(shape, bool), "valid": np.zeros(shape, bool)}
            if env.masked:
                self._buffers["mask"] = np.zeros((*shape, env.num_actions), bool)
        return self._buffers

    @torch.no_grad()
    def collect(self, num_steps: int) -> dict[str, Any]:
        """Run the current policy for ceil(num_steps / num_envs) vector steps.

        Returns [time, env] numpy arrays (views of buffers that the next call overwrites), the
        observations after the last step (`last_obs`), `env_steps` (transitions; autoreset
        steps excluded) and the finished episodes' `episode_returns` / `episode_lens`. Counts
        them into this learner's stats. Values are left to `learn`, in one batched pass.
        """
        buf, env = self._rollout_buffers(-(-num_steps // self.env.num_envs)), self.env
        finished: list[tuple[np.ndarray, np.ndarray]] = []
        for t in range(len(buf["rewards"])):
            buf["obs"][t] = env.obs
            if env.masked:
                buf["mask"][t] = env.mask
            logp_all = torch.log_softmax(self._logits(env.obs, env.mask), dim=-1).cpu()
            actions = sample_actions(logp_all, generator=self.rngs.torch)
            buf["actions"][t] = actions.numpy()
            buf["logp"][t] = logp_all.gather(1, actions[:, None]).squeeze(1).numpy()
            step = env.step(buf["actions"][t])
            buf["rewards"][t], buf["terminated"][t], buf["truncated"][t], buf["valid"][t] = step
            finished.append(self.stats.update(step))
        steps = int(buf["valid"].sum())
        self.env_steps += steps
        return {**buf, "last_obs": env.obs.copy(), "env_steps": steps,
                "episode_returns": np.concatenate([r for r, _ in finished]),
                "episode_lens": np.concatenate([n for _, n in finished])}

    # ---- learning -----------------------------------------------------------------------------

    def merge(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Rollouts of several workers as one: their envs side by side."""
        merged = {key: np.concatenate([b[key] for b in batches], axis=1)
                  for key in batches[0] if key not in NOT_TIME_MAJOR}
        merged["last_obs"] = np.concatenate([b["last_obs"] for b in batches], axis=0)
        return merged

    def learn(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """GAE on a `collect` batch, then num_epochs x minibatches of PPO updates; mean losses.

        A batch without a single transition (every env between episodes) trains nothing and
        reports no loss.
        """
        c = self.config
        if not batch["valid"].any():
            return {}
        values, last_values = self._values(batch["obs"], batch["last_obs"])
        advantages, targets = compute_gae(
            rewards=batch["rewards"], values=values, terminated=batch["terminated"],
            truncated=batch["truncated"], last_values=last_values, gamma=c.gamma, lambda_=c.lambda_)
        valid = batch["valid"]
        advantages = advantages[valid]
        data = {"obs": batch["obs"][valid], "actions": batch["actions"][valid], "logp": batch["logp"][valid],
                "advantages": (advantages - advantages.mean()) / (advantages.std() + 1e-8),
                "value_targets": targets[valid]}
        if "mask" in batch:
            data["mask"] = batch["mask"][valid]
        tensors = {k: to_tensor(v, self.device) for k, v in data.items()}
        n, sums, updates = len(data["actions"]), torch.zeros(4), 0
        for _ in range(c.num_epochs):
            order = to_tensor(self.rngs.numpy.permutation(n), self.device)
            for start in range(0, n, c.minibatch_size):
                idx = order[start:start + c.minibatch_size]
                sums += self._update({k: v[idx] for k, v in tensors.items()})
                updates += 1
        names = ("policy_loss", "vf_loss", "entropy", "kl")
        return dict(zip(names, (sums / updates).tolist(), strict=True))

    def _update(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        c = self.config
        logp_all = torch.log_softmax(self._logits(mb["obs"], mb.get("mask")), dim=-1)
        # p * log p with masked actions is 0 * -inf; those terms are 0. Zero log p before the product, not
        # after it (torch.where): the gradient of exp(x) * x at -inf is NaN, and where() would pass on 0 * NaN.
        entropy = -(logp_all.exp() * logp_all.masked_fill(~logp_all.isfinite(), 0.0)).sum(-1)
        losses = ppo_losses(
            new_logp=logp_all.gather(1, mb["actions"][:, None]).squeeze(1), old_logp=mb["logp"],
            advantages=mb["advantages"], values=self.vf(mb["obs"]).squeeze(-1), value_targets=mb["value_targets"],
            entropy=entropy, clip_param=c.clip_param, vf_clip_param=c.vf_clip_param,
            vf_loss_coeff=c.vf_loss_coeff, entropy_coeff=c.entropy_coeff)
        self.optimizer.zero_grad()
        losses["total_loss"].backward()
        if c.grad_clip is not None:
            self.optimizer.clip_grad_norm_(c.grad_clip)
        self.optimizer.step()
        return torch.stack([losses[k] for k in ("policy_loss", "vf_loss", "entropy", "kl")]).detach().cpu()

    def train_iteration(self, source: Sampler | None = None) -> dict[str, float]:
        """The lr from its schedule, train_batch_size env steps (own envs, or `source`'s), learn; our metric names."""
        start = time.perf_counter()
        lr = self.apply_lr_schedule()
        n = self.config.train_batch_size
        batch = self.collect(n) if source is None else source.sample(n)
        losses = self.learn(batch)
        return {**self.episode_metrics(), **losses, "lr": lr,
                "sps": batch["env_steps"] / (time.perf_counter() - start)}

    # ---- state --------------------------------------------------------------------------------

    def get_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """Policy and value network parameters as numpy arrays (what a rollout worker needs)."""
        return {name: {k: v.numpy() for k, v in state_dict_copy(net).items()}
                for name, net in (("pi", self.pi), ("vf", self.vf))}

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        for name, net in (("pi", self.pi), ("vf", self.vf)):
            net.load_state_dict({k: torch.as_tensor(v) for k, v in weights[name].items()})

    def get_state(self) -> dict[str, Any]:
        """Everything `set_state` needs to continue exactly; picklable, shares no memory with the learner."""
        return {"pi": state_dict_copy(self.pi), "vf": state_dict_copy(self.vf),
                "optimizer": self.optimizer.state_dict(), "rngs": self.rngs.get_state(),
                "stats": self.stats.get_state(), "env_steps": self.env_steps, "env": self.env.get_state()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `get_state`. This learner's config wins (PBT may have changed lr)."""
        self.pi.load_state_dict(state["pi"])
        self.vf.load_state_dict(state["vf"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rngs.set_state(state["rngs"])
        self.stats.set_state(state["stats"])
        self.env_steps = int(state["env_steps"])
        if not self.env.set_state(state["env"], seed=self.rngs.python.randrange(2**31)):
            self.stats.drop_running()

    def close(self) -> None:
        self.env.close()
