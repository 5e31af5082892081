"""Reservations the Ray cluster can never grant fail fast, naming the numbers.

The pure part (``fit_error`` against a given cluster) is tested without Ray; then every
trainer kind against the session's 2-CPU Ray: the CLI (a real subprocess), a Ray Tune
trial, a PPO-ES population and Ape-X replay shards fail at once, and the cases that fit
still start.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from typing import Any

import pytest

from hierl.algorithms import resources
from hierl.algorithms.alphazero.trainer import AlphaZeroTrainer
from hierl.algorithms.dqn import ApexTrainer
from hierl.algorithms.es import ESTrainer
from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.population import PPOESTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.resources import (
    SKIP_CHECK_ENV,
    ClusterCapacity,
    check_cluster_fits,
    fit_error,
    trainer_bundles,
)
from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer
from hierl.config import ConfigError
from hierl.evaluators.ray_runtime import ActorGroup

pytestmark = pytest.mark.timeout(120)

TWO_CPUS = ClusterCapacity({"CPU": 2.0}, [{"CPU": 2.0}])
"""The session's Ray (``ray_session``): one node with 2 CPUs."""
ES_CASE = {"env": "CartPole-v1", "num_evaluators": 2, "optimizer_config": {"num_aggregators": 1}}
"""2 evaluators x 1 CPU + an aggregator x 0.1 CPU = 2.1 CPUs."""
TUNE_CASE = {"env": "CartPole-v1", "num_evaluators": 2}
"""As a Tune trial: driver 1 CPU + 2 evaluators x 1 CPU = 3 CPUs."""
POPULATION_CASE = {
    "env": "CartPole-v1",
    "population_size": 4,
    "member_config": {
        "num_evaluators": 1,
        "num_cpus_per_evaluator": 0.5,
        "num_cpus_for_driver": 0.5,
    },
}
"""4 PPO members x (driver 0.5 + evaluator 0.5) = 4 CPUs."""
APEX_CASE = {
    "env": "CartPole-v1",
    "num_evaluators": 1,
    "optimizer_config": {"num_replay_shards": 4, "num_cpus_per_replay_shard": 0.5},
}
"""1 evaluator x 1 CPU + 4 replay shards x 0.5 CPU = 3 CPUs."""


def _fixes(message: str) -> list[str]:
    """The ``name=value`` settings a message proposes."""
    listed = message.split("It fits with any one of: ", 1)[1].split(". Or add nodes", 1)[0]
    return listed.split(", ")


def _with(config: dict[str, Any], fix: str) -> dict[str, Any]:
    """``config`` with one proposed ``name=value`` applied (dotted names: nested dicts)."""
    path, value = fix.split("=")
    *parents, key = path.split(".")
    out = json.loads(json.dumps(config))
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[key] = json.loads(value)
    return out


def _assert_each_fix_fits(trainer_cls: type, config: dict, message: str, driver: bool) -> None:
    for fix in _fixes(message):
        fixed = _with(config, fix)
        assert fit_error(trainer_cls, fixed, TWO_CPUS, driver) is None, fix


# -- the message, without Ray ----------------------------------------------------------
def test_es_case_names_total_parts_cluster_and_settings_that_fit():
    message = fit_error(ESTrainer, ES_CASE, TWO_CPUS, driver_reserved=False)
    assert message.startswith("ES can never be placed")
    assert "it needs 2.1 CPU but the Ray cluster has 2 CPU in all (1 node)" in message
    assert "2 evaluators x 1 CPU (num_cpus_per_evaluator)" in message
    assert "1 ES aggregator x 0.1 CPU (optimizer_config.num_cpus_per_aggregator)" in message
    assert "= 2.1 CPU; its driver process reserves nothing in Ray" in message
    assert "driver 1 CPU" not in message  # a plain driver process is no Ray reservation
    assert _fixes(message) == [
        "num_cpus_per_evaluator=0.95",
        "num_evaluators=1",
        "optimizer_config.num_cpus_per_aggregator=0",
        "optimizer_config.num_aggregators=0",
    ]
    assert f"{SKIP_CHECK_ENV}=1" in message
    _assert_each_fix_fits(ESTrainer, ES_CASE, message, driver=False)
    fitting = {**ES_CASE, "num_cpus_per_evaluator": 0.5}
    assert fit_error(ESTrainer, fitting, TWO_CPUS, driver_reserved=False) is None


