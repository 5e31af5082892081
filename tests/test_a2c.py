"""A2C / A3C: advantages (n-step and GAE) in closed form, the loss, learning on CartPole."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.a2c import A2CConfig, A2CPolicy, A2CTrainer, A3CTrainer
from hierl.algorithms.pg import PGPolicy
from hierl.config import ConfigError
from hierl.sample_batch import SampleBatch as SB
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)


def _policy(**config) -> A2CPolicy:
    torch.manual_seed(0)
    config = A2CConfig.from_dict({"env": "x", "model": {"hiddens": [8]}, **config})
    return A2CPolicy(OBS_SPACE, ACT_SPACE, config)


def _segment(terminated: bool) -> SB:
    """One 4-step segment of one episode, ending terminated or cut mid-episode."""
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
    return SB(
        {
            SB.OBS: obs[:4],
            SB.NEW_OBS: obs[1:],
            SB.ACTIONS: np.array([0, 1, 1, 0]),
            SB.REWARDS: np.array([1.0, 0.5, -1.0, 2.0], np.float32),
            SB.TERMINATEDS: np.array([False, False, False, terminated]),
            SB.TRUNCATEDS: np.zeros(4, bool),
            SB.EPS_ID: np.zeros(4, np.int64),
            SB.VF_PREDS: np.array([0.3, -0.2, 0.1, 0.4], np.float32),
        }
    )


@pytest.mark.parametrize("terminated", [True, False])
def test_n_step_advantages_are_bootstrapped_returns_minus_the_baseline(terminated):
    gamma = 0.9
    policy = _policy(use_gae=False, gamma=gamma)
    batch = policy.postprocess_trajectories(_segment(terminated))
    rewards, values = batch[SB.REWARDS], batch[SB.VF_PREDS]
    # CRUCIAL: a cut fragment bootstraps from V(s_T); a terminal state does not.
    boot = 0.0 if terminated else float(policy.value(batch[SB.NEW_OBS][-1:])[0])
    returns = [sum(gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(4)]
    returns = np.array([g + gamma ** (4 - t) * boot for t, g in enumerate(returns)])
    np.testing.assert_allclose(batch[SB.VALUE_TARGETS], returns, rtol=1e-5)
    np.testing.assert_allclose(batch[SB.ADVANTAGES], returns - values, rtol=1e-5, atol=1e-6)


def test_gae_advantages_match_the_closed_form():
    gamma, lam = 0.9, 0.8
    policy = _policy(use_gae=True, gamma=gamma, lambda_=lam)
    batch = policy.postprocess_trajectories(_segment(terminated=False))
    v = np.append(batch[SB.VF_PREDS], policy.value(batch[SB.NEW_OBS][-1:]))
    deltas = batch[SB.REWARDS] + gamma * v[1:] - v[:-1]
    adv = [sum((gamma * lam) ** k * d for k, d in enumerate(deltas[t:])) for t in range(4)]
    np.testing.assert_allclose(batch[SB.ADVANTAGES], adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch[SB.VALUE_TARGETS], np.array(adv) + v[:-1], rtol=1e-5)


def test_loss_is_the_policy_gradient_loss_minus_the_weighted_entropy():
    policy = _policy(entropy_coeff=0.25)
    batch = policy.to_tensors(policy.postprocess_trajectories(_segment(terminated=True)))
    total, stats = policy.loss(batch)
    pg_total, _ = PGPolicy.loss(policy, batch)
    dist = policy.dist_class(policy.model(batch[SB.OBS])[0])
    expected = pg_total - 0.25 * dist.entropy().mean()
    torch.testing.assert_close(total, expected)
    assert stats["entropy"] == pytest.approx(float(dist.entropy().mean().detach()))


def test_each_trainer_names_its_valid_optimizers():
    with pytest.raises(ConfigError, match="valid: local, multi_gpu, allreduce, auto"):
        A2CTrainer({"env": "CartPole-v1", "optimizer": "async"})
    with pytest.raises(ConfigError, match="valid: async, sharded_ps, allreduce"):
        A3CTrainer({"env": "CartPole-v1", "optimizer": "local", "num_evaluators": 0})
    with pytest.raises(ConfigError, match="entropy_coeff"):
        A2CConfig(env="CartPole-v1", entropy_coeff=-1.0)


@pytest.mark.learning
def test_a2c_learns_cartpole():
    with A2CTrainer({"env": "CartPole-v1", "seed": SEED}) as trainer:
        run = train_until(trainer, 150, 100_000)
    assert run.reached, run


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.parametrize(
    ("optimizer", "sample_async"),
    [("async", False), ("async", True), ("sharded_ps", False), ("allreduce", False)],
)
def test_a3c_learns_cartpole_with_two_evaluators(ray_session, optimizer, sample_async):
    config = {
        "env": "CartPole-v1",
        "optimizer": optimizer,
        "sample_async": sample_async,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "seed": SEED,
    }
    if optimizer == "allreduce":
        # One synchronous update per round: A3C's 2000-step iterations would give one
        # update per 2000 steps; A2C's 160 steps per replica keeps updates frequent.
        config["train_batch_size"] = 320
    with A3CTrainer(config) as trainer:
        run = train_until(trainer, 150, 150_000)
    assert run.reached, run


def test_to_tensors_shares_writable_arrays_and_copies_read_only_ones():
    policy = _policy()
    writable = np.arange(4, dtype=np.float32)
    read_only = np.arange(4, dtype=np.float32)
    read_only.flags.writeable = False  # as arrays fetched from Ray's object store are
    tensors = policy.to_tensors(SB({"a": writable, "b": read_only}))
    assert np.shares_memory(tensors["a"].numpy(), writable)
    assert not np.shares_memory(tensors["b"].numpy(), read_only)
    np.testing.assert_array_equal(tensors["b"].numpy(), read_only)
