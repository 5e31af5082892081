"""A NaN or inf reaching the learner is refused in every update path: the weights, the
optimizer moments and any loss state stay bit-identical, ``num_nonfinite_grads_skipped``
counts the refusal, and the next ordinary batch trains.  The typical cause: one inf
observation gives a finite loss and NaN gradients (issue 35)."""

from __future__ import annotations

import logging
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.alphazero import AlphaZeroConfig, AlphaZeroPolicy
from hierl.algorithms.alphazero.policy import MCTS_POLICY
from hierl.algorithms.ddpg import DDPGTrainer, TD3Trainer
from hierl.algorithms.dqn import DQNTrainer
from hierl.algorithms.impala import APPOTrainer, IMPALATrainer
from hierl.algorithms.marwil import MARWILConfig, MARWILPolicy
from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.ppo import PPOConfig, PPOPolicy, PPOTrainer
from hierl.algorithms.sac import SACTrainer
from hierl.evaluators.filters import MeanStdFilter
from hierl.optimizers.learner_thread import LearnerThread
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.optimizers.sgd import minibatch_sgd
from hierl.optimizers.sharded_ps.param_server import ParameterShard, compute_gradient_shards
from hierl.optimizers.sharded_ps.sharding import ShardSpec
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, UpdateStats
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import grads_finite

pytestmark = pytest.mark.timeout(120)


def _params(*grads: torch.Tensor | None) -> list[torch.nn.Parameter]:
    params = []
    for grad in grads:
        p = torch.nn.Parameter(torch.zeros(1 if grad is None else grad.shape))
        p.grad = grad
        params.append(p)
    return params


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [0, 1, 2])
def test_grads_finite_finds_one_bad_entry_in_any_gradient(bad, where):
    grads = [torch.randn(300, 300), torch.randn(7), torch.randn(3, 4)]
    assert bool(grads_finite(_params(*grads)))
    grads[where].view(-1)[-1] = bad
    assert not bool(grads_finite(_params(*grads)))


def test_grads_finite_does_not_overflow_and_skips_missing_or_empty_gradients():
    huge = torch.full((100, 100), 3e38)  # a sum of squares would overflow float32
    assert bool(grads_finite(_params(huge, -huge, None, torch.zeros(0))))
    assert bool(grads_finite(_params(None)))
    assert not bool(grads_finite(_params(None, torch.zeros(0), torch.tensor([float("nan")]))))


CARTPOLE = {
    "env": "CartPole-v1",
    "num_evaluators": 0,
    "train_batch_size": 64,
    "model": {"hiddens": [16]},
    "seed": 0,
}
SKIPPED = {NONFINITE_GRADS_SKIPPED: 1.0}


def assert_same_tree(before, after, path="state"):
    """Bit-identical nested dicts / lists of arrays and scalars."""
    if isinstance(before, dict):
        assert set(before) == set(after), path
        for k in before:
            assert_same_tree(before[k], after[k], f"{path}/{k}")
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after), path
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            assert_same_tree(a, b, f"{path}[{i}]")
    elif isinstance(before, (np.ndarray, np.generic)):
        np.testing.assert_array_equal(np.asarray(after), before, err_msg=path)
    else:
        assert after == before, path


def poisoned(batch: SampleBatch, row: int = 3, column: str = SampleBatch.OBS) -> SampleBatch:
    """A copy of ``batch`` with an inf in ``column`` at ``row``."""
    bad = batch.copy()
    bad[column] = np.array(bad[column], dtype=np.float32, copy=True)
    bad[column].reshape(len(bad[column]), -1)[row, 0] = np.inf
    return bad


def moved(before: dict, after: dict) -> bool:
    return any(not np.array_equal(before[k], after[k]) for k in before)


# -- the helper that combines update stats ---------------------------------------------------
def test_update_stats_average_applied_updates_and_count_refused_ones():
    stats = UpdateStats()
    stats.add({"loss": 1.0, NONFINITE_GRADS_SKIPPED: 0.0})
    stats.add(SKIPPED)
    stats.add({"loss": 3.0, NONFINITE_GRADS_SKIPPED: 0.0})
    assert stats.result() == {"loss": 2.0, NONFINITE_GRADS_SKIPPED: 1.0}
    assert (stats.applied, stats.skipped) == (2, 1)


# -- TorchPolicyGraph: learn_on_batch, compute/apply_gradients, minibatch SGD ---------------
@pytest.fixture(scope="module")
def ppo():
    with PPOTrainer(CARTPOLE) as trainer:
        trainer.train()  # Adam has moments now
        yield trainer.get_policy(), trainer.local_evaluator.sample()