def test_the_driver_counts_only_where_ray_reserves_it():
    assert fit_error(PPOTrainer, TUNE_CASE, TWO_CPUS, driver_reserved=False) is None
    message = fit_error(PPOTrainer, TUNE_CASE, TWO_CPUS, driver_reserved=True)
    assert "it needs 3 CPU but the Ray cluster has 2 CPU in all" in message
    expected = (
        "driver 1 CPU (num_cpus_for_driver) + 2 evaluators x 1 CPU (num_cpus_per_evaluator)"
        " = 3 CPU."
    )
    assert expected in message
    assert _fixes(message) == [
        "num_cpus_per_evaluator=0.5",
        "num_evaluators=1",
        "num_cpus_for_driver=0",
    ]
    _assert_each_fix_fits(PPOTrainer, TUNE_CASE, message, driver=True)


def test_a_bundle_larger_than_every_node_never_fits():
    cluster = ClusterCapacity({"CPU": 8.0}, [{"CPU": 2.0}] * 4)
    config = {"env": "CartPole-v1", "num_evaluators": 1, "num_cpus_per_evaluator": 4}
    message = fit_error(PPOTrainer, config, cluster, driver_reserved=False)
    assert "each evaluator reserves 4 CPU but the largest Ray node has 2 CPU" in message
    assert "in all" not in message  # 4 of the cluster's 8 CPUs: the total fits
    assert "num_cpus_per_evaluator=2" in _fixes(message)


def test_missing_gpus_are_named():
    config = {**TUNE_CASE, "num_cpus_per_evaluator": 0.5, "num_gpus_per_evaluator": 1}
    message = fit_error(PPOTrainer, config, TWO_CPUS, driver_reserved=False)
    assert "it needs 2 GPU but the Ray cluster has 0 GPU in all" in message
    assert "2 evaluators x (0.5 CPU and 1 GPU)" in message
    assert "num_gpus_per_evaluator=0" in _fixes(message)


@pytest.mark.parametrize(
    ("trainer_cls", "config", "part", "fix"),
    [
        (
            PPOESTrainer,
            POPULATION_CASE,
            "4 PPO member drivers x 0.5 CPU (member_config.num_cpus_for_driver) + "
            "4 PPO member evaluators x 0.5 CPU (member_config.num_cpus_per_evaluator) = 4 CPU",
            "population_size=2",
        ),
        (
            ApexTrainer,
            APEX_CASE,
            "4 Ape-X replay shards x 0.5 CPU (optimizer_config.num_cpus_per_replay_shard) = 3 CPU",
            "optimizer_config.num_replay_shards=2",
        ),
        (
            PGTrainer,
            {
                "env": "CartPole-v1",
                "num_evaluators": 1,
                "optimizer": "sharded_ps",
                "optimizer_config": {"num_shards": 3, "num_cpus_per_shard": 0.5},
            },
            "3 parameter shards x 0.5 CPU (optimizer_config.num_cpus_per_shard) = 2.5 CPU",
            "optimizer_config.num_shards=2",
        ),
        (
            AlphaZeroTrainer,
            {"env": "TicTacToe", "num_self_play_workers": 3, "num_cpus_per_self_play_worker": 1},
            "3 self-play workers x 1 CPU (num_cpus_per_self_play_worker) + 1 learner x 0.5 CPU",
            "num_self_play_workers=1",
        ),
    ],
)
def test_nested_trainers_and_optimizer_actors_are_counted(trainer_cls, config, part, fix):
    message = fit_error(trainer_cls, config, TWO_CPUS, driver_reserved=False)
    assert part in message
    assert fix in _fixes(message)
    _assert_each_fix_fits(trainer_cls, config, message, driver=False)


def test_when_no_single_setting_fits_it_says_so():
    tiny = ClusterCapacity({"CPU": 0.5}, [{"CPU": 0.5}])
    message = fit_error(PPOTrainer, TUNE_CASE, tiny, driver_reserved=True)
    assert "No single setting makes it fit" in message
    assert "It fits with" not in message


