"""Fault tolerance: failed evaluators are recreated (or dropped, or end training), env
errors are reported clearly, and lost replay / parameter shards are restored."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
import pytest

from hierl.algorithms.dqn import ApexTrainer
from hierl.algorithms.impala import IMPALATrainer
from hierl.algorithms.pg import PGConfig, PGPolicy, PGTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.evaluators import EnvError, EvaluatorSet, EvaluatorSpec
from hierl.evaluators.evaluator_set import EvaluatorFailureError
from hierl.optimizers.apex.replay_shard import ShardedReplayConfig
from hierl.optimizers.apex.sharded_replay import ShardedReplay
from hierl.optimizers.task_pool import TaskPool
from hierl.policy_graph import GlobalVars
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from tests.support.helpers import kill_and_wait
from tests.support.learning_configs import APEX_CARTPOLE, IMPALA_CARTPOLE
from tests.support.learning_runs import SEED, LearningRun, train_until

pytestmark = [pytest.mark.ray]

TIMEOUT_S = 120


class FlakyCartPole(gym.Wrapper):
    """CartPole that raises on its ``fail_at_step``-th step (counted over its lifetime).

    Only the env of evaluator ``fail_worker`` (vector slot 0) fails; with ``marker`` (a
    file path) it fails once per test: the first failure creates the file.
    """

    def __init__(self, config):
        super().__init__(gym.make("CartPole-v1"))
        self.fail_at = int(config.get("fail_at_step", 0))
        self.marker = config.get("marker")
        self.armed = (
            config.worker_index == config.get("fail_worker", 1) and config.vector_index == 0
        )
        self.steps = 0

    def step(self, action):
        self.steps += 1
        first = self.marker is None or not os.path.exists(self.marker)
        if self.armed and self.steps == self.fail_at and first:
            if self.marker is not None:
                open(self.marker, "w").close()
            raise RuntimeError(f"flaky env broke at step {self.steps}")
        return self.env.step(action)


class ResetFailsEnv(gym.Env):
    """Fails in every ``reset``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        raise ValueError("this env cannot reset")

    def step(self, action):
        raise AssertionError("never reached")


TINY_PG = {"model": {"hiddens": [8, 8]}, "lr": 1e-2}


def _remote_weights(ray, actor):
    return ray.get(actor.get_weights.remote(), timeout=TIMEOUT_S)[DEFAULT_POLICY_ID]


