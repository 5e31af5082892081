"""The minibatch tail rule in every place minibatches are cut: local, multi_gpu, allreduce.

``hierl.sample_batch.minibatch_bounds`` decides (a remainder under half a minibatch joins
the last one); these tests check that each optimizer's SGD loop follows it, counting the
updates and the rows each update saw.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hierl.algorithms.ppo import PPOConfig, PPOPolicy
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.optimizers.allreduce.rank import learn_on_shard
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.optimizers.sgd import minibatch_sgd
from hierl.sample_batch import SampleBatch

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def evaluator_and_batch():
    """A tiny PPO evaluator and one 1150-row batch (1150 = 4 x 256 + 126)."""
    torch.manual_seed(0)
    config = PPOConfig.from_dict({"model": {"hiddens": [8]}, "normalize_advantages": True})
    ev = PolicyEvaluator(
        EvaluatorSpec.of(
            "CartPole-v1",
            PPOPolicy,
            config,
            num_envs_per_evaluator=1,
            rollout_fragment_length=1150,
            seed=0,
        )
    )
    batch = ev.sample()
    assert batch.count == 1150
    return ev, batch


def _record_rows(obj, method: str) -> list[int]:
    """Wrap ``obj.method(batch, ...)`` to record the row count of every call."""
    seen: list[int] = []
    inner = getattr(obj, method)

    def recording(batch, *args, **kwargs):
        seen.append(batch.count)
        return inner(batch, *args, **kwargs)

    setattr(obj, method, recording)
    return seen


@pytest.mark.parametrize(
    ("rows", "sizes"), [(1025, [256, 256, 256, 257]), (1150, [256] * 3 + [382])]
)
def test_local_sgd_merges_a_small_tail(evaluator_and_batch, rows, sizes):
    ev, batch = evaluator_and_batch
    seen = _record_rows(ev.policy, "learn_on_batch")
    try:
        stats = minibatch_sgd(ev.policy, batch.slice(0, rows), 2, 256, np.random.default_rng(0))
    finally:
        del ev.policy.learn_on_batch
    assert seen == sizes * 2 and stats["num_updates"] == 2 * len(sizes)


def test_allreduce_rank_merges_a_small_tail(evaluator_and_batch):
    # outside a group learn_on_shard is plain minibatch SGD through compute_gradients
    ev, batch = evaluator_and_batch
    seen = _record_rows(ev, "compute_gradients")
    try:
        result = learn_on_shard(ev, batch.slice(0, 1025), num_sgd_iter=2, sgd_minibatch_size=256)
    finally:
        del ev.compute_gradients
    assert seen == [256, 256, 256, 257] * 2 and result.num_updates == 8


@pytest.mark.parametrize(("towers", "updates_per_epoch"), [(1, 4), (2, 4)])
def test_multi_device_learner_merges_a_small_tail(evaluator_and_batch, towers, updates_per_epoch):
    # 1 tower: 1150 rows at 256 (tail 126 < 128); 2 towers: shards of 575 rows at 128
    # per tower (tail 63 < 64).  Without the rule each epoch would end with a 5th update.
    ev, batch = evaluator_and_batch
    learner = MultiDeviceLearner(ev.policy, num_towers=towers)
    try:
        assert learner.load(SampleBatch(batch)) == 1150
        stats = learner.optimize(2, 256, np.random.default_rng(0))
    finally:
        learner.close()
    assert stats["num_updates"] == 2 * updates_per_epoch
