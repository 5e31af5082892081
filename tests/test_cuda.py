"""The CUDA paths, on a machine with a GPU (skipped elsewhere: CI has none).

Policies put their model on CUDA when ``num_gpus > 0`` and a GPU is visible; batches
stay numpy (uint8 frames included) until ``to_tensors`` moves them to the device, and
weights, gradients and stats come back as numpy / floats.  These tests train each torch
trainer in-process on the GPU, check one update against the same update on the CPU, and
run the image pipeline and ``multi_gpu`` towers there.  No Ray: ``num_evaluators=0``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from hierl.algorithms.registry import get_trainer_class
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.optimizers.sgd import minibatch_sgd
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED
from hierl.sample_batch import SampleBatch
from tests.support import atari_env

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.timeout(300),
]

IN_PROCESS = {"num_evaluators": 0, "model": {"hiddens": [32]}, "seed": 0}
ON_POLICY = {
    **IN_PROCESS,
    "env": "CartPole-v1",
    "num_envs_per_evaluator": 2,
    "rollout_fragment_length": 32,
    "train_batch_size": 64,
}
OFF_POLICY = {
    **IN_PROCESS,
    "rollout_fragment_length": 8,
    "train_batch_size": 16,
    "learning_starts": 32,
    "timesteps_per_iteration": 0,
}
CONFIGS = {
    "PG": ON_POLICY,
    "A2C": ON_POLICY,
    "PPO": {**ON_POLICY, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
    "IMPALA": ON_POLICY,
    "APPO": {**ON_POLICY, "num_sgd_iter": 2, "sgd_minibatch_size": 32},
    "DQN": {**OFF_POLICY, "env": "CartPole-v1"},
    "DDPG": {**OFF_POLICY, "env": "Pendulum-v1", "random_timesteps": 16},
    "TD3": {**OFF_POLICY, "env": "Pendulum-v1", "random_timesteps": 16},
    "SAC": {**OFF_POLICY, "env": "Pendulum-v1", "random_timesteps": 16},
}


def _models(policy) -> list[torch.nn.Module]:
    return [m for m in vars(policy).values() if isinstance(m, torch.nn.Module)]


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_trainer_trains_on_the_gpu(algo: str) -> None:
    trainer = get_trainer_class(algo)({**CONFIGS[algo], "num_gpus": 1})
    try:
        policy = trainer.get_policy()
        assert policy.device.type == "cuda"
        assert _models(policy) and all(p.is_cuda for m in _models(policy) for p in m.parameters())
        before = policy.get_weights()
        for _ in range(8):
            result = trainer.train()
        after = policy.get_weights()
        assert all(isinstance(v, np.ndarray) for v in after.values())
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        assert all(np.isfinite(v).all() for v in after.values())
        assert result["timesteps_total"] > 0
    finally:
        trainer.stop()


@pytest.mark.parametrize("algo", ["PG", "PPO", "IMPALA", "APPO"])
def test_one_update_on_the_gpu_matches_the_cpu(algo: str) -> None:
    """The same weights and batch give the same update on both devices (fp32, MLP)."""
    cpu = get_trainer_class(algo)(CONFIGS[algo])
    gpu = get_trainer_class(algo)({**CONFIGS[algo], "num_gpus": 1})
    try:
        batch = cpu.local_evaluator.sample()
        gpu.get_policy().set_weights(cpu.get_policy().get_weights())
        cpu_stats = cpu.get_policy().learn_on_batch(copy.deepcopy(batch))
        gpu_stats = gpu.get_policy().learn_on_batch(copy.deepcopy(batch))
        want, got = cpu.get_policy().get_weights(), gpu.get_policy().get_weights()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
        assert gpu_stats["total_loss"] == pytest.approx(cpu_stats["total_loss"], rel=1e-4)
    finally:
        cpu.stop()
        gpu.stop()


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_a_non_finite_update_is_refused_on_the_gpu(algo: str) -> None:
    """An inf observation on the device: no step (weights and optimizer state equal bit
    for bit), the refusal counted, and the next batch trains (issue 35)."""
    trainer = get_trainer_class(algo)({**CONFIGS[algo], "num_gpus": 1})
    try:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        learn = getattr(policy, "learn_on_replay_batch", None) or policy.learn_on_batch
        learn(copy.deepcopy(batch))  # Adam has moments
        before = policy.get_state()
        bad = copy.deepcopy(batch)
        bad[SampleBatch.OBS] = np.array(bad[SampleBatch.OBS], dtype=np.float32)
        bad[SampleBatch.OBS].reshape(bad.count, -1)[3, 0] = np.inf
        out = learn(bad)
        stats = getattr(out, "stats", out)
        assert stats == {NONFINITE_GRADS_SKIPPED: 1.0}
        after = policy.get_state()
        torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True)
        stats = learn(copy.deepcopy(batch))
        assert getattr(stats, "stats", stats)[NONFINITE_GRADS_SKIPPED] == 0.0
    finally:
        trainer.stop()


@pytest.mark.parametrize("algo", ["PPO", "APPO"])
def test_minibatch_epochs_on_the_gpu_match_the_cpu(algo: str) -> None:
    """``minibatch_sgd`` with the batch loaded on the GPU once (``device_rows``) makes the
    CPU path's updates: the same permutations and minibatches."""
    cpu = get_trainer_class(algo)(CONFIGS[algo])
    gpu = get_trainer_class(algo)({**CONFIGS[algo], "num_gpus": 1})
    try:
        batch = cpu.local_evaluator.sample()
        gpu.get_policy().set_weights(cpu.get_policy().get_weights())
        assert gpu.get_policy().device_rows(copy.deepcopy(batch)) is not None
        assert cpu.get_policy().device_rows(copy.deepcopy(batch)) is None
        for trainer in (cpu, gpu):
            stats = minibatch_sgd(
                trainer.get_policy(), copy.deepcopy(batch), 2, 24, np.random.default_rng(3)
            )
            assert stats["num_updates"] == 2 * 3  # 64 rows: 24, 24, 16
        want, got = cpu.get_policy().get_weights(), gpu.get_policy().get_weights()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
    finally:
        cpu.stop()
        gpu.stop()


