"""The benchmarks of nested trainers: ``benchmarks/learning.py`` on PPO-ES (its rounds give
the curve's greedy evaluations; a seed cut at a budget resumes from its checkpoint) and
``benchmarks/nesting_overhead.py`` (its blocks train the same member actors) and
``benchmarks/faults.py`` (a kill on time; each round's row)."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hierl.algorithms.population import PPOESTrainer
from hierl.tune.experiments import ExperimentSpec

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_ppo_es_curve_has_evaluations_and_resumes_from_its_checkpoint(
    ray_session, learning, tmp_path
):
    member = {
        "num_evaluators": 0,
        "num_cpus_for_driver": 0.25,
        "num_envs_per_evaluator": 1,
        "rollout_fragment_length": 200,
        "train_batch_size": 200,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 1,
        "model": {"hiddens": [8]},
        "observation_filter": "MeanStdFilter",
        "evaluation_interval": 1,
        "evaluation_num_episodes": 1,
    }
    config = {
        "population_size": 2,
        "max_member_iterations_per_round": 1,
        "round_time_s": 600.0,
        "num_cpus_for_driver": 0.0,
        "member_config": member,
    }
    spec = ExperimentSpec(run="PPO_ES", env="CartPole-v1", config=config, checkpoint_freq=1)
    out = tmp_path / "curves"
    out.mkdir()
    path = learning.run_hierl(spec, 0, 800, out, resume=False)  # 2 rounds of 2 x 200
    rows = learning.read_curve(path)
    assert [r["timesteps"] for r in rows] == [400, 800]
    assert all(r["evaluation_reward_mean"] > 0 for r in rows)  # every round evaluated
    learning.run_hierl(spec, 0, 1200, out, resume=True)
    resumed = learning.read_curve(path)
    assert resumed[:2] == rows  # kept, not retrained
    assert [r["timesteps"] for r in resumed] == [400, 800, 1200]
    # a finished seed is not started again (parallel --only-seed runs, then the summary)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(learning, "get_trainer_class", None)  # calling it would fail
        assert learning.run_hierl(spec, 0, 1200, out, resume=True) == path
    assert learning.read_curve(path) == resumed


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_nesting_overhead_blocks_train_the_same_members_and_count_the_copied_bytes(
    ray_session, bench
):
    overhead = bench("nesting_overhead")
    config = {
        "env": "CartPole-v1",
        "population_size": 2,
        "max_member_iterations_per_round": 2,
        "round_time_s": 1e6,
        "member_config": {**overhead.MEMBER, "num_cpus_for_driver": 0.25},
    }
    with PPOESTrainer(config) as trainer:
        clock = overhead.RoundClock(trainer)
        nested = overhead.nested_block(trainer, clock, rounds=1)
        [one] = nested["rounds"]
        assert 0 < one["copy_s"] <= one["between_rounds_s"]
        assert sorted(clock.arrivals) == [0, 1] and one["barrier_idle_s"] >= 0
        # one copy: the winner's weights and its filter's mean and m2 (float64, obs dim 4)
        weights = trainer._get(trainer.members[0][0].get_weights.remote())
        arrays = sum(w.nbytes for policy in weights.values() for w in policy.values())
        assert one["bytes_copied"] == arrays + 2 * 4 * 8
        independent = overhead.independent_block(trainer, iterations=3)
        assert independent["wall_s"] > 0
        counts = [
            ray_session.get(actor.__ray_call__.remote(lambda t: t.iteration), timeout=60)
            for actor, _ in trainer.members
        ]
        assert counts == [5, 5]  # 2 in the round, 3 independent


def test_faults_kills_on_time_and_reports_each_rounds_recovery(bench):
    faults = bench("faults")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    faults.kill_later([sleeper.pid], 0.2).join()
    assert sleeper.wait(timeout=10) == -signal.SIGKILL

    algo, config = faults.load("ppo-es", {"max_member_iterations_per_round": 2, "seed": 3})
    assert (algo, config["env"], config["population_size"]) == ("PPO_ES", "Walker2d-v5", 4)
    assert config["max_member_iterations_per_round"] == 2 and config["seed"] == 3
    result = {
        "training_iteration": 2,
        "timesteps_total": 16384,
        "population/num_member_restarts": 1,
        **{f"population/iterations/{i}": 2 for i in range(2)},
        **{f"population/episode_reward_mean/{i}": 10.0 * i + 0.04 for i in range(2)},
    }
    assert faults.row_of("ppo-es", result, 12.34) == {
        "round": 2,
        "wall_s": 12.3,
        "timesteps_total": 16384,
        "restarts": 1,
        "member_iterations": [2, 2],
        "member_returns": [0.0, 10.0],
    }
    result = {
        "training_iteration": 1,
        "timesteps_total": 500,
        "actor_restarts/self_play": 1,
        "actor_restarts/replay": 1,
        "replay_size": 40,
        "episode_reward_mean": 0.5,
    }
    assert faults.row_of("alphazero", result, 1.0)["restarts"] == {"self_play": 1, "replay": 1}
