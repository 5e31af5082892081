"""Learning from logged data: BC from expert CartPole episodes, MARWIL against BC on
expert plus random episodes, DQN (with CQL) from a mediocre policy's data; off-policy
estimates."""

from __future__ import annotations

import numpy as np
import pytest

from hierl.algorithms.dqn import DQNTrainer
from hierl.algorithms.marwil import BCTrainer, MARWILTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.evaluators.offline import iter_episodes, list_files
from tests.support.learning_runs import SEED, train_until

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


@pytest.fixture(scope="module")
def mixed_data(expert_data, tmp_path_factory):
    """The expert's 50k steps plus 50k steps of an untrained (near-uniform) policy."""
    expert, _ = expert_data
    with PPOTrainer({"env": "CartPole-v1", "seed": SEED + 2}) as untrained:
        weights = untrained.get_weights()
    random = str(tmp_path_factory.mktemp("random"))
    logged = record(weights, random, 50_000, SEED + 3)
    return list_files(expert) + list_files(random), logged


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


@pytest.mark.timeout(300)
def test_marwil_beats_bc_on_expert_and_random_episodes(mixed_data):
    # Both are compared as the stochastic policies they learn (sampled actions).  Greedy
    # actions cannot tell them apart on this mix: where the expert acts, BC's probability
    # of its action is w + (1 - w) / 2 > 1/2 for any expert share w > 0, so BC's argmax is
    # the expert's.  Sampled, BC's blend of expert and uniform actions scores ~30-80 (seed
    # 0); MARWIL's advantage weights undo the blend.
    files, random_return = mixed_data
    assert random_return < 50
    config = {
        "env": "CartPole-v1",
        "input": files,
        "seed": SEED,
        "evaluation_interval": 5,
        "evaluation_num_episodes": 20,
        "evaluation_explore": True,
    }
    with MARWILTrainer(config) as marwil:
        run = train_until(marwil, 200, 400_000, metric=evaluation_return)
    assert run.reached, run
    with BCTrainer(config) as bc:
        clone = train_until(bc, 200, run.reached_at, metric=evaluation_return, record_run=False)
    print(f"BC_BEST {clone.best}")
    assert clone.best < 150, clone


@pytest.mark.timeout(400)
def test_dqn_with_cql_from_a_mediocre_policys_data_beats_its_logged_return(tmp_path):
    # The data: 30k steps of a half-trained DQN acting epsilon-greedily with epsilon 0.3
    # (a mediocre behaviour policy whose data covers both actions), logged raw so DQN
    # builds its rows as it reads.  The logged return is the mean over whole episodes.
    # Plain DQN on this data lets its max over actions chase the errors of actions the
    # data rarely took and diverges (Q in the thousands, 9-step episodes for every seed
    # tried); CQL's conservative term keeps Q near the discounted return (~100).
    with DQNTrainer({"env": "CartPole-v1", "seed": SEED}) as online:
        while online.train()["timesteps_total"] < 15_000:
            pass
        weights = online.get_weights()
    behaviour = {"initial_epsilon": 0.3, "final_epsilon": 0.3, "output_postprocessed": False}
    with DQNTrainer(
        {"env": "CartPole-v1", "seed": SEED + 100, "output": str(tmp_path), **behaviour}
    ) as logger:
        logger.set_weights(weights)
        rows = 0
        while rows < 30_000:
            rows += logger.local_evaluator.sample().count
    logged = float(np.mean([e["rewards"].sum() for e in iter_episodes(list_files(str(tmp_path)))]))
    config = {
        "env": "CartPole-v1",
        "seed": SEED,
        "input": str(tmp_path),
        "postprocess_inputs": True,
        "cql_alpha": 1.0,
        "n_step": 1,
        "prioritized_replay": False,
        "replay_ratio": 4,
        "learning_starts": 5000,
        "rollout_fragment_length": 250,
        "timesteps_per_iteration": 5000,
        "evaluation_interval": 1,
        "evaluation_num_episodes": 10,
    }
    with DQNTrainer(config) as offline:
        run = train_until(offline, 1.5 * logged, 150_000, metric=evaluation_return)
    assert run.reached, (logged, run)
