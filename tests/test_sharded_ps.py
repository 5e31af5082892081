"""``sharded_ps``: exact sharding, sharded Adam == unsharded Adam, in-process and remote steps."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hierl.optimizers.sharded_ps  # noqa: F401  (registers "sharded_ps")
from hierl.algorithms.pg import PGConfig, PGPolicy, PGTrainer
from hierl.config import ConfigError
from hierl.evaluators import EvaluatorSet, EvaluatorSpec
from hierl.optimizers.sharded_ps import ShardedPSConfig, ShardedPSOptimizer
from hierl.optimizers.sharded_ps.param_server import ParameterShard
from hierl.optimizers.sharded_ps.sharding import ShardSpec
from hierl.sample_batch import DEFAULT_POLICY_ID
from tests.support.helpers import RESULT_KEYS, kill_and_wait
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

TINY = {
    "env": "CartPole-v1",
    "train_batch_size": 64,
    "num_envs_per_evaluator": 2,
    "model": {"hiddens": [8, 8]},
    "seed": 0,
}
PS = {"optimizer": "sharded_ps", "optimizer_config": {"num_shards": 3}}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- exact sharding ------------------------------------------------------------------------
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
FLOATS = st.sampled_from([np.float16, np.float32, np.float64])


@settings(max_examples=120, deadline=None)
@given(data=st.data(), dtype=FLOATS, num_shards=st.integers(1, 8))
def test_split_concat_is_bitwise_identity_for_any_shapes(data, dtype, num_shards):
    shapes = data.draw(st.lists(SHAPES, min_size=1, max_size=6))
    assume(sum(int(np.prod(s)) for s in shapes) >= num_shards)
    # any bit pattern of the dtype: NaNs with payloads, infinities, subnormals, -0.0
    arrays = [data.draw(hnp.arrays(dtype, s)) for s in shapes]
    names = [f"p{i}" for i in range(len(arrays))]
    spec = ShardSpec.from_arrays(names, arrays, num_shards)
    shards = spec.split(arrays)
    sizes = [s.size for s in shards]
    assert len(shards) == num_shards and all(s.ndim == 1 for s in shards)
    assert sum(sizes) == spec.total_size and max(sizes) - min(sizes) <= 1
    out = spec.concat(shards)
    assert all(same_bits(a, b) for a, b in zip(arrays, out, strict=True))
    by_name = spec.split(dict(zip(names, arrays, strict=True)))
    assert all(same_bits(a, b) for a, b in zip(by_name, shards, strict=True))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), num_shards=st.integers(1, 8))
def test_mixed_float_dtypes_widen_and_come_back_exactly(data, num_shards):
    shapes = data.draw(st.lists(SHAPES, min_size=1, max_size=5))
    assume(sum(int(np.prod(s)) for s in shapes) >= num_shards)
    dtypes = [data.draw(FLOATS) for _ in shapes]
    arrays = [
        data.draw(hnp.arrays(d, s, elements=st.floats(-1e4, 1e4, width=16)))
        for d, s in zip(dtypes, shapes, strict=True)
    ]
    spec = ShardSpec.from_arrays([f"p{i}" for i in range(len(arrays))], arrays, num_shards)
    assert spec.dtype == np.result_type(*dtypes)
    out = spec.concat(spec.split(arrays))
    assert all(same_bits(a, b) for a, b in zip(arrays, out, strict=True))


def test_shard_layout_is_contiguous_and_nearly_even():
    spec = ShardSpec(["w", "b", "s"], [(2, 3), (3,), ()], [np.float32] * 3, num_shards=4)
    assert spec.shard_sizes == [3, 3, 2, 2] and spec.bounds == [0, 3, 6, 8, 10]
    shards = spec.split([np.arange(6.0).reshape(2, 3), np.arange(6.0, 9.0), np.float32(9)])
    assert [s.tolist() for s in shards] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert spec.shard_params(2) == ["b"] and spec.shard_params(3) == ["b", "s"]


def test_sharding_errors_name_the_bad_value():
    spec = ShardSpec(["w", "b"], [(2, 2), (3,)], [np.float32] * 2, num_shards=2)
    with pytest.raises(ValueError, match=r"'b' has shape \(2,\), expected \(3,\)"):
        spec.split([np.zeros((2, 2)), np.zeros(2)])
    with pytest.raises(ValueError, match="got 1 arrays for 2 parameters"):
        spec.split([np.zeros((2, 2))])
    with pytest.raises(ValueError, match=r"no array for parameter\(s\) \['b'\]"):
        spec.split({"w": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="got 1 shards, expected 2"):
        spec.concat([np.zeros(7)])
    with pytest.raises(ValueError, match=r"shard 1 \(parameters \['b'\]\) has shape \(4,\)"):
        spec.concat([np.zeros(4), np.zeros(4)])
    with pytest.raises(ValueError, match=r"num_shards=8 .* total number of elements \(7\)"):
        ShardSpec(["w", "b"], [(2, 2), (3,)], [np.float32] * 2, num_shards=8)
    with pytest.raises(ValueError, match="num_shards=0"):
        ShardSpec(["w"], [(2,)], [np.float32], num_shards=0)
    with pytest.raises(ValueError, match="'n' has dtype int64"):
        ShardSpec(["n"], [(2,)], [np.int64], num_shards=1)
    with pytest.raises(ValueError, match=r"repeated: \['w'\]"):
        ShardSpec(["w", "w"], [(2,), (2,)], [np.float32] * 2, num_shards=1)


# -- sharded Adam == the policy's Adam ------------------------------------------------------
def tiny_policy(lr: float = 0.01) -> PGPolicy:
    config = PGConfig.from_dict({**TINY, "lr": lr})
    return PGPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), config)


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_parameter_shards_apply_the_same_update_as_the_unsharded_policy(num_shards):
    policy = tiny_policy()
    names = policy.gradient_names()
    start = policy.get_weights()
    spec = ShardSpec.from_arrays(names, [start[n] for n in names], num_shards)
    shards = [ParameterShard(w.copy(), lr=0.01) for w in spec.split(start)]
    rng = np.random.default_rng(0)
    for _ in range(5):
        grads = [rng.normal(size=start[n].shape).astype(np.float32) for n in names]
        policy.apply_gradients(grads)
        new = [s.apply_gradients(g) for s, g in zip(shards, spec.split(grads), strict=True)]
        expected = policy.get_weights()
        for name, value in zip(names, spec.concat(new), strict=True):
            np.testing.assert_allclose(value, expected[name], rtol=1e-6, atol=1e-7)
    assert not np.allclose(expected[names[0]], start[names[0]])  # the weights did move
    assert [s.stats()["num_updates"] for s in shards] == [5.0] * num_shards


def test_parameter_shard_state_round_trip_and_shape_errors():
    shard = ParameterShard(np.zeros(4, np.float32), lr=0.1)
    assert shard.get_optimizer_state()["step"] == 0.0
    shard.apply_gradients(np.ones(4, np.float32))
    state = shard.get_optimizer_state()
    twin = ParameterShard(shard.get_weights(), lr=0.1)
    twin.set_optimizer_state(state)
    np.testing.assert_array_equal(
        twin.apply_gradients(np.full(4, 2.0, np.float32)),
        shard.apply_gradients(np.full(4, 2.0, np.float32)),
    )
    with pytest.raises(ValueError, match=r"gradient shard has shape \(3,\), this shard holds"):
        shard.apply_gradients(np.ones(3, np.float32))


# -- the optimizer, in-process (num_evaluators=0) -------------------------------------------
def weights_of(trainer: PGTrainer) -> dict[str, np.ndarray]:
    return trainer.get_policy().get_weights()


def test_in_process_sharded_ps_equals_the_unsharded_local_optimizer():
    def run(extra: dict) -> list[dict[str, np.ndarray]]:
        with PGTrainer({**TINY, **extra}) as trainer:
            return [(trainer.train(), weights_of(trainer))[1] for _ in range(3)]

    local, sharded = run({}), run(PS)
    for a, b in zip(local, sharded, strict=True):
        for name in a:
            np.testing.assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-7)
    assert not np.array_equal(local[0]["pi_head.weight"], local[-1]["pi_head.weight"])


def test_in_process_step_counters_and_results():
    with PGTrainer({**TINY, **PS}) as trainer:
        result = trainer.train()
        result = trainer.train()
        opt = trainer.optimizer
        assert set(result) >= RESULT_KEYS
        assert {"grad_time_ms", "apply_time_ms", "sync_time_ms"} <= set(result)
        # one 64-row sample per gradient, one gradient per 64-row step
        assert result["num_gradients_applied"] == 2 and result["timesteps_total"] == 128
        assert result["num_steps_trained"] == 128 and result["num_shards"] == 3
        assert result["bytes_through_driver"] == 0 and result["in_flight"] == 0
        assert "learner/policy_loss" in result
        shard_weights = opt.get_shard_weights()
        for name, value in shard_weights.items():
            np.testing.assert_array_equal(value, weights_of(trainer)[name])
        assert [s["num_updates"] for s in opt.servers.stats()] == [2.0] * 3


def test_grads_per_step_and_lr_schedule_reach_the_shards():
    config = {**TINY, **PS, "lr_schedule": [[0, 0.01], [128, 0.001]]}
    config["optimizer_config"] = {"num_shards": 2, "grads_per_step": 2}
    with PGTrainer(config) as trainer:
        opt = trainer.optimizer
        assert trainer.train()["timesteps_this_iter"] == 128
        assert opt.num_gradients_applied == 2
        assert [s.optimizer.param_groups[0]["lr"] for s in opt.shards] == [0.01, 0.01]
        trainer.train()  # starts at timestep 128: the schedule's end
        assert [s.optimizer.param_groups[0]["lr"] for s in opt.shards] == [0.001, 0.001]


def test_weights_set_from_outside_are_adopted_by_the_shards():
    with PGTrainer({**TINY, **PS}) as trainer:
        trainer.train()
        setters = [
            trainer.set_weights,  # through the optimizer's push_local_weights hook
            trainer.local_evaluator.set_weights,  # behind its back: found at the next step
        ]
        for set_weights in setters:
            before = weights_of(trainer)
            shifted = {k: v + 1.0 for k, v in before.items()}
            set_weights({DEFAULT_POLICY_ID: shifted})
            trainer.train()
            after = weights_of(trainer)
            for name in trainer.optimizer.spec.names:
                assert np.max(np.abs(after[name] - shifted[name])) < 0.2
                assert np.min(np.abs(after[name] - before[name])) > 0.8
            for name, value in trainer.optimizer.get_shard_weights().items():
                np.testing.assert_array_equal(value, after[name])


def test_checkpoint_keeps_adam_moments_across_shard_counts(tmp_path):
    with PGTrainer({**TINY, **PS}) as trainer:
        trainer.train()
        trainer.train()
        saved = trainer.optimizer.save()
        path = trainer.save(tmp_path / "ckpt")
    config = {**TINY, **PS, "optimizer_config": {"num_shards": 2}}
    with PGTrainer(config) as restored:
        restored.restore(path)
        state = restored.optimizer.save()
        assert state["num_gradients_applied"] == 2 and state["adam"]["step"] == 2.0
        for key in ("exp_avg", "exp_avg_sq"):
            for name, value in saved["adam"][key].items():
                np.testing.assert_array_equal(state["adam"][key][name], value)
                assert np.any(value != 0)


def test_config_errors():
    with pytest.raises(ConfigError, match="'num_shards' = 0 is invalid"):
        ShardedPSConfig.from_dict({"num_shards": 0})
    with pytest.raises(ConfigError, match="did you mean 'num_shards'"):
        ShardedPSConfig.from_dict({"num_shard": 2})
    with pytest.raises(ConfigError, match="'max_in_flight_per_evaluator' = 0"):
        ShardedPSConfig.from_dict({"max_in_flight_per_evaluator": 0})
    too_many = {**TINY, **PS, "optimizer_config": {"num_shards": 10**6}}
    with pytest.raises(ConfigError, match=r"'num_shards' = 1000000 is invalid: at most \d+"):
        PGTrainer(too_many)


# -- the optimizer with remote evaluators -----------------------------------------------------
@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_pg_cartpole_learns_on_two_shards_with_two_evaluators(ray_session):
    config = {
        "env": "CartPole-v1",
        "seed": SEED,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "rollout_fragment_length": 50,  # 8 envs x 50 = 400 rows per gradient
        "train_batch_size": 800,
        "optimizer": "sharded_ps",
        "optimizer_config": {"num_shards": 2},
    }
    with PGTrainer(config) as trainer:
        run = train_until(trainer, 150, 80_000)
        assert run.reached, run
        opt = trainer.optimizer
        weights_bytes = sum(v.nbytes for v in opt.get_shard_weights().values())
        before = opt.stats()
        result = trainer.train()
        # the driver's weights are the shards' weights, and the only bulk data through the
        # driver is one fetch of the shards per step: gradients went actor to actor
        for name, value in opt.get_shard_weights().items():
            np.testing.assert_array_equal(value, weights_of(trainer)[name])
        assert result["bytes_through_driver"] - before["bytes_through_driver"] == weights_bytes
        assert result["num_gradients_applied"] - before["num_gradients_applied"] == 2
        assert result["num_weight_pulls"] > before["num_weight_pulls"]
        assert result["in_flight"] == 4  # two per evaluator, across steps


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_weight_pushes_and_dead_evaluators_do_not_break_step(ray_session):
    spec = EvaluatorSpec.of(
        "CartPole-v1",
        PGPolicy,
        PGConfig.from_dict(TINY),
        num_envs_per_evaluator=2,
        rollout_fragment_length=16,
        seed=0,
    )
    evaluators = EvaluatorSet(
        spec, num_evaluators=2, num_cpus_per_evaluator=0.5, recreate_failed_evaluators=False
    )
    opt = ShardedPSOptimizer(evaluators, config={"num_shards": 2, "grads_per_step": 3})
    local = evaluators.local_evaluator
    try:
        opt.step()
        assert opt.stats()["in_flight"] == 4  # pipelined: two per evaluator
        # new weights from outside: in-flight gradients (on the old weights) are dropped
        shifted = {k: v + 1.0 for k, v in local.get_weights()[DEFAULT_POLICY_ID].items()}
        local.set_weights({DEFAULT_POLICY_ID: shifted})
        opt.push_local_weights(opt.global_vars())
        assert opt.stats()["in_flight"] == 0 and opt.stats()["num_dropped_gradients"] == 4
        for name, value in opt.get_shard_weights().items():
            np.testing.assert_array_equal(value, shifted[name])
        opt.step()
        for name, value in local.get_weights()[DEFAULT_POLICY_ID].items():
            assert np.max(np.abs(value - shifted[name])) < 0.2
        kill_and_wait(evaluators.remote_evaluators[0])
        for _ in range(2):
            opt.step()
        stats = opt.stats()
        assert stats["num_healthy_evaluators"] == 1 and stats["in_flight"] == 2
        assert stats["num_gradients_applied"] == 12
        kill_and_wait(evaluators.remote_evaluators[1])
        with pytest.raises(RuntimeError, match=r"all 2 remote evaluators (have )?died"):
            for _ in range(5):  # gradients already finished may still be applied first
                opt.step()
    finally:
        opt.stop()
        evaluators.stop()
