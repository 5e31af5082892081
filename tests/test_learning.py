"""Learning tests: each algorithm reaches a return threshold within a bounded budget."""

from __future__ import annotations

import pytest

from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.ppo import PPOTrainer

pytestmark = [pytest.mark.learning]


def train_until(trainer, threshold: float, max_timesteps: int) -> dict:
    """Train until episode_reward_mean >= threshold or the step budget is spent."""
    best = {"episode_reward_mean": float("-inf")}
    with trainer:
        while True:
            result = trainer.train()
            if result["episode_reward_mean"] >= best["episode_reward_mean"]:
                best = result
            if result["episode_reward_mean"] >= threshold:
                return result
            if result["timesteps_total"] >= max_timesteps:
                return best


@pytest.mark.timeout(300)
def test_ppo_cartpole_with_two_remote_evaluators(ray_session):
    trainer = PPOTrainer(
        {
            "env": "CartPole-v1",
            "num_evaluators": 2,
            "num_envs_per_evaluator": 4,
            "num_cpus_per_evaluator": 0.5,
            "seed": 0,
        }
    )
    assert len(trainer.evaluators.remote_evaluators) == 2
    result = train_until(trainer, 450, max_timesteps=250_000)
    assert result["episode_reward_mean"] >= 450, result


@pytest.mark.timeout(300)
def test_pg_cartpole():
    result = train_until(PGTrainer({"env": "CartPole-v1", "seed": 0}), 150, 300_000)
    assert result["episode_reward_mean"] >= 150, result


@pytest.mark.timeout(400)
def test_ppo_pendulum_improves():
    config = {
        "env": "Pendulum-v1",
        "seed": 0,
        "gamma": 0.9,
        "train_batch_size": 1024,
        "sgd_minibatch_size": 64,
        "num_envs_per_evaluator": 4,
        "observation_filter": "MeanStdFilter",
    }
    result = train_until(PPOTrainer(config), -600, max_timesteps=200_000)
    assert result["episode_reward_mean"] > -600, result
