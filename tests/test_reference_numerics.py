"""Numerics pinned against their references (issue 35): APPO's target-network ratio
(RLlib's APPO), MARWIL's exponent clip and its ``c^2`` under refused updates and under
``multi_gpu``, OPE's ``v_delta``, and V-trace runs keyed on the agent."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.impala import APPOTrainer, IMPALATrainer
from hierl.algorithms.marwil import MARWILConfig, MARWILPolicy
from hierl.algorithms.off_policy_estimation import estimate
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED
from hierl.postprocessing import trajectory_ends
from hierl.sample_batch import SampleBatch as SB

pytestmark = pytest.mark.timeout(120)

TINY = {
    "env": "CartPole-v1",
    "num_evaluators": 0,
    "num_envs_per_evaluator": 2,
    "rollout_fragment_length": 20,
    "train_batch_size": 80,
    "model": {"hiddens": [16]},
    "seed": 0,
}


# -- APPO with a target network ----------------------------------------------------------------
def test_appo_target_network_ratio_is_rllibs_clamped_mu_over_pi_t_times_pi_over_mu():
    """Row by row: r = clamp(mu / pi_t, 0, 2) * pi / mu inside PPO's clipped surrogate
    on V-trace's advantages for pi_t (RLlib 2.x ``appo_torch_learner``), not the old
    clamp(pi_t / mu, 0, 2) * min(pi / pi_t A, clip(pi / pi_t) A)."""
    clip = 0.2
    config = {**TINY, "target_network_update_freq": 1, "clip_param": clip}
    with APPOTrainer(config) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        tensors = policy.to_tensors(SB(batch))
        with torch.no_grad():
            policy.model.pi_head.weight.mul_(3.0)  # pi != pi_t
            pi_t_logp = policy.dist_class(policy.model_outputs(tensors, policy.target_model)[0])
            pi_t_logp = pi_t_logp.logp(tensors[SB.ACTIONS])
        # behaviour log-probs off pi_t by up to a factor e either way: the clamp to
        # [0, 2] acts on some rows and not on others
        shift = np.random.default_rng(0).uniform(-1.0, 1.0, batch.count).astype(np.float32)
        mu_logp = pi_t_logp.numpy() + shift
        tensors[SB.ACTION_LOGP] = torch.from_numpy(mu_logp)
        dist_inputs, values = policy.model_outputs(tensors)
        dist = policy.dist_class(dist_inputs)
        loss, _, _ = policy.policy_objective(tensors, dist, values)
        pi_logp = dist.logp(tensors[SB.ACTIONS]).detach().numpy().astype(np.float64)
        adv = policy.vtrace_targets(tensors, pi_t_logp, values).pg_advantages.numpy()
    adv, pt, mu = adv.astype(np.float64), pi_t_logp.numpy().astype(np.float64), mu_logp
    clamp = np.clip(np.exp(mu - pt), 0.0, 2.0)
    assert 0 < np.mean(clamp == 2.0) < 1  # the clamp is exercised
    ratio = clamp * np.exp(pi_logp - mu)
    expected = -np.minimum(ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    w, r = np.clip(np.exp(pt - mu), 0.0, 2.0), np.exp(pi_logp - pt)  # the old form
    old = -(w * np.minimum(r * adv, np.clip(r, 1 - clip, 1 + clip) * adv)).mean()
    assert abs(old - expected) > 1e-3  # the test tells the two apart


# -- MARWIL ---------------------------------------------------------------------------------
def marwil_policy(rate: float) -> MARWILPolicy:
    """A MARWIL policy whose ``c^2`` moves at ``rate`` per update."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    config = MARWILConfig.from_dict(
        {"model": {"hiddens": [16]}, "moving_average_sqd_adv_norm_update_rate": rate}
    )
    return MARWILPolicy(space, gym.spaces.Discrete(2), config)


def marwil_batch(n: int, seed: int = 0) -> SB:
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(n, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(0, 2, n),
            SB.VALUE_TARGETS: rng.normal(3.0, 2.0, n).astype(np.float32),
        }
    )


def moved_norm(policy: MARWILPolicy, batch: SB, start: float) -> float:
    """Closed form: ``c^2 + rate * (mean((R - V(s))^2) - c^2)`` under the current weights."""
    values = torch.from_numpy(policy.value(batch[SB.OBS]))
    sqd = float(((torch.from_numpy(batch[SB.VALUE_TARGETS]) - values) ** 2).mean())
    rate = policy.config.moving_average_sqd_adv_norm_update_rate
    return start + rate * (sqd - start)


