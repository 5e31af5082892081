"""Learning tests: each algorithm reaches a return threshold within a bounded budget."""

from __future__ import annotations

import pytest

from hierl.algorithms.impala import APPOTrainer, IMPALATrainer
from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.ppo import PPOTrainer
from tests.support.learning_configs import IMPALA_CARTPOLE
from tests.support.learning_runs import SEED, train_until

pytestmark = [pytest.mark.learning]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("trainer_class", "overrides"),
    [
        (IMPALATrainer, {}),
        (APPOTrainer, {"lr": 1e-3, "optimizer_config": {"learner_queue_size": 1}}),
    ],
)
def test_impala_and_appo_cartpole_with_two_remote_evaluators(ray_session, trainer_class, overrides):
    # APPO at IMPALA's 2e-3 needed 147k-933k steps over seeds 0-4, at 1e-3 182k-298k.
    # Once evaluators sampled faster (numpy acting), RLlib's learner queue of 4 batches
    # let the behaviour policy lag further behind: 218k-643k and one seed short of 450
    # within 1M; with a queue of one batch APPO needs 262k-428k (tests/LEARNING.md).
    # Asynchronous sampling makes a seed's run vary: seed 3 took 360k, 373k and 1,498k
    # steps in three runs on 2026-11-29 and stayed below 450 within 1M in a fourth, so
    # the budget is 3M (a run that gets there stops early).
    with trainer_class({**IMPALA_CARTPOLE, **overrides, "seed": SEED}) as trainer:
        run = train_until(trainer, 450, 3_000_000)
    assert run.reached, run


@pytest.mark.timeout(300)
def test_pg_cartpole():
    with PGTrainer({"env": "CartPole-v1", "seed": SEED}) as trainer:
        run = train_until(trainer, 150, 300_000)
    assert run.reached, run


@pytest.mark.timeout(400)
def test_ppo_pendulum_improves():
    config = {
        "env": "Pendulum-v1",
        "seed": SEED,
        "gamma": 0.9,
        "train_batch_size": 1024,
        "sgd_minibatch_size": 64,
        "num_envs_per_evaluator": 4,
        "observation_filter": "MeanStdFilter",
    }
    with PPOTrainer(config) as trainer:
        run = train_until(trainer, -600, 200_000)
    assert run.reached, run


def evaluation_return(result: dict) -> float:
    """Greedy evaluation return; -inf in iterations without an evaluation."""
    return result.get("evaluation/episode_reward_mean", float("-inf"))


@pytest.mark.timeout(300)
def test_ppo_mujoco_inverted_pendulum_balances():
    pytest.importorskip("mujoco")  # the mujoco extra (CI installs it)
    config = {
        "env": "InvertedPendulum-v5",
        "seed": SEED,
        "num_envs_per_evaluator": 4,
        "train_batch_size": 1024,
        "sgd_minibatch_size": 64,
        "num_sgd_iter": 10,
        "lr": 3e-4,
        "lambda_": 0.95,
        "observation_filter": "MeanStdFilter",
        "evaluation_interval": 2,
        "evaluation_num_episodes": 5,
    }
    with PPOTrainer(config) as trainer:
        # 1000 is the most an episode can return (its time limit)
        run = train_until(trainer, 900, 60_000, metric=evaluation_return)
    assert run.reached, run