@dataclasses.dataclass
class HelperLoopConfig(BaseConfig):
    """A nested loop's settings: how many helper actors, and each one's CPUs."""

    num_helpers: int = 3
    num_cpus_per_helper: float = 1.0


class HelperLoop(BaseTrainer):
    """A nested algorithm written outside hierl: it declares its helpers in the hook."""

    name = "HELPER_LOOP"
    config_class = HelperLoopConfig

    @classmethod
    def actor_groups(cls, config: HelperLoopConfig) -> list[ActorGroup]:
        helpers = ActorGroup.from_settings("helper", config, "num_helpers", "num_cpus_per_helper")
        return [*super().actor_groups(config), helpers]


def test_a_nested_trainer_declares_its_actors_in_its_actor_groups_hook():
    config = {"env": "CartPole-v1"}
    assert trainer_bundles(HelperLoop, config) == [{"CPU": 1.0}] * 4  # driver first
    message = fit_error(HelperLoop, config, TWO_CPUS, driver_reserved=False)
    assert "3 helpers x 1 CPU (num_cpus_per_helper) = 3 CPU" in message
    assert "num_helpers=2" in _fixes(message)
    _assert_each_fix_fits(HelperLoop, config, message, driver=False)


def test_the_former_extra_actor_groups_hook_is_refused_by_name():
    # ignoring it would start those actors outside the trainer's reservation
    with pytest.raises(
        TypeError, match=r"OldLoop defines extra_actor_groups.*actor_groups\(config\)"
    ):

        class OldLoop(BaseTrainer):
            @classmethod
            def extra_actor_groups(cls, config: Any) -> list[ActorGroup]:
                return []


def test_a_trainer_without_remote_actors_does_not_start_ray(monkeypatch):
    def no_ray(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Ray was started for a trainer without remote actors")

    monkeypatch.setattr(resources, "ensure_ray", no_ray)
    check_cluster_fits(PGTrainer, {"env": "CartPole-v1", "num_cpus_for_driver": 64})
    with PGTrainer({"env": "CartPole-v1", "train_batch_size": 50}):
        pass


def test_resource_wait_logger_logs_one_line_per_wait(caplog):
    from ray.tune import PlacementGroupFactory

    from hierl.tune.experiments import ResourceWaitLogger

    class FakeTrial:
        def __init__(self) -> None:
            self.trial_id, self.status = "t1", "PENDING"
            self.placement_group_factory = PlacementGroupFactory([{"CPU": 1.0}, {"CPU": 2.0}])

        def __str__(self) -> str:
            return "PPO_t1"

    now = [0.0]
    waits = ResourceWaitLogger(
        after_s=60, clock=lambda: now[0], resources=lambda: ({"CPU": 1.0}, {"CPU": 2.0})
    )
    trial = FakeTrial()
    with caplog.at_level(logging.WARNING, logger="hierl.tune.experiments"):
        for t, status in [(0, "PENDING"), (59, "PENDING"), (61, "PENDING"), (200, "PENDING")]:
            now[0], trial.status = t, status
            waits.on_step_begin(iteration=0, trials=[trial])
        assert len(caplog.records) == 1
        line = caplog.records[0].getMessage()
        assert line.startswith("trial PPO_t1 has waited 61s to start: it reserves 3 CPU")
        assert "the Ray cluster has 1 CPU free of 2 CPU" in line
        # started, then waiting again (e.g. paused by a scheduler): a new wait, a new line
        for t, status in [(210, "RUNNING"), (220, "PENDING"), (300, "PENDING")]:
            now[0], trial.status = t, status
            waits.on_step_begin(iteration=0, trials=[trial])
        assert len(caplog.records) == 2
        assert "has waited 80s" in caplog.records[1].getMessage()


# -- against the session's Ray (2 CPUs) ------------------------------------------------
@pytest.mark.ray
def test_cli_es_case_fails_fast_with_one_error_line(tmp_path):
    argv = ["train", "--algo", "ES", "--env", "CartPole-v1", "--num-evaluators", "2"]
    argv += ["--config", json.dumps({"num_aggregators": 1}), "--output-dir", str(tmp_path)]
    # the subprocess starts its own Ray; pin it to the 2 CPUs of the cases above
    env = {**os.environ, "RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": 2})}
    env.pop(SKIP_CHECK_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-m", "hierl.cli", *argv],
        capture_output=True,
        text=True,
        timeout=90,  # before this change it hung forever
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hierl: error: ES can never be placed")
    assert "it needs 2.1 CPU but the Ray cluster has 2 CPU in all" in lines[0]
    assert "1 ES aggregator x 0.1 CPU (optimizer_config.num_cpus_per_aggregator)" in lines[0]
    assert "num_cpus_per_evaluator=0.95" in lines[0]


@pytest.mark.ray
def test_es_case_with_half_a_cpu_per_evaluator_starts_and_trains(ray_session):
    config = {
        **ES_CASE,
        "num_cpus_per_evaluator": 0.5,
        "episodes_per_batch": 4,
        "noise_size": 2**16,
        "eval_prob": 0.0,
        "model": {"hiddens": [8]},
        "sample_timeout_s": 60.0,
    }
    with ESTrainer(config) as trainer:
        result = trainer.train()
    assert result["training_iteration"] == 1
    assert result["num_evaluators"] == 2
    assert result["num_aggregators"] == 1


@pytest.mark.ray
def test_tune_trial_bigger_than_the_cluster_fails_at_fit_start(ray_session, tmp_path):
    from ray import tune

    import hierl.tune  # noqa: F401  (registers hierl/<NAME>)

    space = {**TUNE_CASE, "lr": tune.grid_search([1e-3, 3e-4])}
    tuner = tune.Tuner(
        "hierl/PPO",
        param_space=space,
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    )
    with pytest.raises(ConfigError) as error:
        tuner.fit()
    message = str(error.value)
    assert message.startswith("a Ray Tune trial of PPO can never be placed")
    assert "it needs 3 CPU but the Ray cluster has 2 CPU in all" in message
    assert "driver 1 CPU (num_cpus_for_driver) + 2 evaluators x 1 CPU" in message
    assert _fixes(message)[0] == "num_cpus_per_evaluator=0.5"


@pytest.mark.ray
def test_tune_trial_that_fits_runs(ray_session, tmp_path):
    from ray import tune

    from hierl.tune import trainable

    config = {
        "env": "CartPole-v1",
        "train_batch_size": 100,
        "model": {"hiddens": [8]},
        "num_cpus_for_driver": 0.5,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
    }
    tuner = tune.Tuner(
        trainable("PG"),
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 1}, verbose=0
        ),
    )
    results = tuner.fit()
    assert not results.errors
    assert results[0].metrics["training_iteration"] == 1
    assert results[0].metrics["num_evaluators"] == 2