def test_impala_leaves_new_obs_in_host_memory() -> None:
    """V-trace reads V(new_obs) at run ends only: that column is not copied whole."""
    trainer = get_trainer_class("IMPALA")({**CONFIGS["IMPALA"], "num_gpus": 1})
    try:
        tensors = trainer.get_policy().to_tensors(trainer.local_evaluator.sample())
        assert tensors[SampleBatch.NEW_OBS].device.type == "cpu"
        assert tensors[SampleBatch.OBS].is_cuda and tensors[SampleBatch.REWARDS].is_cuda
    finally:
        trainer.stop()


def test_image_batches_stay_uint8_until_the_device() -> None:
    atari_env.register()
    trainer = get_trainer_class("PPO")(
        {
            "env": atari_env.ENV_ID,
            "num_evaluators": 0,
            "num_envs_per_evaluator": 2,
            "train_batch_size": 64,
            "sgd_minibatch_size": 32,
            "num_gpus": 1,
            "seed": 0,
        }
    )
    try:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        assert batch[SampleBatch.OBS].dtype == np.uint8
        tensors = policy.to_tensors(batch)
        assert tensors[SampleBatch.OBS].dtype == torch.uint8
        assert tensors[SampleBatch.OBS].is_cuda
        result = trainer.train()
        assert np.isfinite(result["learner/total_loss"])
    finally:
        trainer.stop()


def test_multi_gpu_towers_on_the_gpu_match_towers_on_the_cpu() -> None:
    """Two towers splitting the batch, on one GPU: the weights two CPU towers give."""
    cpu = get_trainer_class("PPO")(CONFIGS["PPO"])
    gpu = get_trainer_class("PPO")({**CONFIGS["PPO"], "num_gpus": 1})
    try:
        batch = cpu.local_evaluator.sample()
        gpu.get_policy().set_weights(cpu.get_policy().get_weights())
        for trainer in (cpu, gpu):
            learner = MultiDeviceLearner(trainer.get_policy(), num_towers=2)
            assert {d.type for d in learner.devices} == {trainer.get_policy().device.type}
            assert learner.load(copy.deepcopy(batch)) == batch.count
            learner.optimize(2, 32, np.random.default_rng(0))
            learner.close()
        want, got = cpu.get_policy().get_weights(), gpu.get_policy().get_weights()
        assert gpu.get_policy().device.type == "cuda"
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
    finally:
        cpu.stop()
        gpu.stop()
