"""Ray Tune integration: resource bundles, a trial's placement group, ASHA, PBT, typos."""

from __future__ import annotations

import itertools
import os
import signal
import time
import weakref
import zlib
from pathlib import Path

import numpy as np
import pytest

from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.registry import get_trainer_class
from hierl.algorithms.resources import trainer_bundles
from hierl.config import ConfigError
from tests.support.helpers import wait_for

TINY = {
    "env": "CartPole-v1",
    "train_batch_size": 200,
    "model": {"hiddens": [8, 8]},
    "num_cpus_for_driver": 0.5,
}


def _placement_group_id(_evaluator=None) -> str | None:
    import ray

    pg = ray.util.get_current_placement_group()
    return None if pg is None else pg.id.hex()


class PGReportingPlacement(PGTrainer):
    """PG that reports the placement group of its driver and of each remote evaluator."""

    def train(self):
        result = super().train()
        ids = self.evaluators.foreach_evaluator(_placement_group_id)
        result["driver_pg"] = _placement_group_id()
        result["evaluator_pgs"] = ",".join(str(i) for i in ids[1:])
        return result


def _digest(weights: dict[str, np.ndarray]) -> int:
    data = b"".join(np.ascontiguousarray(weights[k]).tobytes() for k in sorted(weights))
    return zlib.crc32(data)


class PPOReportingWeights(PPOTrainer):
    """PPO that reports a digest of its weights before and after each iteration, the
    learning rate its Adam actually uses, and the checkpoint it last restored: its path,
    the digest of the weights stored there and of its own weights once restored, and the
    learning rate stored there."""

    _restored: dict = {}

    def restore(self, checkpoint_dir):
        from hierl.checkpoint import load_checkpoint

        meta, state = load_checkpoint(checkpoint_dir)
        super().restore(checkpoint_dir)
        self._restored = {
            "restored_from": str(checkpoint_dir),
            "restored_lr": meta["config"]["lr"],
            "restored_stored": _digest(state["evaluator"]["policies"]["default_policy"]["weights"]),
            "restored_loaded": _digest(self.get_policy().get_weights()),
        }

    def train(self):
        before = _digest(self.get_policy().get_weights())
        result = super().train()
        result.update(self._restored)
        self._restored = {}
        result["weights_before"] = before
        result["weights_after"] = _digest(self.get_policy().get_weights())
        result["lr_in_use"] = self.get_policy().optimizer.param_groups[0]["lr"]
        return result


def _run(tmp_path, trainable, param_space, stop, **tune_config):
    from ray import tune

    from hierl.tune import DEFAULT_METRIC, DEFAULT_MODE

    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            **{"metric": DEFAULT_METRIC, "mode": DEFAULT_MODE, **tune_config}
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), stop=stop, verbose=0),
    )
    return tuner.fit()


