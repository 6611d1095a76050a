"""K = 256 seeds of CartPole PPO in one learner on a real GPU. CI has none: this skips there, and runs where
`torch.cuda.is_available()` (the wall-time comparison is bench/seeds_per_trial.py's, not a test's)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with a CUDA torch build")


def test_256_seeds_train_on_one_gpu_with_their_own_metrics():
    from tune_runner.algos.config import PPOConfig
    from tune_runner.algos.ppo import PPO

    config = PPOConfig(num_envs_per_env_runner=4, train_batch_size=256, minibatch_size=128, num_epochs=2,
                       num_seeds=256, metrics_num_episodes_for_smoothing=10)
    learner = PPO(config, env_id="CartPole-v1", device="cuda")
    try:
        assert next(learner.pi.parameters()).is_cuda
        for _ in range(3):
            result = learner.train_iteration()
        returns = [result[f"seed_{i}/episode_return_mean"] for i in range(256)]
        assert len(set(returns)) > 200  # seeds that acted apart
        assert result["env_steps"] > 2 * 256
    finally:
        learner.close()