@pytest.mark.ray
def test_population_bigger_than_the_cluster_fails_fast(ray_session):
    with pytest.raises(ConfigError) as error:
        PPOESTrainer(POPULATION_CASE)
    message = str(error.value)
    assert message.startswith("PPO_ES can never be placed")
    assert "it needs 4 CPU but the Ray cluster has 2 CPU in all" in message
    assert "4 PPO member evaluators x 0.5 CPU (member_config.num_cpus_per_evaluator)" in message
    assert "population_size=2" in _fixes(message)


@pytest.mark.ray
def test_apex_over_reserving_replay_shards_fails_fast(ray_session):
    with pytest.raises(ConfigError) as error:
        ApexTrainer(APEX_CASE)
    message = str(error.value)
    assert "it needs 3 CPU but the Ray cluster has 2 CPU in all" in message
    assert "4 Ape-X replay shards x 0.5 CPU (optimizer_config.num_cpus_per_replay_shard)" in message
    assert _fixes(message)[:2] == [
        "optimizer_config.num_cpus_per_replay_shard=0.25",
        "optimizer_config.num_replay_shards=2",
    ]


@pytest.mark.ray
def test_the_check_is_skipped_on_request(ray_session, monkeypatch):
    monkeypatch.delenv(SKIP_CHECK_ENV, raising=False)
    with pytest.raises(ConfigError, match="APEX can never be placed"):
        check_cluster_fits(ApexTrainer, APEX_CASE)
    monkeypatch.setenv(SKIP_CHECK_ENV, "1")
    check_cluster_fits(ApexTrainer, APEX_CASE)  # e.g. an autoscaling cluster: no error