def test_trainer_bundles():
    ppo = get_trainer_class("PPO")
    config = {"num_evaluators": 2, "num_cpus_per_evaluator": 0.5, "num_cpus_for_driver": 2}
    assert trainer_bundles(ppo, config) == [{"CPU": 2.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    gpus = {**config, "num_gpus": 1, "num_gpus_per_evaluator": 0.25}
    assert trainer_bundles(ppo, gpus) == [
        {"CPU": 2.0, "GPU": 1.0},
        {"CPU": 0.5, "GPU": 0.25},
        {"CPU": 0.5, "GPU": 0.25},
    ]
    apex = get_trainer_class("APEX")
    shards = {"num_evaluators": 1, "num_replay_shards": 3, "num_cpus_per_replay_shard": 0.25}
    assert trainer_bundles(apex, shards) == [{"CPU": 1.0}, {"CPU": 1.0}, *[{"CPU": 0.25}] * 3]
    # replay shards reserving nothing get no (all-zero, rejected by Ray) bundle
    assert trainer_bundles(apex, {**shards, "num_cpus_per_replay_shard": 0}) == [{"CPU": 1.0}] * 2
    # the parameter-server shards of sharded_ps, read as the optimizer will be built
    ps = {"optimizer": "sharded_ps", "optimizer_config": {"num_shards": 3}}
    pg = get_trainer_class("PG")
    assert trainer_bundles(pg, {**ps, "num_evaluators": 1}) == [{"CPU": 1.0}] * 2  # 0 CPUs
    ps["optimizer_config"]["num_cpus_per_shard"] = 0.5
    assert (
        trainer_bundles(pg, {**ps, "num_evaluators": 1}) == [{"CPU": 1.0}] * 2 + [{"CPU": 0.5}] * 3
    )
    # without remote evaluators the shards live in the driver process: no actors
    assert trainer_bundles(pg, ps) == [{"CPU": 1.0}]
    with pytest.raises(ConfigError, match="did you mean 'num_evaluators'"):
        trainer_bundles(ppo, {"num_evaluator": 2})


@pytest.mark.timeout(360)
def test_trial_with_remote_evaluators_runs_in_its_placement_group(ray_session, tmp_path):
    from hierl.tune import trainable

    config = {**TINY, "num_cpus_for_driver": 1, "num_evaluators": 2}
    config["num_cpus_per_evaluator"] = 0.5  # 1 + 2 x 0.5: all 2 CPUs of the test's Ray
    results = _run(tmp_path, trainable(PGReportingPlacement), config, {"training_iteration": 2})
    assert not results.errors
    result = results[0].metrics
    assert result["training_iteration"] == 2
    assert result["num_evaluators"] == 2
    assert result["driver_pg"] is not None
    assert result["evaluator_pgs"] == f"{result['driver_pg']},{result['driver_pg']}"


@pytest.mark.timeout(360)
def test_asha_stops_some_trials_early(ray_session, tmp_path):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    # Deterministic ranking, whatever the timing: one trial at a time, ranked by fewest
    # timesteps per iteration, so the first (100 rows per iteration) sets the rung cutoffs
    # and each later trial is worse at its first rung and stopped there.
    space = {**TINY, "train_batch_size": tune.grid_search([100, 200, 300, 400])}
    asha = ASHAScheduler(time_attr="training_iteration", max_t=4, reduction_factor=2)
    results = _run(
        tmp_path,
        "hierl/PG",
        space,
        {"training_iteration": 4},
        scheduler=asha,
        metric="timesteps_total",
        mode="min",
        max_concurrent_trials=1,
    )
    assert not results.errors
    by_batch = {r.config["train_batch_size"]: r.metrics["training_iteration"] for r in results}
    assert by_batch == {100: 4, 200: 1, 300: 1, 400: 1}


@pytest.mark.timeout(480)
def test_pbt_exploit_restores_donor_weights_with_a_new_lr(ray_session, tmp_path):
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    from hierl.tune import trainable

    space = {
        **TINY,
        "num_sgd_iter": 2,
        "sgd_minibatch_size": 100,
        "lr": tune.grid_search([1e-4, 1e-2]),
    }
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"lr": tune.uniform(1e-5, 1e-1)},
        resample_probability=0.0,
        synch=True,
    )
    results = _run(
        tmp_path,
        trainable(PPOReportingWeights),
        space,
        {"training_iteration": 4},
        scheduler=pbt,
        reuse_actors=True,  # the exploit goes through reset_config (lr set in place)
    )
    assert not results.errors
    # Each trial's rows in the order it reported them (result.json's order).  Tune pauses
    # and resumes every trial at the perturbation (synch), so a row may follow a restore
    # of the trial's own checkpoint or, after an exploit, of its donor's.
    trials = {r.metrics["trial_id"]: r.metrics_dataframe.to_dict("records") for r in results}
    exploits = []
    for trial_id, rows in trials.items():
        for prev, row in itertools.pairwise(rows):
            restored = row.get("restored_from")
            if not isinstance(restored, str):  # no restore since the last row: untouched
                assert row["weights_before"] == prev["weights_after"], (trial_id, trials)
                continue
            # what was stored is what was loaded is what the iteration started from
            stored, loaded = row["restored_stored"], row["restored_loaded"]
            assert stored == loaded == row["weights_before"], (trial_id, trials)
            (owner,) = [t for t in trials if t in restored]
            if owner != trial_id:
                exploits.append((row, row["restored_lr"]))
    assert exploits, f"PBT performed no exploit: {trials}"
    for row, donor_lr in exploits:
        assert row["lr_in_use"] != pytest.approx(donor_lr)  # perturbed...
        assert row["lr_in_use"] in (  # ...by PBT's factors, and applied to Adam
            pytest.approx(donor_lr * 0.8),
            pytest.approx(donor_lr * 1.2),
        )


