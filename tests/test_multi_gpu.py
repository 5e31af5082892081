"""``multi_gpu`` and MultiDeviceLearner: equivalence with single-process SGD, sharding, learning.

Tolerances: one tower must reproduce ``minibatch_sgd`` bit for bit (same minibatch order,
same kernels).  K CPU towers average K slice gradients instead of taking one mean over
the union of the slices, which differs only by float32 summation order; after a few Adam
steps (eps 1e-5) the weights agree with the single-process reference to atol 1e-6.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import hierl.optimizers.multi_gpu  # noqa: F401  (registers "multi_gpu")
from hierl import ConfigError
from hierl.algorithms.pg import PGPolicy, PGTrainer
from hierl.algorithms.ppo import PPOConfig, PPOPolicy, PPOTrainer
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.optimizers.local import LocalOptimizer
from hierl.optimizers.multi_gpu import MultiGPUConfig, MultiGPUOptimizer
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.optimizers.sgd import minibatch_sgd
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from hierl.torch_policy_graph import LazyRows
from tests.support.helpers import RESULT_KEYS
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

ATOL = 1e-6
"""Multi-tower vs single-process reference (float32 summation order only)."""

TINY = {
    "env": "CartPole-v1",
    "train_batch_size": 64,
    "num_envs_per_evaluator": 2,
    "num_sgd_iter": 2,
    "sgd_minibatch_size": 32,
    "model": {"hiddens": [8, 8]},
}


POLICY_CONFIG = {
    "model": {"hiddens": [16, 16]},
    "normalize_advantages": False,  # per-minibatch statistics would differ per tower
    "entropy_coeff": 0.01,
    "kl_coeff": 0.2,
    "grad_clip": 0.5,
}


def _evaluator() -> PolicyEvaluator:
    config = PPOConfig.from_dict(POLICY_CONFIG)
    return PolicyEvaluator(
        EvaluatorSpec.of(
            "CartPole-v1",
            PPOPolicy,
            config,
            num_envs_per_evaluator=2,
            rollout_fragment_length=128,
            seed=0,
        )
    )


@pytest.fixture(scope="module")
def setup():
    """A PPO policy without batch statistics in its loss, its initial state, a fixed batch."""
    torch.manual_seed(0)
    ev = _evaluator()
    batch = ev.sample()
    assert batch.count == 256
    return ev.policy, copy.deepcopy(ev.policy.get_state()), batch


def reset(policy, state):
    policy.set_state(copy.deepcopy(state))
    return policy


def mean_stats(updates: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([u[k] for u in updates])) for k in updates[0]}


def assert_weights(actual, expected, **tol):
    assert actual.keys() == expected.keys()
    for name in expected:
        if tol:
            np.testing.assert_allclose(actual[name], expected[name], rtol=0, err_msg=name, **tol)
        else:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def test_one_tower_reproduces_minibatch_sgd_exactly(setup):
    policy, state, batch = setup
    expected_stats = minibatch_sgd(reset(policy, state), batch, 3, 48, np.random.default_rng(7))
    expected = policy.get_weights()

    learner = MultiDeviceLearner(reset(policy, state), num_towers=1)
    assert learner.load(batch) == 256
    stats = learner.optimize(3, 48, np.random.default_rng(7))  # 256 % 48 != 0: a short last one

    assert_weights(policy.get_weights(), expected)
    assert stats == expected_stats
    assert {"total_loss", "grad_gnorm", "policy_loss", "kl"} <= stats.keys()
    assert not np.allclose(
        policy.get_weights()["vf_head.weight"], state["weights"]["vf_head.weight"]
    )


def test_minibatch_sgd_on_loaded_rows_reproduces_the_host_path_exactly(setup, monkeypatch):
    """minibatch_sgd's accelerator path (``device_rows``: the batch loaded once, each
    minibatch a view of permuted rows) makes the host path's updates; forced on CPU here
    (on CUDA, tests/test_cuda.py)."""
    policy, state, batch = setup
    expected_stats = minibatch_sgd(reset(policy, state), batch, 3, 48, np.random.default_rng(7))
    expected = policy.get_weights()
    monkeypatch.setattr(policy, "device_rows", lambda b: LazyRows(policy.to_tensors(b)))
    stats = minibatch_sgd(reset(policy, state), batch, 3, 48, np.random.default_rng(7))
    assert_weights(policy.get_weights(), expected)
    assert stats == expected_stats
    assert stats["num_updates"] == 3 * 5  # 256 rows: 4 of 48 and a last one of 64


def test_two_towers_full_batch_match_single_process_update(setup):
    policy, state, batch = setup
    reset(policy, state)
    policy.kl_coeff = 0.35
    expected_stats = mean_stats([policy.learn_on_batch(batch) for _ in range(3)])
    expected = policy.get_weights()

    learner = MultiDeviceLearner(policy, num_towers=2)  # built before the reset below:
    reset(policy, state)  # towers must pick up the master's weights when optimizing
    policy.kl_coeff = 0.35  # and the loss must see the policy's current attributes
    assert learner.load(batch) == 256 and learner.shard_rows == 128
    stats = learner.optimize(3, 0, np.random.default_rng(0))
    learner.close()

    assert_weights(policy.get_weights(), expected, atol=ATOL)
    # Adam and clipping hide a gradient scale error from the weights; the stats show it.
    assert stats.pop("num_updates") == 3
    assert stats == pytest.approx(expected_stats, rel=1e-5)
    for tower in learner.towers[1:]:  # towers hold the master's weights after each step
        for p, q in zip(policy.model.parameters(), tower.parameters(), strict=True):
            assert torch.equal(p, q)


@pytest.mark.parametrize("num_towers", [2, 4])
def test_towers_split_each_minibatch_like_one_update_on_the_covered_rows(setup, num_towers):
    policy, state, batch = setup
    epochs, minibatch = 2, 64
    n = batch.count // num_towers
    per_tower = minibatch // num_towers
    rng = np.random.default_rng(3)
    reset(policy, state)
    updates = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        for start in range(0, n, per_tower):  # tower i takes perm[...] of shard i
            rows = np.concatenate(
                [i * n + perm[start : start + per_tower] for i in range(num_towers)]
            )
            covered = SampleBatch({k: v[rows] for k, v in batch.items()})
            updates.append(policy.learn_on_batch(covered))
    expected = policy.get_weights()

    learner = MultiDeviceLearner(reset(policy, state), num_towers=num_towers)
    learner.load(batch)
    stats = learner.optimize(epochs, minibatch, np.random.default_rng(3))
    learner.close()

    assert_weights(policy.get_weights(), expected, atol=ATOL)
    assert stats.pop("num_updates") == len(updates)
    assert stats == pytest.approx(mean_stats(updates), rel=1e-5)


@pytest.mark.parametrize(("name", "towers"), [("local", 0), ("multi_gpu", 1), ("multi_gpu", 2)])
def test_optimizer_step_on_a_fixed_batch_equals_the_single_process_reference(setup, name, towers):
    # The reference: three full-batch updates of one policy in one process.
    policy, state, batch = setup
    reset(policy, state)
    for _ in range(3):
        policy.learn_on_batch(batch)
    expected = policy.get_weights()

    ev = _evaluator()
    ev.policy.set_state(copy.deepcopy(state))
    ev.sample = lambda: batch  # every optimizer sees the same fixed batch
    settings = {"train_batch_size": 256, "num_sgd_iter": 3, "sgd_minibatch_size": 0}
    if name == "multi_gpu":
        opt = MultiGPUOptimizer(ev, config={**settings, "num_towers": towers})
    else:
        opt = LocalOptimizer(ev, config=settings)
    opt.step()
    opt.stop()
    assert (opt.num_steps_sampled, opt.num_steps_trained, opt.num_updates) == (256, 768, 3)
    # One tower runs the reference's very kernels: bit for bit.  Two: ATOL (see the top).
    assert_weights(ev.policy.get_weights(), expected, **({"atol": ATOL} if towers > 1 else {}))


def test_rows_beyond_a_multiple_of_towers_are_dropped(setup):
    policy, state, batch = setup
    odd = batch.slice(0, 67)
    reset(policy, state)
    policy.learn_on_batch(odd.slice(0, 66))
    expected = policy.get_weights()

    learner = MultiDeviceLearner(reset(policy, state), num_towers=2)
    assert learner.load(odd) == 66  # the last row is dropped
    learner.optimize(1, 0, np.random.default_rng(0))
    learner.close()
    assert_weights(policy.get_weights(), expected, atol=ATOL)
    assert MultiDeviceLearner(policy, num_towers=3).load(odd) == 66
    assert MultiDeviceLearner(policy, num_towers=4).load(odd) == 64


def test_optimizer_counts_dropped_rows(counting_env):
    config = {
        "env": counting_env,
        "env_config": {"length": 7},
        "num_envs_per_evaluator": 1,
        "rollout_fragment_length": 33,
        "train_batch_size": 33,
        "num_sgd_iter": 3,
        "model": {"hiddens": [8]},
        "optimizer": "multi_gpu",
        "optimizer_config": {"num_towers": 2},
    }
    with PGTrainer(config) as trainer:
        result = trainer.train()
    assert result["timesteps_this_iter"] == 33
    assert result["rows_loaded"] == 32
    assert result["num_steps_trained"] == 3 * 32
    assert result["num_towers"] == 2
    assert result["learner_samples_per_s"] > 0
    assert set(result) >= RESULT_KEYS | {"load_time_ms", "sync_time_ms"}


def test_multi_gpu_trainer_with_one_tower_matches_local():
    def run(optimizer):
        extra = {"optimizer_config": {"num_towers": 1}} if optimizer == "multi_gpu" else {}
        with PPOTrainer({**TINY, "optimizer": optimizer, **extra}) as trainer:
            results = [trainer.train() for _ in range(2)]
            return trainer.get_weights(), results[-1]

    local_weights, local_result = run("local")
    multi_weights, multi_result = run("multi_gpu")
    for pid in local_weights:
        assert_weights(multi_weights[pid], local_weights[pid])
    assert multi_result["learner/total_loss"] == local_result["learner/total_loss"]
    assert multi_result["num_steps_trained"] == local_result["num_steps_trained"] == 2 * 2 * 64


@pytest.mark.parametrize("num_towers", [1, 2])
def test_non_finite_loss_is_refused_and_leaves_weights(setup, num_towers):
    policy, state, batch = setup
    bad = batch.copy()
    bad[SampleBatch.VALUE_TARGETS] = np.full(batch.count, np.nan, np.float32)
    learner = MultiDeviceLearner(reset(policy, state), num_towers=num_towers)
    learner.load(bad)
    stats = learner.optimize(1, 64, np.random.default_rng(0))
    learner.close()
    assert stats == {"num_nonfinite_grads_skipped": 4.0, "num_updates": 0}
    assert_weights(policy.get_weights(), state["weights"])


def test_bad_settings_are_named(setup):
    policy, _, batch = setup
    with pytest.raises(ConfigError, match=r"num_towers.*must be >= 0"):
        MultiGPUConfig.from_dict({"num_towers": -1})
    with pytest.raises(ConfigError, match=r"sgd_minibatch_size.*>= num_towers \(4\)"):
        MultiGPUConfig.from_dict({"num_towers": 4, "sgd_minibatch_size": 3})
    with pytest.raises(ConfigError, match="did you mean 'num_towers'"):
        MultiGPUConfig.from_dict({"num_tower": 2})
    with pytest.raises(ValueError, match=r"devices\[0\] = meta.*policy's device"):
        MultiDeviceLearner(policy, devices=["meta", "cpu"])
    with pytest.raises(TypeError, match="TorchPolicyGraph"):
        MultiDeviceLearner(object())  # type: ignore[arg-type]
    learner = MultiDeviceLearner(policy, num_towers=2)
    with pytest.raises(RuntimeError, match="before load"):
        learner.optimize(1, 0, np.random.default_rng(0))
    learner.load(batch)
    with pytest.raises(ValueError, match="minibatch_size=1 is smaller than the number of towers"):
        learner.optimize(1, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="too small for 2 towers"):
        learner.load(batch.slice(0, 1))
    learner.close()


def test_optimizer_works_without_a_trainer(setup):
    ev = PolicyEvaluator(
        EvaluatorSpec.of(
            "CartPole-v1",
            PGPolicy,
            PGTrainer.config_class.from_dict({"model": {"hiddens": [8]}}),
            num_envs_per_evaluator=2,
            rollout_fragment_length=50,
            seed=1,
        )
    )
    opt = MultiGPUOptimizer(ev, config={"train_batch_size": 200, "num_towers": 2})
    before = ev.policy.get_weights()
    stats = opt.step()
    opt.stop()
    assert opt.num_steps_sampled == 200 and opt.num_steps_trained == 200
    assert "total_loss" in stats[DEFAULT_POLICY_ID]
    assert not np.array_equal(ev.policy.get_weights()["pi_head.weight"], before["pi_head.weight"])


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_ppo_cartpole_learns_on_two_towers_with_two_evaluators(ray_session):
    config = {
        "env": "CartPole-v1",
        "num_evaluators": 2,
        "num_envs_per_evaluator": 4,
        "num_cpus_per_evaluator": 0.5,
        "seed": SEED,
        "optimizer": "multi_gpu",
        "optimizer_config": {"num_towers": 2},
        "metrics_smoothing_episodes": 20,  # the mean follows the current policy (~10 iters)
    }
    with PPOTrainer(config) as trainer:
        assert len(trainer.evaluators.remote_evaluators) == 2
        run = train_until(trainer, 150, 30, unit="training_iteration")
    result = run.result
    assert result["num_towers"] == 2
    assert set(result) >= RESULT_KEYS | {"load_time_ms", "sync_time_ms", "learner_samples_per_s"}
    assert run.reached, run
