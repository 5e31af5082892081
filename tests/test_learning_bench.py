"""``benchmarks/learning.py`` on a nested trainer: PPO-ES's rounds give the curve's greedy
evaluations, and a seed cut at a budget resumes from its checkpoint to a larger one."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from hierl.tune.experiments import ExperimentSpec

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def learning(tmp_path, monkeypatch):
    sys.path.insert(0, str(BENCH))
    try:
        module = importlib.import_module("learning")
        monkeypatch.setattr(module, "RESULTS_DIR", tmp_path / "results")  # its checkpoints
        yield module
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
