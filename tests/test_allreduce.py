"""``allreduce`` optimizer and the collective helpers: exactness, equivalence, learning.

Tolerances: averaging two half-batch gradients instead of taking one mean over the full
batch differs only by float32 summation order; after three clipped Adam steps (eps 1e-5)
the weights agree with the single-process reference to ``rtol=1e-5, atol=1e-6``.  The two
replicas receive the same allreduced bytes and must stay bit-identical.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import ray

import hierl.optimizers.allreduce  # noqa: F401  (registers "allreduce")
from hierl import ConfigError
from hierl.algorithms.pg import PGConfig, PGPolicy, PGTrainer
from hierl.evaluators import EvaluatorSet, EvaluatorSpec
from hierl.optimizers.allreduce import collective
from hierl.optimizers.allreduce.optimizer import AllReduceConfig, ReplicaDivergenceError
from hierl.optimizers.allreduce.rank import disband_group, form_group, learn_on_shard
from hierl.optimizers.allreduce.replica_state import (
    policy_states,
    set_policy_states,
    weights_digest,
)
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from tests.support.helpers import RESULT_KEYS
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

RTOL, ATOL = 1e-5, 1e-6
"""Two-rank allreduce vs single-process reference (float32 summation order only)."""

GRAD_CLIP = 0.05
"""Small enough that every update in the equivalence test is clipped."""

POLICY_CONFIG = {
    "env": "CartPole-v1",
    "model": {"hiddens": [16, 16]},
    "lr": 0.01,
    "grad_clip": GRAD_CLIP,
    "normalize_advantages": False,  # a batch statistic: per-rank shards would differ
}


def _get(refs):
    return ray.get(refs, timeout=60)


def _weights(evaluator_or_actor) -> dict[str, np.ndarray]:
    if isinstance(evaluator_or_actor, ray.actor.ActorHandle):
        return _get(evaluator_or_actor.get_weights.remote())[DEFAULT_POLICY_ID]
    return evaluator_or_actor.get_weights()[DEFAULT_POLICY_ID]


@pytest.fixture(scope="module")
def group(ray_session):
    """Two remote PG evaluators (same initial weights) forming a gloo group."""
    spec = EvaluatorSpec.of(
        "CartPole-v1",
        PGPolicy,
        PGConfig.from_dict(POLICY_CONFIG),
        num_envs_per_evaluator=2,
        rollout_fragment_length=32,
        seed=0,
    )
    evs = EvaluatorSet(spec, num_evaluators=2, num_cpus_per_evaluator=0.25, get_timeout_s=60)
    info = form_group(evs.remote_evaluators, timeout_s=60)
    assert (info.world_size, info.backend) == (2, "gloo")
    yield evs
    disband_group(evs.remote_evaluators)
    evs.stop()


def _reset(evs: EvaluatorSet) -> PGPolicy:
    """A fresh reference policy; every replica gets its full state (weights and Adam)."""
    policy = evs.local_evaluator.policy
    ref = PGPolicy(policy.observation_space, policy.action_space, policy.config)
    states = {DEFAULT_POLICY_ID: ref.get_state()}
    _get([e.apply.remote(set_policy_states, states) for e in evs.remote_evaluators])
    return ref


def _fixed_batch(evs: EvaluatorSet, rows: int) -> SampleBatch:
    local = evs.local_evaluator
    batches = []
    while sum(b.count for b in batches) < rows:
        batches.append(local.sample())
    return SampleBatch.concat_samples(batches).slice(0, rows)


# -- collective helpers ----------------------------------------------------------------
@pytest.mark.ray
def test_allreduce_mean_is_exact_mean_and_shapes_round_trip(group):
    shapes = [(2, 3), (4, 1, 2), (), (0, 3), (5,)]
    per_rank = [
        [np.arange(math.prod(s), dtype=np.float32).reshape(s) * (r + 1) + r for s in shapes]
        for r in range(2)
    ]
    per_rank[1][4] = np.array([7, -3, 0, 1, 2], dtype=np.int64)  # ints are averaged too

    def _allreduce_in(evaluator, arrays, count):  # local: Ray pickles it by value
        return collective.allreduce_mean(arrays), collective.allreduce_min_int(count)

    refs = [
        e.apply.remote(_allreduce_in, arrays, count)
        for e, arrays, count in zip(group.remote_evaluators, per_rank, [70, 64], strict=True)
    ]
    results = _get(refs)
    for out, count in results:
        assert count == 64
        assert [o.shape for o in out] == shapes
        for o, a, b in zip(out, *per_rank, strict=True):
            assert o.dtype == np.float32
            np.testing.assert_array_equal(o, (a.astype(np.float64) + b) / 2)


def test_world_of_one_is_identity_and_init_is_idempotent():
    address = f"127.0.0.1:{collective.free_port()}"
    assert collective.current_group() is None
    try:
        info = collective.init_group(0, 1, address, timeout_s=30)
        assert collective.init_group(0, 1, address, timeout_s=30) is info  # no-op
        assert (collective.rank(), collective.world_size()) == (0, 1)
        arrays = [np.ones((2, 2), np.float64)]
        out = collective.allreduce_mean(arrays)
        assert out[0] is arrays[0]
        assert collective.allreduce_min_int(5) == 5
    finally:
        collective.destroy_group()
    assert collective.current_group() is None and collective.world_size() == 1
    with pytest.raises(ValueError, match="rank 2 is invalid for world_size 2"):
        collective.init_group(2, 2, address)
    with pytest.raises(ValueError, match="'localhost' must be 'host:port'"):
        collective.init_group(0, 1, "localhost")
    with pytest.raises(ValueError, match="backend 'mpi' is not supported"):
        collective.init_group(0, 1, address, backend="mpi")


# -- evaluator-side learning -----------------------------------------------------------
@pytest.mark.ray
def test_two_ranks_equal_single_process_reference_and_stay_bit_identical(group):
    ref = _reset(group)
    initial = ref.get_weights()
    batch = _fixed_batch(group, 128)
    halves = [batch.slice(0, 64), batch.slice(64, 128)]
    refs = [
        e.apply.remote(learn_on_shard, half, num_sgd_iter=3, sgd_minibatch_size=0, seed=0)
        for e, half in zip(group.remote_evaluators, halves, strict=True)
    ]
    results = _get(refs)
    ref_stats = [ref.learn_on_batch(batch) for _ in range(3)]

    # clipping was active in every update, so the test covers "clip the average"
    assert min(s["grad_gnorm"] for s in ref_stats) > GRAD_CLIP
    expected_gnorm = np.mean([s["grad_gnorm"] for s in ref_stats])
    for r in results:
        assert (r.rows_trained, r.num_updates, r.num_allreduce_calls) == (64, 3, 4)
        assert r.stats["grad_gnorm"] == pytest.approx(expected_gnorm, rel=1e-4)
    w0, w1 = (_weights(e) for e in group.remote_evaluators)
    expected = ref.get_weights()
    for name in expected:
        np.testing.assert_array_equal(w0[name], w1[name])
        np.testing.assert_allclose(w0[name], expected[name], rtol=RTOL, atol=ATOL)
    assert max(np.abs(expected[n] - initial[n]).max() for n in expected) > 100 * ATOL


@pytest.mark.ray
def test_uneven_shards_are_trimmed_and_minibatches_split_across_ranks(group):
    _reset(group)
    batch = _fixed_batch(group, 134)
    shards = [batch.slice(0, 70), batch.slice(70, 134)]
    refs = [
        e.apply.remote(learn_on_shard, shard, num_sgd_iter=2, sgd_minibatch_size=32, seed=3)
        for e, shard in zip(group.remote_evaluators, shards, strict=True)
    ]
    results = _get(refs)
    # 64 common rows, 16 per rank per global minibatch of 32: 4 updates x 2 epochs
    for r in results:
        assert (r.rows_trained, r.num_updates, r.num_allreduce_calls) == (64, 8, 9)
    digests = _get([e.apply.remote(weights_digest) for e in group.remote_evaluators])
    assert digests[0] == digests[1]


@pytest.mark.ray
def test_nonfinite_loss_on_one_rank_is_refused_on_every_rank_without_deadlock(group):
    _reset(group)
    batch = _fixed_batch(group, 64)
    bad = batch.copy()
    bad[SampleBatch.ADVANTAGES][5] = np.nan
    before = [_weights(e) for e in group.remote_evaluators]
    refs = [
        e.apply.remote(learn_on_shard, b, num_sgd_iter=1, seed=0)
        for e, b in zip(group.remote_evaluators, [bad, batch], strict=True)
    ]
    for ref in refs:  # well within the group timeout (60 s): nobody waits for a lost rank
        result = ray.get(ref, timeout=30)
        assert result.num_updates == 0
        assert result.stats == {"num_nonfinite_grads_skipped": 1.0}
    for e, w in zip(group.remote_evaluators, before, strict=True):
        after = _weights(e)
        for name in w:
            np.testing.assert_array_equal(after[name], w[name])
    # and training goes on, in step on every rank
    refs = [e.apply.remote(learn_on_shard, batch, seed=0) for e in group.remote_evaluators]
    assert [r.num_updates for r in _get(refs)] == [1, 1]
    w0, w1 = (_weights(e) for e in group.remote_evaluators)
    for name in w0:
        np.testing.assert_array_equal(w0[name], w1[name])
    assert any(not np.array_equal(w0[n], before[0][n]) for n in w0)


# -- the optimizer ---------------------------------------------------------------------
def test_config_is_validated():
    with pytest.raises(ConfigError, match="'check_replicas_every' = -1 is invalid"):
        AllReduceConfig.from_dict({"check_replicas_every": -1})
    with pytest.raises(ConfigError, match="did you mean 'group_timeout_s'"):
        AllReduceConfig.from_dict({"group_timeout": 5.0})


def test_zero_evaluators_in_process_equals_local_optimizer():
    """A group of one is plain SGD: same weights as ``local`` (lr schedule and clip on)."""
    config = {
        **POLICY_CONFIG,
        "train_batch_size": 200,
        "num_envs_per_evaluator": 2,
        "lr_schedule": [[0, 0.01], [400, 0.001]],
        "seed": 3,
    }
    runs = {}
    for name in ("local", "allreduce"):
        opt_config = {"check_replicas_every": 1} if name == "allreduce" else {}
        with PGTrainer({**config, "optimizer": name, "optimizer_config": opt_config}) as t:
            results = [t.train() for _ in range(3)]
            runs[name] = (t.get_weights()[DEFAULT_POLICY_ID], results[-1])
            lr = t.get_policy().optimizer.param_groups[0]["lr"]
    (w_local, _), (w_ar, r) = runs["local"], runs["allreduce"]
    for name in w_local:
        np.testing.assert_array_equal(w_ar[name], w_local[name])
    assert lr == pytest.approx(0.001)  # the schedule reached its end at 400 steps
    assert set(r) >= RESULT_KEYS | {"allreduce_time_ms", "sync_time_ms"}
    assert r["world_size"] == 1 and r["num_allreduce_calls"] == 0
    assert r["replicas_identical"] == 1 and r["bytes_through_driver"] == 0
    assert r["timesteps_total"] == r["num_steps_trained"] == 600


def _remote_moments(trainer) -> list[dict]:
    refs = [e.apply.remote(policy_states) for e in trainer.evaluators.remote_evaluators]
    return [s[DEFAULT_POLICY_ID]["optimizer"]["state"] for s in _get(refs)]


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_pg_trainer_learns_cartpole_with_two_evaluators(ray_session, tmp_path):
    config = {
        "env": "CartPole-v1",
        "optimizer": "allreduce",
        "optimizer_config": {"check_replicas_every": 1},
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "seed": SEED,
    }
    saved = {}

    def check(result):
        assert result["replicas_identical"] == 1
        if result["training_iteration"] == 1:
            saved["checkpoint"] = t.save(tmp_path / "ckpt")
            saved["moments"] = copy.deepcopy(t.get_policy().get_state()["optimizer"]["state"])

    with PGTrainer(config) as t:
        assert t.optimizer.name == "allreduce"
        run = train_until(t, 150, 50, unit="training_iteration", on_result=check)
        assert run.reached, run
        result, checkpoint = run.result, saved["checkpoint"]
        assert result["world_size"] == 2
        assert result["num_allreduce_calls"] == 2 * result["training_iteration"]
        assert result["timesteps_total"] == result["num_steps_trained"]
        # the driver holds rank 0's policy; the replicas are bit-identical to it
        local = t.get_weights()[DEFAULT_POLICY_ID]
        weights_size = sum(w.nbytes for w in local.values())
        assert weights_size < result["bytes_through_driver"] < 4 * weights_size
        for e in t.evaluators.remote_evaluators:
            remote = _weights(e)
            for name in local:
                np.testing.assert_array_equal(remote[name], local[name])

        # restoring a checkpoint gives every replica its optimizer moments, too
        t.restore(checkpoint)
        for moments in _remote_moments(t):
            for idx, s in saved["moments"].items():
                np.testing.assert_array_equal(moments[idx]["exp_avg_sq"], s["exp_avg_sq"])
        result = t.train()
        assert result["replicas_identical"] == 1 and result["training_iteration"] == 2

        # a replica changed behind the optimizer's back is caught on the next step
        bumped = {DEFAULT_POLICY_ID: {k: v + 1e-3 for k, v in local.items()}}
        _get(t.evaluators.remote_evaluators[1].set_weights.remote(bumped))
        with pytest.raises(ReplicaDivergenceError, match="replicas diverged at step"):
            t.train()
        assert t.optimizer.stats()["replicas_identical"] == 0
