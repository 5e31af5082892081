"""``aso`` optimizer and IMPALA / APPO: config, V-trace targets on sampled batches, the
bounded pipeline, weight broadcasts, aggregators, learner failures, refused policies."""

from __future__ import annotations

import time
import traceback

import numpy as np
import pytest
import torch

from hierl.algorithms.impala import (
    APPOPolicy,
    APPOTrainer,
    IMPALAPolicy,
    IMPALATrainer,
)
from hierl.config import ConfigError
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import DEFAULT_POLICY_ID
from hierl.sample_batch import SampleBatch as SB
from tests.support.helpers import train_until_done
from tests.support.learning_runs import SEED

pytestmark = pytest.mark.timeout(180)
TIMEOUT_S = 60

TINY = {
    "env": "CartPole-v1",
    "num_evaluators": 0,
    "num_envs_per_evaluator": 2,
    "rollout_fragment_length": 20,
    "train_batch_size": 80,
    "model": {"hiddens": [16]},
    "seed": SEED,
}
REMOTE = {**TINY, "num_evaluators": 2, "num_cpus_per_evaluator": 0.25}


def _with_aso(config: dict, **settings) -> dict:
    return {**config, "optimizer_config": {"min_step_time_s": 0.2, **settings}}


def _changed(a: dict, b: dict) -> bool:
    return any(not np.array_equal(a[k], b[k]) for k in a)


# -- config ----------------------------------------------------------------------------------
def test_defaults_and_bad_values_name_the_setting():
    assert IMPALATrainer.config_class.default_optimizer == "aso"
    assert APPOTrainer.config_class.supported_optimizers == ("aso",)
    with pytest.raises(ConfigError, match="vtrace_clip_rho_threshold"):
        IMPALATrainer({**TINY, "vtrace_clip_rho_threshold": 0})
    with pytest.raises(ConfigError, match="broadcast_interval"):
        IMPALATrainer(_with_aso(TINY, broadcast_interval=0))
    with pytest.raises(ConfigError, match="num_aggregation_workers = 1 needs remote"):
        IMPALATrainer(_with_aso(TINY, num_aggregation_workers=1))
    with pytest.raises(ConfigError, match="optimizer"):
        IMPALATrainer({**TINY, "optimizer": "local"})


class NoLogpPolicy(IMPALAPolicy):
    """Acts without reporting the behaviour log-probabilities."""

    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        actions, state, extra = super().compute_actions(obs_batch, state_batches, explore)
        extra.pop(SB.ACTION_LOGP)
        return actions, state, extra


class NoLogpTrainer(IMPALATrainer):
    policy_class = NoLogpPolicy


def test_a_policy_without_behaviour_logp_is_refused_when_built():
    with pytest.raises(ConfigError) as info:
        NoLogpTrainer(TINY)
    message = str(info.value)
    assert "action_logp" in message and "NoLogpPolicy" in message and "vf_preds" in message