def _assert_same_weights(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def _assert_same_tree(a, b) -> None:
    """Nested dicts of arrays and scalars are exactly equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _assert_same_tree(a[k], b[k])
    else:
        np.testing.assert_array_equal(a, b)


def _train_until(
    trainer, threshold: float, budget: int, kill, unit: str = "training_iteration"
) -> LearningRun:
    """Train up to ``budget`` (of ``unit``), calling ``kill(trainer)`` after the second
    iteration; the threshold counts from the third iteration on (after the failure)."""

    def after_second(result):
        if result["training_iteration"] == 2:
            kill(trainer)

    return train_until(
        trainer,
        threshold,
        budget,
        unit=unit,
        ready=lambda result: result["training_iteration"] >= 3,
        on_result=after_second,
    )


# -- the evaluator set -----------------------------------------------------------------
def test_recreated_evaluator_gets_weights_filters_and_counters_before_sampling(ray_session):
    ray = ray_session
    spec = EvaluatorSpec.of(
        "CartPole-v1",
        PGPolicy,
        PGConfig.from_dict(TINY_PG),
        rollout_fragment_length=20,
        observation_filter="MeanStdFilter",
        seed=0,
    )
    evaluators = EvaluatorSet(spec, num_evaluators=2, num_cpus_per_evaluator=0.25)
    try:
        local = evaluators.local_evaluator
        local.sample()  # the local filter has statistics now
        shifted = {k: v + 0.5 for k, v in local.get_weights()[DEFAULT_POLICY_ID].items()}
        local.set_weights({DEFAULT_POLICY_ID: shifted})
        evaluators.set_global_vars(GlobalVars(timestep=1234))
        old = evaluators.remote_evaluators[0]
        error = kill_and_wait(old)
        new = evaluators.handle_failure(old, error)
        # nothing else was sent to it: what it holds came with its recreation
        assert evaluators.remote_evaluators[0] is new and new != old
        assert ray.get(new.ping.remote(), timeout=TIMEOUT_S) == 1  # the same worker index
        _assert_same_weights(_remote_weights(ray, new), shifted)
        remote_filters = ray.get(new.get_filters.remote(False), timeout=TIMEOUT_S)
        assert remote_filters[DEFAULT_POLICY_ID]["rs"]["n"] > 0
        _assert_same_tree(remote_filters, local.get_filters(flush_after=False))
        timestep = ray.get(new.apply.remote(lambda ev: ev.policy.global_timestep), timeout=60)
        assert timestep == 1234
        assert evaluators.num_evaluator_restarts == 1 and evaluators.num_healthy_evaluators == 2
        assert evaluators.handle_failure(old, error) is new  # a second report: no new actor
        assert evaluators.num_evaluator_restarts == 1
        assert evaluators.failures[0][0] == 1
    finally:
        evaluators.stop()


# -- each optimizer recovers and still learns --------------------------------------------
def _kill_first(trainer) -> None:
    trainer._killed = trainer.evaluators.remote_evaluators[0]
    kill_and_wait(trainer._killed)


def _check_recreated(ray, trainer, result) -> None:
    assert result["num_evaluator_restarts"] == 1, result
    assert result["num_healthy_evaluators"] == result["num_evaluators"] == 2
    new = trainer.evaluators.remote_evaluators[0]
    assert new != trainer._killed
    assert ray.get(new.ping.remote(), timeout=TIMEOUT_S) == 1


@pytest.mark.learning
@pytest.mark.timeout(400)
def test_local_optimizer_recreates_a_killed_evaluator_and_learns(ray_session):
    ray = ray_session
    config = {
        "env": "CartPole-v1",
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "num_envs_per_evaluator": 4,
        "observation_filter": "MeanStdFilter",
        "seed": SEED,
    }
    with PPOTrainer(config) as trainer:
        run = _train_until(trainer, 150, 40, kill=_kill_first)
        _check_recreated(ray, trainer, run.result)
        new = trainer.evaluators.remote_evaluators[0]
        # after the step's broadcast and filter sync it holds exactly the driver's state
        _assert_same_weights(_remote_weights(ray, new), trainer.get_weights()[DEFAULT_POLICY_ID])
        remote_filters = ray.get(new.get_filters.remote(False), timeout=TIMEOUT_S)
        _assert_same_tree(remote_filters, trainer.local_evaluator.get_filters(flush_after=False))
    assert run.reached, run


@pytest.mark.learning
@pytest.mark.timeout(400)
def test_async_optimizer_recreates_a_killed_evaluator_and_learns(ray_session):
    ray = ray_session
    config = {
        "env": "CartPole-v1",
        "optimizer": "async",
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "num_envs_per_evaluator": 8,
        "rollout_fragment_length": 25,
        "train_batch_size": 2000,
        "lr": 0.004,
        "seed": SEED,
    }
    with PGTrainer(config) as trainer:
        run = _train_until(trainer, 100, 60, kill=_kill_first)
        _check_recreated(ray, trainer, run.result)
    assert run.reached, run


@pytest.mark.learning
@pytest.mark.timeout(600)
def test_apex_recreates_a_killed_evaluator_and_replay_shard_and_learns(ray_session):
    ray = ray_session

    def kill_evaluator_and_shard(trainer) -> None:
        _kill_first(trainer)
        trainer._killed_shard = trainer.optimizer.replay.shards[1]
        kill_and_wait(trainer._killed_shard)

    # The budget counts learner updates (as test_apex's): how many fit in an iteration
    # depends on the machine's load (with two test workers side by side, 200 iterations
    # were once too few).  Beside two busy loops an update takes ~30 ms: seed 0 needed
    # 266 s.
    with ApexTrainer({**APEX_CARTPOLE, "seed": SEED}) as trainer:
        run = _train_until(
            trainer, 100, 25_000, kill=kill_evaluator_and_shard, unit="num_learner_updates"
        )
        _check_recreated(ray, trainer, run.result)
        replay = trainer.optimizer.replay
        assert run.result["num_replay_shard_restarts"] == 1 and replay.generation == [0, 1]
        assert replay.shards[1] != trainer._killed_shard
        # the epsilon ladder survives: the new evaluator 1 is pinned to rung 1 again
        eps = ray.get(
            trainer.evaluators.remote_evaluators[0].apply.remote(lambda ev: ev.policy.epsilon),
            timeout=TIMEOUT_S,
        )
        assert eps == pytest.approx(0.4)
    assert run.reached, run


@pytest.mark.learning
@pytest.mark.timeout(400)
def test_aso_recreates_a_killed_evaluator_and_aggregator_and_learns(ray_session):
    ray = ray_session

    def kill_evaluator_and_aggregator(trainer) -> None:
        _kill_first(trainer)
        trainer._killed_aggregator = trainer.optimizer.aggregators.actors[0]
        kill_and_wait(trainer._killed_aggregator)

    config = {
        **IMPALA_CARTPOLE,
        "optimizer_config": {
            "num_aggregation_workers": 1,
            "num_cpus_per_aggregation_worker": 0.2,
        },
        "seed": SEED,
    }
    with IMPALATrainer(config) as trainer:
        run = _train_until(trainer, 150, 60, kill=kill_evaluator_and_aggregator)
        _check_recreated(ray, trainer, run.result)
        assert run.result["num_aggregator_restarts"] == 1
        assert trainer.optimizer.aggregators.actors[0] != trainer._killed_aggregator
    assert run.reached, run


# -- replay and parameter shards ---------------------------------------------------------
def test_lost_replay_shard_is_recreated_empty_and_replay_goes_on(ray_session):
    ray = ray_session
    config = ShardedReplayConfig.from_dict(
        {"num_replay_shards": 2, "buffer_size": 200, "learning_starts": 30, "train_batch_size": 8}
    )
    tasks = TaskPool(4)
    replay = ShardedReplay(config, True, tasks, lambda refs: ray.get(refs, timeout=TIMEOUT_S), 0)

    def add(n: int) -> None:
        for i in range(n):
            batch = SampleBatch({"obs": np.full((10, 1), i, np.float32)})
            replay.submit(i, ray.put(batch), ray.put(None), 10)
        replay.route()
        while len(replay.adds):
            time.sleep(0.01)
            replay.poll_adds()

    try:
        add(4)  # 2 batches of 10 rows per shard
        assert replay.sizes == [20, 20]
        lost = replay.shards[0]
        kill_and_wait(lost)
        add(2)  # the add to the dead shard fails: it is recreated, empty
        assert replay.num_replay_shard_restarts == 1 and replay.generation == [1, 0]
        assert replay.shards[0] != lost
        assert ray.get(replay.shards[0].stats.remote(), timeout=TIMEOUT_S)["size"] == 0
        assert replay.num_samples_dropped == 10
        add(2)  # round-robin: one batch to each shard, the new one included
        assert replay.sizes == [10, 40]
        replay.request_replays(beta=0.4)  # only shard 1 holds learning_starts (15) rows
        assert tasks.count(replay.shards[1]) > 0 and tasks.count(replay.shards[0]) == 0
        # priorities of a batch replayed from the lost shard are not sent to the new one
        replay.update_priorities((0, 0), np.arange(3), np.ones(3))
    finally:
        replay.stop()


def test_sharded_ps_restores_a_lost_parameter_shard_from_the_driver_weights(ray_session):
    ray = ray_session
    config = {
        "env": "CartPole-v1",
        "optimizer": "sharded_ps",
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "train_batch_size": 200,
        "rollout_fragment_length": 50,
        "optimizer_config": {"num_shards": 2},
        **TINY_PG,
    }
    with PGTrainer(config) as trainer:
        opt = trainer.optimizer
        trainer.train()
        servers = opt.servers
        driver = servers.spec.split(servers.synced)  # the driver's latest copy
        lost = servers.shards[1]
        kill_and_wait(lost)
        assert servers.restore_lost() == [1]
        restored = ray.get(servers.shards[1].get_weights.remote(), timeout=TIMEOUT_S)
        np.testing.assert_array_equal(restored, driver[1])  # exactly the driver's weights
        kill_and_wait(servers.shards[0])  # now one lost mid-training
        before = trainer.train()["timesteps_total"]
        for _ in range(2):
            result = trainer.train()
        assert result["num_shard_restarts"] == 2 and result["timesteps_total"] > before
        assert all(np.all(np.isfinite(w)) for w in opt.get_shard_weights().values())


# -- env errors --------------------------------------------------------------------------
def test_env_raising_on_its_nth_step_is_reported_and_its_evaluator_recreated(ray_session, tmp_path):
    ray = ray_session
    config = {
        "env": FlakyCartPole,
        "env_config": {"fail_at_step": 150, "marker": str(tmp_path / "failed")},
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "train_batch_size": 200,
        "rollout_fragment_length": 50,
        **TINY_PG,
    }
    with PGTrainer(config) as trainer:
        first = trainer.evaluators.remote_evaluators[0]
        for _ in range(6):
            result = trainer.train()
        assert result["num_evaluator_restarts"] == 1 and result["num_healthy_evaluators"] == 2
        assert result["timesteps_total"] >= 6 * 200 - 50  # only the broken fragment is lost
        new = trainer.evaluators.remote_evaluators[0]
        assert new != first and ray.get(new.ping.remote(), timeout=TIMEOUT_S) == 1
        ((index, message),) = trainer.evaluators.failures
    assert index == 1
    assert "env 'FlakyCartPole' raised in step() on evaluator 1" in message
    assert "RuntimeError: flaky env broke at step 150" in message
    assert "sub-env 0" in message and "after 149 vector steps" in message
    # the env's own traceback, as text, down to the raising line of this module
    assert 'raise RuntimeError(f"flaky env broke at step {self.steps}")' in message


def test_env_failing_on_every_reset_ends_training_with_its_message(ray_session):
    config = {"env": ResetFailsEnv, "num_evaluators": 2, "num_cpus_per_evaluator": 0.25}
    with PGTrainer({**config, **TINY_PG}) as trainer:
        with pytest.raises(EvaluatorFailureError, match="before its first env step") as info:
            trainer.train()
        # each evaluator is recreated at most once before the failure ends training
        assert trainer.evaluators.num_evaluator_restarts <= 2
    message = str(info.value)
    assert "env 'ResetFailsEnv' raised in reset()" in message
    assert "ValueError: this env cannot reset" in message


def test_fail_fast_reraises_the_original_env_error(ray_session):
    config = {
        "env": ResetFailsEnv,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "fail_fast_on_evaluator_failure": True,
        **TINY_PG,
    }
    with PGTrainer(config) as trainer:
        with pytest.raises(EnvError, match="this env cannot reset") as info:
            trainer.train()
        assert trainer.evaluators.num_evaluator_restarts == 0
    # the env's traceback (as text) comes with it
    assert 'raise ValueError("this env cannot reset")' in str(info.value)


def test_in_process_env_error_ends_training_with_a_clear_message():
    trainer = PGTrainer({"env": ResetFailsEnv, **TINY_PG})
    with trainer, pytest.raises(EnvError, match=r"raised in reset\(\) on evaluator 0"):
        trainer.train()


def test_exceeding_max_evaluator_restarts_is_a_clear_error(ray_session):
    config = {
        "env": FlakyCartPole,
        "env_config": {"fail_at_step": 30},  # every new env fails again at its step 30
        "num_evaluators": 1,
        "num_cpus_per_evaluator": 0.25,
        "train_batch_size": 100,
        "rollout_fragment_length": 20,
        "max_evaluator_restarts": 2,
        **TINY_PG,
    }
    with PGTrainer(config) as trainer:
        with pytest.raises(EvaluatorFailureError) as info:
            for _ in range(10):
                trainer.train()
        assert trainer.evaluators.num_evaluator_restarts == 2
    message = str(info.value)
    assert "evaluator 1 failed after max_evaluator_restarts=2" in message
    assert "flaky env broke at step 30" in message


def test_dropping_failed_evaluators_keeps_training_with_the_others(ray_session):
    config = {
        "env": "CartPole-v1",
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "train_batch_size": 200,
        "recreate_failed_evaluators": False,
        **TINY_PG,
    }
    with PGTrainer(config) as trainer:
        trainer.train()
        kill_and_wait(trainer.evaluators.remote_evaluators[1])
        result = trainer.train()
        result = trainer.train()
        assert result["num_healthy_evaluators"] == 1 and result["num_evaluator_restarts"] == 0
        assert result["num_evaluators"] == 2 and result["timesteps_this_iter"] >= 200


def test_allreduce_reforms_its_group_with_a_recreated_evaluator(ray_session):
    ray = ray_session
    config = {
        "env": "CartPole-v1",
        "optimizer": "allreduce",
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "train_batch_size": 200,
        "rollout_fragment_length": 50,
        "optimizer_config": {"check_replicas_every": 1, "group_timeout_s": 60},
        **TINY_PG,
    }
    with PGTrainer(config) as trainer:
        trainer.train()
        killed = trainer.evaluators.remote_evaluators[1]
        kill_and_wait(killed)
        for _ in range(2):
            result = trainer.train()
        assert result["num_evaluator_restarts"] == 1 and result["world_size"] == 2
        # every replica (the recreated one included) and the driver hold the same weights
        assert result["replicas_identical"] == 1
        new = trainer.evaluators.remote_evaluators[1]
        assert new != killed and ray.get(new.ping.remote(), timeout=TIMEOUT_S) == 2
        _assert_same_weights(_remote_weights(ray, new), trainer.get_weights()[DEFAULT_POLICY_ID])