def test_an_inf_observation_is_refused_and_the_next_batch_trains(ppo, caplog):
    policy, batch = ppo
    before = policy.get_state()
    with caplog.at_level(logging.WARNING, logger="hierl.torch_policy_graph"):
        stats = policy.learn_on_batch(poisoned(batch))
    assert stats == SKIPPED
    assert_same_tree(before, policy.get_state())
    assert "PPOPolicy: update refused" in caplog.text and "obs: min" in caplog.text
    assert "(1 non-finite)" in caplog.text
    stats = policy.learn_on_batch(batch)
    assert stats[NONFINITE_GRADS_SKIPPED] == 0.0 and np.isfinite(stats["total_loss"])
    assert moved(before["weights"], policy.get_weights())


def test_a_nan_loss_is_refused_too(ppo):
    policy, batch = ppo
    bad = batch.copy()
    bad[SampleBatch.ADVANTAGES] = bad[SampleBatch.ADVANTAGES].copy()
    bad[SampleBatch.ADVANTAGES][3] = np.nan
    before = policy.get_state()
    assert policy.learn_on_batch(bad) == SKIPPED
    assert_same_tree(before, policy.get_state())


def test_compute_gradients_flags_and_apply_gradients_refuses(ppo):
    policy, batch = ppo
    grads, stats = policy.compute_gradients(poisoned(batch), clip=False)
    assert stats[NONFINITE_GRADS_SKIPPED] == 1.0
    assert not all(np.isfinite(g).all() for g in grads)
    before = policy.get_state()
    for clip in (False, True):  # clipping an inf norm makes NaNs: checked after clipping
        assert policy.apply_gradients(grads, clip=clip) == SKIPPED
        assert_same_tree(before, policy.get_state())
    good, stats = policy.compute_gradients(batch)
    assert stats[NONFINITE_GRADS_SKIPPED] == 0.0
    assert policy.apply_gradients(good)[NONFINITE_GRADS_SKIPPED] == 0.0
    assert moved(before["weights"], policy.get_weights())


def test_minibatch_sgd_counts_the_refused_minibatch_and_averages_the_others(ppo):
    policy, batch = ppo
    stats = minibatch_sgd(policy, poisoned(batch), 1, 16, np.random.default_rng(0))
    assert stats[NONFINITE_GRADS_SKIPPED] == 1.0 and stats["num_updates"] == 3
    assert np.isfinite(stats["total_loss"])
    assert all(np.isfinite(w).all() for w in policy.get_weights().values())


def test_trainer_results_sum_the_refusals_of_an_iteration():
    from hierl.algorithms.metrics import mean_stats

    steps = [{"p": {"loss": 1.0, NONFINITE_GRADS_SKIPPED: 2.0}}, {"p": {"loss": 3.0}}]
    steps.append({"p": {"loss": 2.0, NONFINITE_GRADS_SKIPPED: 1.0}})
    assert mean_stats(steps) == {"p": {"loss": 2.0, NONFINITE_GRADS_SKIPPED: 3.0}}


