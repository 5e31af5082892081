"""Learning from logged data: BC from expert CartPole episodes; off-policy estimates."""

from __future__ import annotations

import numpy as np
import pytest
from learning import SEED, train_until

from hierl.algorithms.marwil import BCTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.evaluators.offline import iter_episodes, list_files

pytestmark = [pytest.mark.learning]


def record(weights, out: str, steps: int, seed: int) -> float:
    """Log ``steps`` env steps of whole episodes of the PPO policy ``weights``
    (sampled actions, with their ``action_logp``); returns their mean return."""
    config = {
        "env": "CartPole-v1",
        "seed": seed,
        "output": out,
        "batch_mode": "complete_episodes",
        "num_envs_per_evaluator": 1,
        "rollout_fragment_length": 1000,
    }
    returns = []
    with PPOTrainer(config) as t:
        t.set_weights(weights)
        rows = 0
        while rows < steps:
            rows += t.local_evaluator.sample().count
            returns += [e.episode_reward for e in t.local_evaluator.get_metrics()]
    return float(np.mean(returns))


@pytest.fixture(scope="module")
def expert_data(tmp_path_factory):
    """50k steps of a PPO CartPole policy trained to a mean return of 475 (~20 s)."""
    with PPOTrainer({"env": "CartPole-v1", "seed": SEED}) as ppo:
        train_until(ppo, 475, 300_000, record_run=False)
        weights = ppo.get_weights()
    path = str(tmp_path_factory.mktemp("expert"))
    logged = record(weights, path, 50_000, SEED + 1)
    return path, logged


def evaluation_return(result: dict) -> float:
    return result.get("evaluation/episode_reward_mean", float("-inf"))


@pytest.mark.timeout(300)
def test_bc_clones_an_expert_from_logged_data(expert_data):
    path, logged = expert_data
    assert logged >= 450
    config = {
        "env": "CartPole-v1",
        "input": path,
        "seed": SEED,
        "evaluation_interval": 2,
        "evaluation_num_episodes": 10,
    }
    with BCTrainer(config) as trainer:
        run = train_until(trainer, 450, 200_000, metric=evaluation_return)
    assert run.reached, run


@pytest.mark.timeout(300)
def test_off_policy_estimates_of_the_logging_policy_equal_its_logged_return(expert_data):
    # The behaviour return is the mean discounted return of the logged episodes.  BC's
    # untrained policy is near uniform, far from the expert: IS's product of 500 ratios
    # collapses.  CartPole pays 1 per step and the expert's episodes all last 500 steps,
    # so WIS (a weighted mean of per-step rewards) equals the behaviour return (exactly
    # when every logged episode lasts 500 steps).
    path, _ = expert_data
    config = {"env": "CartPole-v1", "input": path, "off_policy_estimation": ["is", "wis"]}
    episodes = list(iter_episodes(list_files(path)))
    discounted = np.mean([np.sum(0.99 ** np.arange(e.count) * e["rewards"]) for e in episodes])
    with BCTrainer(config) as trainer:
        estimates = trainer.off_policy_estimates()
        for name in ("is", "wis"):
            behaviour = estimates[f"off_policy_estimation/{name}/v_behavior"]
            assert behaviour == pytest.approx(discounted, rel=1e-9)
        assert estimates["off_policy_estimation/is/v_target"] < 0.5 * behaviour
        assert estimates["off_policy_estimation/wis/v_target"] == pytest.approx(behaviour, rel=0.05)
        result = trainer.train()
        assert "off_policy_estimation/wis/v_target" in result
