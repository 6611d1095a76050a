"""Our learners on a real GPU: K seeds in one learner, each training as it would alone there, for discrete and Box
actions, gSDE, images (the CNN) and DQN; and a GPU learner's checkpoint holds no CUDA tensor, so a machine without
a GPU restores it. CI has no GPU: this skips there, and runs where `torch.cuda.is_available()` (the wall-time
comparison is bench/seeds_per_trial.py's, not a test's)."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with a CUDA torch build"),
              pytest.mark.usefixtures("one_torch_thread", "full_fp32")]  # one_torch_thread: tests/conftest.py


@pytest.fixture
def full_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN convolutions run in TF32 by default on Ampere and later (matrix products do not): a 10-bit mantissa, so
    K seeds' batched convolution and one seed's own, summed by other kernels in another order, drift apart by about
    1e-3 in 3 iterations (seen on an H100: 9.9e-4 for the CNN case). Independence is a question of float32 sums."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)

DEVICE = "cuda"
PPO_SMALL = {"num_envs_per_env_runner": 4, "train_batch_size": 256, "minibatch_size": 128, "num_epochs": 2,
             "metrics_num_episodes_for_smoothing": 10}


def ppo_case(env_id: str, k: int, watched: tuple[int, ...], **overrides: Any):
    return pytest.param("ppo", env_id, {**PPO_SMALL, **overrides}, k, watched, id=f"ppo-{env_id}-K{k}")


def image_env() -> str:
    from tests.test_images import SPOT  # registers the MinAtar-shaped test env

    return SPOT


# K = 256 CartPole seeds is issue 16's GPU case. A first version asserted that over 200 of the 256 seeds' mean returns
# were distinct; on an H100 only 128 were (means of a few short episodes collide), which said nothing about
# independence: the watched seeds are now checked against themselves trained alone.
CASES = [
    ppo_case("CartPole-v1", 256, (0, 131, 255)),
    ppo_case("Pendulum-v1", 8, (0, 7), use_sde=True, sde_sample_freq=4, gamma=0.9, train_batch_size=512),
    ppo_case("Pendulum-v1", 4, (0, 3), observation_filter="MeanStdFilter", log_std_init=-0.5,
             train_batch_size=512),  # 200-step episodes: one ends in each env by the 2nd iteration
    ppo_case("image", 4, (0, 3), train_batch_size=128, minibatch_size=64),
    pytest.param("dqn", "CartPole-v1", {}, 8, (0, 7), id="dqn-CartPole-v1-K8"),
]


def build(algo: str, env_id: str, values: dict[str, Any], *, device: str = DEVICE, **more: Any):
    from tests.test_algos import small_dqn
    from tune_runner.algos import DQN, PPO, PPOConfig

    if algo == "ppo":
        return PPO(PPOConfig.from_dict({**values, **more}), env_id=env_id, device=device)
    return DQN(small_dqn(**values, **more), env_id=env_id, device=device)


def assert_weights_close(algo: str, together, seed: int, alone, *, atol: float) -> None:
    if algo == "ppo":
        from tests.test_seeds_ppo import weights_close
    else:
        from tests.test_seeds_dqn import weights_close
    weights_close(together, seed, alone, atol=atol)


@pytest.mark.parametrize(("algo", "env_id", "values", "k", "watched"), CASES)
def test_k_seeds_on_one_gpu_each_train_as_they_would_alone_there(algo, env_id, values, k, watched):
    """The watched seeds of a K-seed learner on the GPU against each trained alone (K = 1) on the GPU: the same
    episodes and env steps every iteration, the same weights after 3 iterations (to the tolerance of different
    CUDA kernels: a batched product sums in another order)."""
    env_id = image_env() if env_id == "image" else env_id
    together = build(algo, env_id, values, num_seeds=k, seed=7)
    alone = {i: build(algo, env_id, values, seed=together.seeds[i]) for i in watched}
    try:
        net = "pi" if algo == "ppo" else "q"
        assert next(getattr(together, net).parameters()).is_cuda
        for _ in range(3):
            result = together.train_iteration()
            for i, learner in alone.items():
                own = learner.train_iteration()
                assert (result[f"seed_{i}/episodes"], result[f"seed_{i}/env_steps"]) == \
                       (own["episodes"], own["env_steps"])
                assert result[f"seed_{i}/episode_return_mean"] == pytest.approx(own["episode_return_mean"], nan_ok=True)
        assert not math.isnan(result[f"seed_{k - 1}/episode_return_mean"])  # the last seed finished episodes
        assert f"seed_{k}/episode_return_mean" not in result
        for i, learner in alone.items():
            assert_weights_close(algo, together, i, learner, atol=1e-4)
    finally:
        for learner in (together, *alone.values()):
            learner.close()


def cuda_tensors(value: Any, path: str = "state") -> list[str]:
    """Where in a (nested) learner state a CUDA tensor sits."""
    if isinstance(value, torch.Tensor):
        return [path] if value.is_cuda else []
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in cuda_tensors(item, f"{path}[{key!r}]")]
    if isinstance(value, list | tuple):
        return [p for n, item in enumerate(value) for p in cuda_tensors(item, f"{path}[{n}]")]
    return []


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_gpu_learners_checkpoint_holds_no_cuda_tensor_and_a_cpu_learner_continues_it(algo):
    """A search on a GPU cluster, its checkpoint restored on a laptop: the state holds CPU tensors only, and a CPU
    learner restored from it acts with the same weights and trains on."""
    env_id, values = ("Pendulum-v1", PPO_SMALL) if algo == "ppo" else ("CartPole-v1", {})
    gpu = build(algo, env_id, values, num_seeds=2, seed=3)
    cpu = build(algo, env_id, values, device="cpu", num_seeds=2, seed=3)
    try:
        for _ in range(2):
            gpu.train_iteration()
        state = gpu.get_state()
        assert cuda_tensors(state) == []
        cpu.set_state(pickle.loads(pickle.dumps(state)))
        restored = cpu.get_weights()
        for net, arrays in gpu.get_weights().items():
            for key, array in arrays.items():
                assert (restored[net][key] == array).all(), (net, key)
        assert cpu.train_iteration()["env_steps"] > gpu.env_steps
    finally:
        gpu.close()
        cpu.close()