def test_ppo_numpy_learning_path_refuses():
    space, act = gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32)
    torch.manual_seed(0)
    policy = PPOPolicy(space, act, PPOConfig.from_dict({"model": {"hiddens": [16]}}))
    assert policy._numpy_learner is not None
    rng = np.random.default_rng(0)
    n = 32
    batch = SampleBatch(
        {
            SampleBatch.OBS: rng.normal(size=(n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: rng.normal(size=(n, 1)).astype(np.float32),
            SampleBatch.ACTION_LOGP: np.full(n, -1.0, np.float32),
            SampleBatch.ACTION_DIST_INPUTS: np.zeros((n, 2), np.float32),
            SampleBatch.VF_PREDS: np.zeros(n, np.float32),
            SampleBatch.ADVANTAGES: rng.normal(size=n).astype(np.float32),
            SampleBatch.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )
    policy.learn_on_batch(batch)  # moments
    before = policy.get_state()
    assert policy.learn_on_batch(poisoned(batch)) == SKIPPED
    assert_same_tree(before, policy.get_state())
    assert policy.learn_on_batch(batch)[NONFINITE_GRADS_SKIPPED] == 0.0


# -- multi_gpu towers ------------------------------------------------------------------------
@pytest.mark.parametrize("num_towers", [1, 2])
def test_multi_gpu_refuses_when_any_tower_sees_an_inf(ppo, num_towers):
    policy, batch = ppo
    before = policy.get_state()
    learner = MultiDeviceLearner(policy, num_towers=num_towers)
    learner.load(poisoned(batch, row=batch.count - 1))  # the last tower's shard
    stats = learner.optimize(1, 0, np.random.default_rng(0))
    assert stats[NONFINITE_GRADS_SKIPPED] == 1.0 and stats["num_updates"] == 0
    assert_same_tree(before, policy.get_state())
    learner.load(batch)
    stats = learner.optimize(1, 0, np.random.default_rng(0))
    learner.close()
    assert stats[NONFINITE_GRADS_SKIPPED] == 0.0 and stats["num_updates"] == 1
    assert moved(before["weights"], policy.get_weights())


# -- gradient strategies: async, sharded_ps ------------------------------------------------
def test_async_applies_the_good_gradients_and_counts_the_bad_one():
    config = {**CARTPOLE, "optimizer": "async", "optimizer_config": {"grads_per_step": 3}}
    with PGTrainer(config) as trainer:
        ev = trainer.local_evaluator
        sample, calls = ev.sample, []

        def sometimes_poisoned():
            calls.append(1)
            batch = sample()
            return poisoned(batch) if len(calls) == 2 else batch

        ev.sample = sometimes_poisoned
        result = trainer.train()
        assert result[f"learner/{NONFINITE_GRADS_SKIPPED}"] == 1.0
        assert np.isfinite(result["learner/policy_loss"])
        assert all(np.isfinite(w).all() for w in trainer.get_policy().get_weights().values())


def test_sharded_ps_sends_no_shard_of_a_non_finite_gradient():
    config = {**CARTPOLE, "optimizer": "sharded_ps", "optimizer_config": {"num_shards": 2}}
    with PGTrainer(config) as trainer:
        ev = trainer.local_evaluator
        names = ev.policy.gradient_names()
        weights = ev.policy.get_weights()
        spec = ShardSpec.from_arrays(names, [weights[n] for n in names], 2)
        sample = ev.sample
        ev.sample = lambda: poisoned(sample())
        *shards, info = compute_gradient_shards(ev, spec, trainer.optimizer.global_vars())
        assert shards == [None, None] and info.stats == SKIPPED
        shard = ParameterShard(spec.split(weights)[0].copy(), lr=0.1)
        shard.apply_gradients(np.ones_like(shard.get_weights()))
        state, current = shard.get_optimizer_state(), shard.get_weights()
        np.testing.assert_array_equal(shard.apply_gradients(None), current)
        assert_same_tree(state, shard.get_optimizer_state())
        before = trainer.get_policy().get_weights()  # through the optimizer's step
        result = trainer.train()
        assert result[f"learner/{NONFINITE_GRADS_SKIPPED}"] == 1.0
        assert_same_tree(before, trainer.get_policy().get_weights())
        assert_same_tree(before, trainer.optimizer.get_shard_weights())
        ev.sample = sample
        result = trainer.train()  # the good gradients still flow
        assert result[f"learner/{NONFINITE_GRADS_SKIPPED}"] == 0.0
        assert moved(before, trainer.get_policy().get_weights())


# -- learner thread (aso, apex) -----------------------------------------------------------
def test_learner_thread_counts_refusals_once():
    outcomes = iter([{"loss": 1.0, NONFINITE_GRADS_SKIPPED: 0.0}, SKIPPED])
    learner = LearnerThread(lambda tag, batch: (next(outcomes), None), inqueue_size=4)
    learner.start()
    try:
        for tag in range(2):
            learner.inqueue.put((tag, SampleBatch({SampleBatch.OBS: np.zeros(4, np.float32)})))
        deadline = time.monotonic() + 30
        while learner.num_updates < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert learner.pop_stats() == {"loss": 1.0, NONFINITE_GRADS_SKIPPED: 1.0}
        assert learner.pop_stats() == {"loss": 1.0, NONFINITE_GRADS_SKIPPED: 0.0}  # none new
        learner.check()
    finally:
        learner.stop()


@pytest.mark.parametrize("trainer_class", [IMPALATrainer, APPOTrainer])
def test_impala_and_appo_refuse(trainer_class):
    config = {**CARTPOLE, "train_batch_size": 80, "rollout_fragment_length": 20}
    if trainer_class is APPOTrainer:
        config["target_network_update_freq"] = 1
    with trainer_class(config) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        policy.learn_on_batch(batch)
        before = policy.get_state()
        assert policy.learn_on_batch(poisoned(batch)) == SKIPPED
        assert_same_tree(before, policy.get_state())  # APPO: target and update count too
        assert policy.learn_on_batch(batch)[NONFINITE_GRADS_SKIPPED] == 0.0


# -- replay learners: DQN (and CQL), DDPG, TD3, SAC -----------------------------------------
@pytest.mark.parametrize("cql_alpha", [0.0, 1.0])
def test_dqn_refuses_and_returns_no_priorities(cql_alpha):
    with DQNTrainer({**CARTPOLE, "cql_alpha": cql_alpha}) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        policy.learn_on_batch(batch)
        before = policy.get_state()
        result = policy.learn_on_replay_batch(poisoned(batch))
        assert result.stats == SKIPPED and result.td_error is None
        assert_same_tree(before, policy.get_state())
        result = policy.learn_on_replay_batch(batch)
        assert result.stats[NONFINITE_GRADS_SKIPPED] == 0.0 and result.td_error is not None


@pytest.mark.parametrize("trainer_class", [DDPGTrainer, TD3Trainer, SACTrainer])
def test_ddpg_td3_and_sac_refuse_the_critic_step_and_everything_after_it(trainer_class):
    config = {"env": "Pendulum-v1", "num_evaluators": 0, "seed": 0, "rollout_fragment_length": 16}
    with trainer_class(config) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        for _ in range(2):  # both optimizers have moments
            policy.learn_on_replay_batch(batch)
        before = policy.get_state()
        result = policy.learn_on_replay_batch(poisoned(batch))
        assert result.stats == SKIPPED and result.td_error is None
        assert_same_tree(before, policy.get_state())
        result = policy.learn_on_replay_batch(batch)
        assert result.stats[NONFINITE_GRADS_SKIPPED] == 0.0


# -- MARWIL, AlphaZero -------------------------------------------------------------------------
def marwil_batch(n: int = 64, seed: int = 0) -> SampleBatch:
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.normal(size=(n, 4)).astype(np.float32),
            SampleBatch.ACTIONS: rng.integers(0, 2, n),
            SampleBatch.VALUE_TARGETS: rng.normal(3.0, 2.0, n).astype(np.float32),
        }
    )


def marwil_policy(**config) -> MARWILPolicy:
    torch.manual_seed(0)
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    cfg = MARWILConfig.from_dict({"model": {"hiddens": [16]}, **config})
    return MARWILPolicy(space, gym.spaces.Discrete(2), cfg)


def test_marwil_refusal_leaves_its_advantage_normaliser_alone():
    policy = marwil_policy(moving_average_sqd_adv_norm_update_rate=0.1)
    batch = marwil_batch()
    policy.learn_on_batch(batch)
    before = policy.get_state()
    assert policy.learn_on_batch(poisoned(batch)) == SKIPPED
    assert_same_tree(before, policy.get_state())  # includes ma_sqd_adv_norm


def test_alphazero_refuses():
    config = AlphaZeroConfig.from_dict({"env": "hierl/TicTacToe-v0", "hidden_sizes": [16]})
    env = gym.make("hierl/TicTacToe-v0")
    policy = AlphaZeroPolicy(env.observation_space, env.action_space, config)
    rng = np.random.default_rng(0)
    n, size = 8, int(np.prod(env.observation_space.shape))
    batch = SampleBatch(
        {
            SampleBatch.OBS: rng.integers(0, 2, (n, size)).astype(np.float32),
            MCTS_POLICY: rng.dirichlet(np.ones(9), n).astype(np.float32),
            SampleBatch.VALUE_TARGETS: rng.choice([-1.0, 1.0], n).astype(np.float32),
        }
    )
    policy.learn_on_batch(batch)
    before = policy.get_state()
    bad = batch.copy()
    bad[SampleBatch.VALUE_TARGETS] = np.full(n, np.nan, np.float32)
    assert policy.learn_on_batch(bad) == SKIPPED
    assert_same_tree(before, policy.get_state())
    assert policy.learn_on_batch(batch)[NONFINITE_GRADS_SKIPPED] == 0.0


# -- MeanStdFilter -------------------------------------------------------------------------
def test_mean_std_filter_does_not_record_non_finite_rows(caplog):
    f = MeanStdFilter((2,))
    f(np.array([[1.0, 2.0], [3.0, 4.0]]))
    with caplog.at_level(logging.WARNING, logger="hierl.evaluators.filters"):
        f(np.array([[5.0, 6.0], [np.inf, 0.0], [np.nan, 1.0]]))
        f(np.array([[1e300, 0.0], [1e300, 0.0]]))  # finite rows whose moments overflow
    assert f.num_nonfinite_rows_skipped == 4 and "not recorded" in caplog.text
    reference = MeanStdFilter((2,))
    reference(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    assert_same_tree(reference.get_checkpoint_state(), f.get_checkpoint_state())
    assert np.isfinite(f(np.array([[2.0, 3.0]]))).all()