# -- V-trace on real batches ---------------------------------------------------------------
def test_on_policy_targets_of_a_sampled_batch_are_the_gae_lambda_returns():
    """Behaviour = learner (no update between): the loss's V-trace targets over a sampled
    batch (fragment cuts, terminations, several sub-envs) equal GAE(lambda)'s."""
    config = {**TINY, "lambda_": 0.9, "num_envs_per_evaluator": 3, "rollout_fragment_length": 60}
    with IMPALATrainer(config) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        assert batch[SB.TERMINATEDS].any()  # episodes end inside the fragment
        tensors = policy.to_tensors(SB(batch))
        _, values = policy.model_outputs(tensors)
        targets = policy.vtrace_targets(tensors, tensors[SB.ACTION_LOGP], values)
        expected = compute_advantages(
            SB(batch), policy.bootstrap_values(batch), trainer.config.gamma, 0.9, use_gae=True
        )
    np.testing.assert_allclose(targets.rhos.numpy(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(targets.vs.numpy(), expected[SB.VALUE_TARGETS], rtol=1e-4, atol=1e-4)


# -- the in-process pipeline ---------------------------------------------------------------
@pytest.mark.parametrize("trainer_class", [IMPALATrainer, APPOTrainer])
def test_in_process_pipeline_learns_and_reports(trainer_class):
    with trainer_class(_with_aso(TINY)) as trainer:
        before = trainer.get_weights()[DEFAULT_POLICY_ID]
        result = train_until_done(trainer, lambda r: r["num_learner_updates"] >= 2)
        after = trainer.get_weights()[DEFAULT_POLICY_ID]
    assert _changed(before, after)
    assert result["num_learner_updates"] >= 2
    assert 0 < result["num_steps_trained"] <= result["num_steps_sampled"]
    assert result["policy_lag_max"] >= result["policy_lag_mean"] >= 0
    assert np.isfinite(result["learner/vf_loss"]) and result["learner/mean_rho"] > 0


def test_appo_minibatch_epochs_and_a_recurrent_model_run():
    config = {
        **_with_aso(TINY),
        "num_sgd_iter": 2,
        "sgd_minibatch_size": 40,
        "model": {"hiddens": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 10},
    }
    with APPOTrainer(config) as trainer:
        result = train_until_done(trainer, lambda r: "learner/num_updates" in r)
    assert result["learner/num_updates"] >= 4  # 2 epochs x at least 2 minibatches of 80 rows
    assert np.isfinite(result["learner/total_loss"])


def test_learner_failure_surfaces_in_train_with_its_traceback():
    def broken_loss(batch):
        raise ValueError("boom in the loss")

    with IMPALATrainer(_with_aso(TINY)) as trainer:
        trainer.get_policy().loss = broken_loss
        with pytest.raises(RuntimeError, match="learner thread failed") as info:
            train_until_done(trainer, lambda r: False)  # until the learner meets a batch
    cause = info.value.__cause__
    assert isinstance(cause, ValueError)
    assert "broken_loss" in "".join(traceback.format_exception(cause))


@pytest.mark.parametrize("normalize", [False, True])
def test_appo_surrogate_is_the_clipped_objective_on_the_vtrace_advantages(normalize):
    """APPO's policy loss, from its definition: the clipped surrogate of pi/mu on V-trace's
    policy-gradient advantages, standardised over the minibatch when asked to."""
    config = {**TINY, "clip_param": 0.1, "normalize_advantages": normalize}
    with APPOTrainer(config) as trainer:
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        tensors = policy.to_tensors(SB(batch))
        # A different learner policy than the behaviour one, so that ratios leave 1.
        with torch.no_grad():
            policy.model.pi_head.weight.mul_(50.0)
        dist_inputs, values = policy.model_outputs(tensors)
        dist = policy.dist_class(dist_inputs)
        loss, _, stats = policy.policy_objective(tensors, dist, values)
        logp = dist.logp(tensors[SB.ACTIONS]).detach().numpy().astype(np.float64)
        targets = policy.vtrace_targets(tensors, dist.logp(tensors[SB.ACTIONS]), values)
    adv = targets.pg_advantages.numpy().astype(np.float64)
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(logp - batch[SB.ACTION_LOGP])
    expected = -np.minimum(ratio * adv, np.clip(ratio, 0.9, 1.1) * adv).mean()
    assert 0 < float(stats["clip_frac"]) < 1  # both branches of the min are exercised
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_appo_target_network_refreshes_every_n_updates_and_round_trips():
    config = APPOTrainer.config_class.from_dict({**TINY, "target_network_update_freq": 2})
    with APPOTrainer(config) as trainer:
        policy = trainer.get_policy()
        assert isinstance(policy, APPOPolicy)
        batch = trainer.local_evaluator.sample()

        def target_equals_model() -> bool:
            return not _changed(policy.target_model.state_dict(), policy.model.state_dict())

        assert target_equals_model()
        policy.learn_on_batch(SB(batch))
        assert not target_equals_model()  # one update: the target lags
        state = policy.get_state()
        policy.learn_on_batch(SB(batch))
        assert target_equals_model()  # the second refreshes it
        policy.set_state(state)
        assert policy.num_learner_updates == 1
        for k, v in state["target_weights"].items():
            np.testing.assert_array_equal(policy.target_model.state_dict()[k].numpy(), v)


# -- remote evaluators ---------------------------------------------------------------------
def _slow(learn, seconds: float):
    def slow_learn(tag, batch):
        time.sleep(seconds)
        return learn(tag, batch)

    return slow_learn


def test_remote_pipeline_stays_bounded_behind_a_slow_learner(ray_session):
    queue = 2
    config = _with_aso(REMOTE, learner_queue_size=queue)
    with IMPALATrainer(config) as trainer:
        learner = trainer.optimizer.learner
        learner.learn = _slow(learner.learn, 0.2)
        results = [trainer.train() for _ in range(3)]
    fragment_rows = 2 * 20
    for r in results:
        assert r["batches_waiting_for_learner"] <= queue
        assert r["learner_queue_size"] <= queue
        assert r["sample_requests_in_flight"] <= 2 * 2
        # waiting fragments: under one train batch, plus what the in-flight tasks returned
        assert r["fragments_waiting"] <= 80 // fragment_rows + 2 * 2
    # the learner is the bottleneck: sampling stopped, it did not run ahead unboundedly
    last = results[-1]
    assert last["num_steps_sampled"] - last["num_steps_trained"] <= 80 * (2 * queue + 1) + 4 * 40


def test_weights_reach_the_evaluators_every_broadcast_interval(ray_session):
    ray = ray_session
    never = _with_aso(REMOTE, broadcast_interval=10**9)
    with IMPALATrainer(never) as trainer:
        initial = trainer.get_weights()[DEFAULT_POLICY_ID]
        result = train_until_done(trainer, lambda r: r["num_learner_updates"] >= 1)
        remote = trainer.evaluators.remote_evaluators[0]
        theirs = ray.get(remote.get_weights.remote(), timeout=TIMEOUT_S)[DEFAULT_POLICY_ID]
        assert result["num_learner_updates"] >= 1 and result["num_weight_syncs"] == 0
        assert not _changed(theirs, initial)
        assert _changed(trainer.get_weights()[DEFAULT_POLICY_ID], initial)
    with IMPALATrainer(_with_aso(REMOTE, broadcast_interval=1)) as trainer:
        initial = trainer.get_weights()[DEFAULT_POLICY_ID]
        remote = trainer.evaluators.remote_evaluators[0]

        def evaluator_weights() -> dict:
            return ray.get(remote.get_weights.remote(), timeout=TIMEOUT_S)[DEFAULT_POLICY_ID]

        # syncs are counted per evaluator: both could go to the other one first
        result = train_until_done(
            trainer, lambda r: r["num_weight_syncs"] >= 2 and _changed(evaluator_weights(), initial)
        )
        assert result["num_weight_syncs"] >= 2
        assert _changed(evaluator_weights(), initial)
        assert result["policy_lag_mean"] >= 0


def test_aggregation_workers_build_the_train_batches(ray_session):
    config = {
        **_with_aso(REMOTE, num_aggregation_workers=1, num_cpus_per_aggregation_worker=0.1),
        "compress_observations": True,
    }
    with APPOTrainer(config) as trainer:
        assert len(trainer.optimizer.aggregators.actors) == 1
        # the first batches wait for the aggregator actor to start
        result = train_until_done(trainer, lambda r: r["num_learner_updates"] >= 2)
        assert result["num_learner_updates"] >= 2
        assert result["num_steps_trained"] >= 80 * result["num_learner_updates"]
        assert np.isfinite(result["learner/vf_loss"])