@pytest.mark.timeout(60)
def test_param_space_typo_fails_fast(ray_session, tmp_path):
    from ray import tune

    from hierl.tune import validate_param_space

    space = {**TINY, "lr": tune.uniform(1e-4, 1e-2), "num_sgd_itr": 2}
    with pytest.raises(ConfigError, match="did you mean 'num_sgd_iter'"):
        validate_param_space("PPO", space)
    with pytest.raises(ConfigError, match=r"'model\.hidens'.*did you mean 'hiddens'"):
        validate_param_space("hierl/PPO", {**TINY, "model": {"hidens": [8]}})
    validate_param_space("PPO", {**TINY, "lr": tune.uniform(1e-4, 1e-2)})
    # also without the up-front check: the error names the key, before any trial runs
    with pytest.raises(Exception, match="did you mean 'num_sgd_iter'"):
        _run(tmp_path, "hierl/PPO", space, {"training_iteration": 1})


class PGReportingSeed(PGTrainer):
    """PG that reports the seed its config was built with."""

    def train(self):
        return {**super().train(), "trainer_seed": self.config.seed}


def test_trial_seed_is_base_plus_the_trial_counter():
    from hierl.tune.trainable import trial_seed

    assert trial_seed(0, "a1b2c_00000") == 0
    assert trial_seed(100, "a1b2c_00002") == 102
    assert trial_seed(7, "default") == trial_seed(7, None) == 7  # outside Tune
    # ids without a counter (search algorithms): stable, and distinct per id
    assert trial_seed(0, "3f9a8c1d") == trial_seed(0, "3f9a8c1d") != trial_seed(0, "3f9a8c1e")


@pytest.mark.timeout(360)
def test_repeated_samples_of_a_grid_point_get_their_own_seeds(ray_session, tmp_path):
    from ray import tune

    from hierl.tune import trainable

    space = {**TINY, "train_batch_size": 100, "lr": tune.grid_search([0.01])}
    stop = {"training_iteration": 1}
    results = _run(tmp_path, trainable(PGReportingSeed), space, stop, num_samples=2)
    assert not results.errors
    seeds = sorted(r.metrics["trainer_seed"] for r in results)
    assert seeds == [0, 1]  # base 0 + trial index
    assert sorted(r.config["seed"] for r in results) == seeds  # recorded in the config
    # an explicit seed is every trial's seed; another base seed shifts the derived ones
    results = _run(tmp_path, trainable(PGReportingSeed), {**space, "seed": 5}, stop, num_samples=2)
    assert [r.metrics["trainer_seed"] for r in results] == [5, 5]
    results = _run(tmp_path, trainable(PGReportingSeed, base_seed=10), space, stop, num_samples=2)
    assert sorted(r.metrics["trainer_seed"] for r in results) == [10, 11]


@pytest.mark.timeout(120)
def test_a_stopped_trials_actor_exits_at_sigterm_even_inside_a_finalizer(ray_session, tmp_path):
    import ray

    from hierl.tune import trainable

    class Owner:
        pass

    class PGInAFinalizer(trainable(PGTrainer)):
        def pid(self) -> int:
            return os.getpid()

        def hang_in_a_finalizer(self, seconds: float, marker: str) -> None:
            """``time.sleep(seconds)`` as a weakref finalizer (after creating ``marker``),
            where a raised SystemExit is printed as "Exception ignored" and swallowed."""
            owner = Owner()
            weakref.finalize(owner, _sleep_after_marking, marker, seconds)
            del owner

    # Without exit_at_sigterm, Ray's handler raises SystemExit inside the finalizer: the
    # worker prints a traceback into the driver's output and lives on.
    actor = ray.remote(num_cpus=0.1)(PGInAFinalizer).remote(config=TINY)
    pid = ray.get(actor.pid.remote(), timeout=60)
    ray.get(actor.stop.remote(), timeout=60)  # Tune's end of a trial: cleanup()
    marker = tmp_path / "in_the_finalizer"
    hanging = actor.hang_in_a_finalizer.remote(5.0, str(marker))
    wait_for(marker.exists, 60, "the finalizer starts")  # SIGTERM while it runs, not before
    os.kill(pid, signal.SIGTERM)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(hanging, timeout=30)
    # The driver hears of the death when the worker's socket closes, which can be before
    # the raylet reaps the process: wait for it to be gone or a zombie (exited, unreaped).
    # Without exit_at_sigterm it would still be sleeping when the wait ends.
    wait_for(lambda: _exited(pid), 20, f"worker {pid} exits after SIGTERM")


def _sleep_after_marking(marker: str, seconds: float) -> None:
    Path(marker).touch()
    time.sleep(seconds)


def _exited(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie (exited, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")