def test_marwil_advantage_outlier_is_clipped_in_the_exponent_and_moves_c2_once():
    # 128 rows (MARWIL's minibatch) with one advantage of ~1e4: at c^2's update rate 1e-2,
    # beta A / c ~ 112 > 88.7, where float32 exp overflows.
    policy = marwil_policy(1e-2)
    batch = marwil_batch(128)
    batch[SB.VALUE_TARGETS][7] = 1e4
    expected = moved_norm(policy, batch, policy.ma_sqd_adv_norm)
    before = policy.get_weights()
    stats = policy.learn_on_batch(batch)
    assert stats[NONFINITE_GRADS_SKIPPED] == 0.0 and np.isfinite(stats["total_loss"])
    assert stats["mean_weight"] == pytest.approx(np.exp(20.0) / 128, rel=0.01)  # the clip
    assert policy.ma_sqd_adv_norm == pytest.approx(expected, rel=1e-6)
    after = policy.get_weights()
    assert all(np.isfinite(v).all() for v in after.values())
    assert any(not np.array_equal(after[k], before[k]) for k in before)


@pytest.mark.parametrize("num_towers", [1, 2])
def test_marwil_c2_under_multi_gpu_moves_once_from_every_towers_rows(num_towers):
    policy = marwil_policy(0.1)  # moves visibly per update
    batch = marwil_batch(128)
    expected = moved_norm(policy, batch, policy.ma_sqd_adv_norm)  # all 128 rows
    learner = MultiDeviceLearner(policy, num_towers=num_towers)
    learner.load(batch)
    stats = learner.optimize(1, 0, np.random.default_rng(0))
    assert stats["num_updates"] == 1
    assert policy.ma_sqd_adv_norm == pytest.approx(expected, rel=1e-6)
    assert stats["ma_sqd_adv_norm"] == pytest.approx(expected, rel=1e-6)
    # the next update's towers read the state the last one left, and move it once more
    expected = moved_norm(policy, batch, policy.ma_sqd_adv_norm)
    learner.optimize(1, 0, np.random.default_rng(0))
    learner.close()
    assert policy.ma_sqd_adv_norm == pytest.approx(expected, rel=1e-6)


# -- off-policy estimation ------------------------------------------------------------------
def test_ope_v_delta_says_worse_where_v_gain_reads_better_on_negative_returns():
    # action 1 costs 1; behaviour takes it with p 0.5, the target with p 0.8: a worse policy
    rng = np.random.default_rng(0)
    episodes = []
    for i in range(500):
        actions = (rng.random(5) < 0.5).astype(np.int64)
        episodes.append(
            SB(
                actions=actions,
                rewards=-actions.astype(np.float32),
                action_logp=np.full(5, np.log(0.5), np.float32),
                eps_id=np.full(5, i),
                t=np.arange(5),
            )
        )

    def target_logp(ep):
        return np.where(ep[SB.ACTIONS] == 1, np.log(0.8), np.log(0.2))

    out = estimate("wis", episodes, target_logp, 0.9)
    assert out["v_gain"] > 1.2  # reads "better"
    assert out["v_delta"] == pytest.approx(out["v_target"] - out["v_behavior"])
    assert out["v_delta"] < -0.5  # it is worse: sum_t 0.9^t * (0.5 - 0.8) ~ -1.2


# -- V-trace runs: one per agent -----------------------------------------------------------
def test_trajectory_ends_split_two_agents_of_one_episode():
    # agent 1 enters at step 3 of the same episode: its t continues agent 0's
    eps, t = np.zeros(6, np.int64), np.arange(6)
    agent = np.array([0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(trajectory_ends(eps, t, agent), [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(trajectory_ends(eps, t), [0, 0, 0, 0, 0, 1])


def test_impala_vtrace_of_two_agents_equals_each_agents_own():
    with IMPALATrainer(TINY) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample().slice(0, 8)
        assert len(set(batch[SB.EPS_ID])) == 1 and np.all(np.diff(batch[SB.T]) == 1)
        batch[SB.TERMINATEDS] = np.zeros(8, bool)
        batch[SB.AGENT_INDEX] = np.repeat([0, 1], 4)

        def targets(rows: SB) -> np.ndarray:
            tensors = policy.to_tensors(rows)
            with torch.no_grad():
                dist_inputs, values = policy.model_outputs(tensors)
                logp = policy.dist_class(dist_inputs).logp(tensors[SB.ACTIONS])
                return policy.vtrace_targets(tensors, logp, values).vs.numpy()

        joint = targets(batch)
        apart = np.concatenate([targets(batch.slice(0, 4)), targets(batch.slice(4, 8))])
    np.testing.assert_allclose(joint, apart, rtol=1e-6)
