"""SAC / Ape-X SAC: the numerics against closed forms (squash correction, temperature
loss and step, soft targets at terminals vs truncations, twin-min, Polyak), acting,
config, state, optimizers, and learning Pendulum-v1."""

from __future__ import annotations

import dataclasses
import math
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.registry import describe, get_trainer_class
from hierl.algorithms.sac import (
    ApexSACConfig,
    ApexSACTrainer,
    SACConfig,
    SACPolicy,
    SACTrainer,
    squashed_log_prob,
)
from hierl.config import ConfigError, field_docs
from hierl.optimizers.apex import ApexOptimizer
from hierl.optimizers.replay import ReplayOptimizer
from hierl.policy_graph import ExplorationScale, GlobalVars, TDErrors
from hierl.sample_batch import SampleBatch as SB
from tests.support.actor_critic import (
    ACT_SPACE,
    APEX_PENDULUM,
    OBS_SPACE,
    TINY_NET,
    TINY_PENDULUM,
    changed,
    critic_grads_around_the_actor_step,
    make_batch,
    normalise,
    np_critic,
    np_mlp,
    perturb_targets,
)
from tests.support.helpers import RESULT_KEYS, train_until_done
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)


def make_policy(**changes) -> SACPolicy:
    config = SACConfig.from_dict({"model": TINY_NET, "gamma": 0.9, **changes})
    torch.manual_seed(0)
    return SACPolicy(OBS_SPACE, ACT_SPACE, config)


def np_actor(weights: dict, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and clamped log std of the pre-squash Gaussian."""
    mean, log_std = np.split(np_mlp(weights, "actor", obs), 2, axis=1)
    return mean, np.clip(log_std, -20.0, 2.0)


def np_squashed_logp(x: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """log density of u = tanh(x) by the change of variables, computed directly:
    log N(x; mean, std) - log |du/dx| with du/dx = 1 - tanh(x)^2."""
    std = np.exp(log_std)
    log_normal = -0.5 * ((x - mean) / std) ** 2 - np.log(std * np.sqrt(2 * np.pi))
    return (log_normal - np.log(1.0 - np.tanh(x) ** 2)).sum(-1)


# -- the squashed Gaussian ---------------------------------------------------------------------
def test_squash_correction_equals_the_change_of_variables():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2, (50, 3))
    mean = rng.normal(0, 1, (50, 3))
    log_std = rng.uniform(-2, 1, (50, 3))
    got = squashed_log_prob(*(torch.as_tensor(a, dtype=torch.float64) for a in (x, mean, log_std)))
    np.testing.assert_allclose(got.numpy(), np_squashed_logp(x, mean, log_std), rtol=1e-10)
    # Saturated tanh: the direct form gives inf (1 - tanh^2 rounds to 0); the stable one
    # equals -2 log cosh(x) = -2 (|x| - log 2 + log(1 + exp(-2|x|))) exactly.
    big = torch.tensor([[30.0], [-30.0]], dtype=torch.float64)
    zero = torch.zeros_like(big)
    log_jacobian = -2 * (30.0 - math.log(2.0) + math.log1p(math.exp(-60.0)))
    expected = -0.5 * (30.0**2) - 0.5 * math.log(2 * math.pi) - log_jacobian
    np.testing.assert_allclose(squashed_log_prob(big, zero, zero).numpy(), expected, rtol=1e-12)


def test_squashed_density_integrates_to_one_on_the_open_interval():
    # p(u) = exp(log pi(u)) over u in (-1, 1) (x = atanh u): the correction makes it a density
    x = np.linspace(-12, 12, 200_001)
    u = np.tanh(x)
    for mean, log_std in ((0.0, 0.0), (1.5, -1.0), (-0.7, 0.8)):
        logp = squashed_log_prob(
            torch.as_tensor(x[:, None]),
            torch.full((x.size, 1), mean, dtype=torch.float64),
            torch.full((x.size, 1), log_std, dtype=torch.float64),
        ).numpy()
        density = np.exp(logp)
        integral = np.sum(0.5 * (density[1:] + density[:-1]) * np.diff(u))
        assert integral == pytest.approx(1.0, abs=1e-4)


def test_sample_is_tanh_of_the_gaussian_with_its_log_prob():
    policy = make_policy()
    obs = torch.as_tensor(np.random.default_rng(1).uniform(-1, 1, (5, 3)), dtype=torch.float32)
    torch.manual_seed(4)
    eps = torch.randn(5, 2).numpy().astype(np.float64)
    torch.manual_seed(4)
    u, logp = policy.model.actor.sample(obs)
    mean, log_std = np_actor(policy.get_weights(), obs.numpy())
    x = mean + np.exp(log_std) * eps
    np.testing.assert_allclose(u.detach().numpy(), np.tanh(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        logp.detach().numpy(), np_squashed_logp(x, mean, log_std), rtol=1e-4, atol=1e-4
    )


def sampled_moments(policy: SACPolicy) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of tanh(x), x ~ N(mean(0), std(0)): the normalised action the policy
    samples at observation 0 (numpy, 200k draws)."""
    mean, log_std = np_actor(policy.get_weights(), np.zeros((1, 3)))
    x = mean + np.exp(log_std) * np.random.default_rng(0).normal(size=(200_000, 2))
    return np.tanh(x).mean(0), np.tanh(x).std(0)


# -- acting ------------------------------------------------------------------------------------
def test_greedy_is_tanh_of_the_mean_scaled_and_samples_stay_in_the_box():
    policy = make_policy(random_timesteps=0)
    obs = np.random.default_rng(1).uniform(-1, 1, (64, 3)).astype(np.float32)
    mean, _ = np_actor(policy.get_weights(), obs)
    expected = ACT_SPACE.low + (np.tanh(mean) + 1) * (ACT_SPACE.high - ACT_SPACE.low) / 2
    actions, state, extra = policy.compute_actions(obs, explore=False)
    assert state == [] and extra == {}
    assert actions.dtype == np.float32 and actions.shape == (64, 2)
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(policy.compute_actions(obs, explore=False)[0], actions)
    sampled = policy.compute_actions(np.zeros((4000, 3), np.float32))[0]
    assert ((sampled >= ACT_SPACE.low) & (sampled <= ACT_SPACE.high)).all()
    u = normalise(sampled)
    np.testing.assert_allclose(u.mean(0), sampled_moments(policy)[0], atol=0.03)
    np.testing.assert_allclose(u.std(0), sampled_moments(policy)[1], rtol=0.05)


def test_random_warmup_then_the_policy_samples():
    policy = make_policy(random_timesteps=100)
    obs = np.zeros((4000, 3), np.float32)
    warm = policy.compute_actions(obs)[0]  # global timestep 0 < 100: uniform
    assert warm.min(0) == pytest.approx(ACT_SPACE.low, abs=0.01)
    assert warm.max(0) == pytest.approx(ACT_SPACE.high, abs=0.01)
    assert np.abs(normalise(warm)).mean() == pytest.approx(0.5, abs=0.03)  # E|U(-1, 1)|
    policy.on_global_var_update(GlobalVars(timestep=100))
    u = normalise(policy.compute_actions(obs)[0])
    np.testing.assert_allclose(u.std(0), sampled_moments(policy)[1], rtol=0.05)


def test_no_exploration_scale_and_td_errors_for_apex():
    policy = make_policy()
    assert not isinstance(policy, ExplorationScale)  # apex pins no ladder on SAC
    assert isinstance(policy, TDErrors)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (gym.spaces.MultiBinary(3), "SAC need a continuous Box action space, got MultiBinary"),
        (gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "finite action bounds"),
        (gym.spaces.Box(0, 5, (2,), np.int64), "float Box"),
    ],
)
def test_other_action_spaces_are_rejected(space, message):
    with pytest.raises(ValueError, match=message):
        SACPolicy(OBS_SPACE, space, SACConfig())


# -- targets, losses, updates ------------------------------------------------------------------
def soft_target_by_hand(policy: SACPolicy, batch: SB, seed: int, alpha: float) -> np.ndarray:
    w = policy.get_weights()
    new_obs = batch[SB.NEW_OBS]
    torch.manual_seed(seed)
    eps = torch.randn(batch.count, 2).numpy().astype(np.float64)
    mean, log_std = np_actor(w, new_obs)
    x = mean + np.exp(log_std) * eps
    u_next = np.tanh(x)
    q1 = np_critic(w, "target_critic", new_obs, u_next)
    q2 = np_critic(w, "target_critic2", new_obs, u_next)
    assert (q1 < q2).any() and (q2 < q1).any()  # the min picks from both
    soft_value = np.minimum(q1, q2) - alpha * np_squashed_logp(x, mean, log_std)
    return batch[SB.REWARDS] + 0.9 * (1.0 - batch[SB.TERMINATEDS]) * soft_value


def targets(policy: SACPolicy, batch: SB, seed: int) -> np.ndarray:
    torch.manual_seed(seed)
    return policy.td_targets(policy._tensors(batch), policy.model.log_alpha.exp()).numpy()


def test_soft_target_terminal_vs_truncated_twin_min_and_entropy_bonus():
    policy = make_policy(initial_alpha=0.5)
    perturb_targets(policy)
    batch = make_batch(n=32)
    expected = soft_target_by_hand(policy, batch, seed=5, alpha=0.5)
    got = targets(policy, batch, seed=5)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert got[1] == pytest.approx(batch[SB.REWARDS][1])  # terminated: reward only
    assert got[2] != pytest.approx(batch[SB.REWARDS][2])  # truncated: bootstrapped
    # alpha multiplies -log pi: another temperature, another target
    with torch.no_grad():
        policy.model.log_alpha.fill_(math.log(2.0))
    np.testing.assert_allclose(
        targets(policy, batch, seed=5),
        soft_target_by_hand(policy, batch, seed=5, alpha=2.0),
        rtol=1e-4,
        atol=1e-4,
    )


def test_n_step_rows_use_their_discount():
    policy = make_policy(n_step=2, rollout_fragment_length=4)
    raw = make_batch(n=4)
    raw[SB.EPS_ID] = np.array([7, 7, 7, 7])
    raw[SB.TERMINATEDS] = np.zeros(4, bool)
    raw[SB.TRUNCATEDS] = np.zeros(4, bool)
    batch = policy.postprocess_trajectories(raw)
    one_step = targets(policy, SB({**raw, SB.NEW_OBS: batch[SB.NEW_OBS]}), seed=1)
    r = raw[SB.REWARDS]
    bootstrap = (one_step - r) / 0.9  # the soft value of each row's window end
    expected = [r[0] + 0.9 * r[1] + 0.81 * bootstrap[0], r[1] + 0.9 * r[2] + 0.81 * bootstrap[1]]
    np.testing.assert_allclose(targets(policy, batch, seed=1)[:2], expected, rtol=1e-4)


def test_critic_loss_td_error_and_priority_weights():
    policy = make_policy()
    batch = make_batch()
    w = policy.get_weights()
    u = normalise(batch[SB.ACTIONS])
    y = targets(policy, batch, seed=3)
    q1, q2 = np_critic(w, "critic", batch[SB.OBS], u), np_critic(w, "critic2", batch[SB.OBS], u)
    prio = np.linspace(0.0, 2.0, 6).astype(np.float32)
    torch.manual_seed(3)  # the target's sample: the first random draw of the update
    result = policy.learn_on_replay_batch(SB({**batch, SB.PRIO_WEIGHTS: prio}))
    expected = 0.5 * np.mean(prio * ((q1 - y) ** 2 + (q2 - y) ** 2))
    assert result.stats["critic_loss"] == pytest.approx(expected, rel=1e-4)
    np.testing.assert_allclose(result.td_error, q1 - y, rtol=1e-4, atol=1e-5)
    assert changed(w, policy.get_weights(), "critic.") and changed(
        w, policy.get_weights(), "actor."
    )
    # zero importance weights: zero critic gradient, Adam leaves both critics as they were
    fresh = make_policy()
    zero = SB({**batch, SB.PRIO_WEIGHTS: np.zeros(6, np.float32)})
    before = fresh.get_weights()
    assert fresh.learn_on_replay_batch(zero).stats["critic_loss"] == 0.0
    after = fresh.get_weights()
    assert not changed(before, after, "critic.") and not changed(before, after, "critic2.")
    np.testing.assert_allclose(
        fresh.compute_td_errors(batch).shape, (6,)
    )  # priorities for fresh rows


def test_actor_loss_is_alpha_logp_minus_twin_min_on_the_updated_critics():
    policy = make_policy(initial_alpha=0.3, learn_alpha=False, lr=1e-3)
    batch = make_batch(n=16)
    torch.manual_seed(9)
    policy.model.actor.sample(torch.zeros(16, 3))  # the target's draw (same shape)
    eps = torch.randn(16, 2).numpy().astype(np.float64)  # the actor's draw
    torch.manual_seed(9)
    before_actor = policy.get_weights()
    obs = batch[SB.OBS]
    # run the update; the actor loss uses the critics after their step
    stats = policy.learn_on_batch(batch)
    # recompute with the post-critic-step critics: they are the current ones (the actor
    # step does not touch them)
    w = policy.get_weights()
    mean, log_std = np_actor(before_actor, obs)
    x = mean + np.exp(log_std) * eps
    u = np.tanh(x)
    q = np.minimum(np_critic(w, "critic", obs, u), np_critic(w, "critic2", obs, u))
    expected = np.mean(0.3 * np_squashed_logp(x, mean, log_std) - q)
    assert stats["actor_loss"] == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert stats["alpha"] == pytest.approx(0.3) and policy.alpha == pytest.approx(0.3)
    assert "alpha_loss" not in stats  # fixed temperature


@pytest.mark.parametrize("target_entropy", [-5.0, 5.0])
def test_temperature_loss_and_its_adam_step(target_entropy):
    # loss = -log_alpha (log pi + H_target); d loss / d log_alpha = H - H_target with
    # H = -mean log pi; Adam's first step moves log_alpha by -lr * sign(gradient).
    policy = make_policy(initial_alpha=0.5, target_entropy=target_entropy, lr=0.01)
    stats = policy.learn_on_batch(make_batch(n=16))
    entropy = stats["entropy"]
    assert stats["alpha"] == pytest.approx(0.5)  # the losses use alpha before its step
    assert stats["alpha_loss"] == pytest.approx(
        -math.log(0.5) * (-entropy + target_entropy), rel=1e-4
    )
    gradient = entropy - target_entropy
    assert policy.alpha == pytest.approx(0.5 * math.exp(-0.01 * np.sign(gradient)), rel=1e-5)
    # entropy above the target lowers alpha; below raises it
    assert (policy.alpha < 0.5) == (target_entropy == -5.0)


def test_the_actor_step_computes_no_gradients_of_the_critics():
    policy = make_policy(lr=1e-3)
    applied, after = critic_grads_around_the_actor_step(policy, make_batch(n=16))
    assert applied and all(torch.equal(a, b) for a, b in zip(applied, after, strict=True))
    critics = [p for critic in policy.model.critics() for p in critic.parameters()]
    assert all(p.requires_grad for p in critics)  # thawed after the step


def test_default_target_entropy_is_minus_the_action_dimension():
    assert make_policy().target_entropy == -2.0
    assert make_policy(target_entropy=-0.5).target_entropy == -0.5


def test_polyak_update_is_exact_and_touches_only_the_target_critics():
    policy = make_policy()
    perturb_targets(policy)
    before = policy.get_weights()
    policy.update_target(0.25)
    after = policy.get_weights()
    assert any(k.startswith("target_critic2.") for k in before)
    assert not any(k.startswith("target_actor") for k in before)  # SAC has no target actor
    for k in before:
        if k.startswith("target_"):
            online = before[k[len("target_") :]]
            np.testing.assert_allclose(
                after[k], 0.25 * online + 0.75 * before[k], rtol=1e-6, atol=1e-7
            )
        else:
            np.testing.assert_array_equal(after[k], before[k])  # online and log_alpha
    policy.update_target(1.0)
    for k, v in policy.get_weights().items():
        if k.startswith("target_"):
            np.testing.assert_array_equal(v, after[k[len("target_") :]])


def test_every_update_polyaks_the_targets_towards_the_new_critics():
    policy = make_policy(tau=0.1)
    perturb_targets(policy)
    before = policy.get_weights()
    policy.learn_on_batch(make_batch())
    after = policy.get_weights()
    for k in before:
        if k.startswith("target_"):
            expected = 0.1 * after[k[len("target_") :]] + 0.9 * before[k]
            np.testing.assert_allclose(after[k], expected, rtol=1e-5, atol=1e-6)
    assert policy.num_updates == 1


# -- config, state, trainers -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tau": 0.0}, r"tau.*must be in \(0, 1\]"),
        ({"initial_alpha": 0.0}, "initial_alpha.*must be finite and > 0"),
        ({"target_entropy": math.inf}, "target_entropy.*must be finite"),
        ({"random_timesteps": -1}, "random_timesteps.*must be >= 0"),
        ({"lr_schedule": [[0, 1e-3], [100, 1e-4]]}, "lr_schedule.*not supported by SAC"),
        ({"learn_alpa": False}, "did you mean 'learn_alpha'"),
        ({"n_step": 3, "rollout_fragment_length": 2}, r"rollout_fragment_length.*n_step=3"),
    ],
)
def test_bad_config_values_are_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        SACConfig.from_dict(changes)


@pytest.mark.parametrize("config_class", [SACConfig, ApexSACConfig])
def test_every_config_field_is_documented(config_class):
    docs = field_docs(config_class)
    assert [f.name for f in dataclasses.fields(config_class) if not docs.get(f.name)] == []


def test_registry_and_sb3_defaults():
    assert get_trainer_class("SAC") is SACTrainer and get_trainer_class("sac") is SACTrainer
    assert get_trainer_class("APEX_SAC") is ApexSACTrainer
    assert "soft actor-critic" in describe("SAC")
    cfg = SACConfig()
    assert (cfg.lr, cfg.tau, cfg.gamma, cfg.initial_alpha) == (3e-4, 0.005, 0.99, 1.0)
    assert cfg.learn_alpha and cfg.target_entropy is None
    assert tuple(cfg.model.hiddens) == (256, 256) and cfg.model.activation == "relu"
    replay = cfg.optimizer_defaults["replay"]
    assert replay["train_batch_size"] == 256 and replay["buffer_size"] == 1_000_000
    assert replay["replay_ratio"] == 256.0 and replay["learning_starts"] == 100
    assert ApexSACConfig.default_optimizer == "apex"
    with pytest.raises(ConfigError, match="not supported by SAC"):
        SACTrainer({**TINY_PENDULUM, "optimizer": "local"})


def test_policy_state_round_trip_resumes_identically():
    policy = make_policy()
    batch = make_batch()
    for _ in range(3):
        policy.learn_on_batch(batch)
    policy.on_global_var_update(GlobalVars(timestep=1234))
    state = policy.get_state()
    assert {"actor_optimizer", "critic_optimizer", "alpha_optimizer"} <= set(state)
    other = make_policy()
    other.set_state(state)
    assert (other.num_updates, other.global_timestep) == (3, 1234)
    assert other.alpha == policy.alpha != 1.0
    for p in (policy, other):
        torch.manual_seed(3)
        p.learn_on_batch(batch)
    a, b = policy.get_weights(), other.get_weights()
    assert set(a) == set(b) and "log_alpha" in a
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_trainer_checkpoint_round_trip(tmp_path):
    with SACTrainer(TINY_PENDULUM) as trainer:
        for _ in range(8):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        state = trainer.get_policy().get_state()
        counters = trainer.optimizer.save()
    assert state["num_updates"] > 0
    with SACTrainer(TINY_PENDULUM) as restored:
        restored.restore(path)
        got = restored.get_policy().get_state()
        assert restored.optimizer.save() == counters
    assert got["num_updates"] == state["num_updates"]
    for k, v in state["weights"].items():
        np.testing.assert_array_equal(got["weights"][k], v)
    for opt in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
        saved, loaded = state[opt]["state"], got[opt]["state"]
        assert set(saved) == set(loaded) and saved
        for i in saved:
            for n in ("exp_avg", "exp_avg_sq", "step"):
                np.testing.assert_array_equal(loaded[i][n], saved[i][n])


@pytest.mark.parametrize("prioritized", [False, True])
def test_sac_runs_on_replay(prioritized):
    with SACTrainer({**TINY_PENDULUM, "prioritized_replay": prioritized}) as trainer:
        assert isinstance(trainer.optimizer, ReplayOptimizer)
        before = trainer.get_weights()["default_policy"]
        results = [trainer.train() for _ in range(10)]
        after = trainer.get_weights()["default_policy"]
        stats = trainer.optimizer.stats()
    last = results[-1]
    assert set(last) >= RESULT_KEYS and last["timesteps_total"] == 100
    # learning from 50 stored rows: one 16-row update per sampled step after that
    assert stats["num_updates"] == 60 and last["num_steps_trained"] == 60 * 16
    for prefix in ("actor.", "critic.", "critic2.", "target_critic.", "log_alpha"):
        assert changed(before, after, prefix), prefix
    for key in ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy"):
        assert math.isfinite(last[f"learner/{key}"]), key
    assert ("prioritized_replay_beta" in stats) == prioritized


def test_same_seed_same_weights():
    def run():
        with SACTrainer({**TINY_PENDULUM, "seed": 3}) as trainer:
            for _ in range(7):
                trainer.train()
            return trainer.get_weights()["default_policy"]

    a, b = run(), run()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_in_process_apex_has_no_ladder_and_learns():
    config = {
        **TINY_PENDULUM,
        "optimizer": "apex",
        "prioritized_replay": True,
        "optimizer_config": {"num_replay_shards": 2, "min_step_time_s": 0.2},
    }
    with SACTrainer(config) as trainer:
        assert isinstance(trainer.optimizer, ApexOptimizer)
        assert trainer.optimizer.epsilons == []  # SAC explores with its own noise
        before = trainer.get_weights()["default_policy"]
        result = train_until_done(trainer, lambda r: r["num_learner_updates"] > 0)
        after = trainer.get_weights()["default_policy"]
    assert result["num_learner_updates"] > 0
    assert result["num_steps_trained"] == 16 * result["num_learner_updates"]
    assert changed(before, after, "actor.") and changed(before, after, "critic.")


def test_apex_sac_preset():
    with ApexSACTrainer({**TINY_PENDULUM, "num_evaluators": 0, "learning_starts": 50}) as trainer:
        assert isinstance(trainer.optimizer, ApexOptimizer)
        assert trainer.optimizer.config.prioritized_replay
        result = trainer.train()
    assert result["timesteps_total"] > 0


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_apex_sac_with_two_evaluators_and_two_shards(ray_session):
    trainer = ApexSACTrainer(APEX_PENDULUM)
    try:
        opt = trainer.optimizer
        assert isinstance(opt, ApexOptimizer) and len(opt.replay.shards) == 2
        assert opt.epsilons == []  # no ladder: each evaluator samples from the policy
        before = trainer.get_weights()["default_policy"]
        remotes = trainer.evaluators.remote_evaluators

        def alphas() -> list[float]:
            return trainer.evaluators.get(
                [e.apply.remote(lambda ev: ev.policy.alpha) for e in remotes]
            )

        def done(r) -> bool:  # what the asserts below check, once it holds
            learned = min(r["num_learner_updates"], r["num_weight_syncs"]) > 0
            return learned and r["timesteps_total"] > 200 and 1.0 not in alphas()

        last = train_until_done(trainer, done)
        after = trainer.get_weights()["default_policy"]
        evaluator_alphas = alphas()
    finally:
        trainer.stop()
    assert last["num_learner_updates"] > 0 and last["num_weight_syncs"] > 0
    assert last["num_steps_trained"] == 32 * last["num_learner_updates"]
    assert last["num_samples_dropped"] == 0 and last["timesteps_total"] > 200
    assert math.isfinite(last["learner/critic_loss"]) and math.isfinite(last["learner/alpha"])
    assert changed(before, after, "actor.") and changed(before, after, "log_alpha")
    assert 1.0 not in evaluator_alphas  # the evaluators got the learner's temperature


# -- learning ----------------------------------------------------------------------------------
@pytest.mark.learning
@pytest.mark.timeout(900)
def test_sac_learns_pendulum():
    # SB3 zoo's Pendulum lr (1e-3) with small networks and batches of 64 (one update per
    # env step); tests/LEARNING.md has seeds 0-4.  Seed 0 reached -400 at 5.2k steps in
    # 534 s at nice 19 on the 2-core machine under a load average of 55-75 (the guard
    # allows for such load; far less on a quiet machine).
    config = {
        "env": "Pendulum-v1",
        "seed": SEED,
        "model": {"hiddens": [64, 64], "activation": "relu"},
        "lr": 1e-3,
        "train_batch_size": 64,
        "replay_ratio": 64.0,
        "random_timesteps": 1000,
        "learning_starts": 1000,
        "metrics_smoothing_episodes": 10,
        "timesteps_per_iteration": 200,
    }
    with SACTrainer(config) as trainer:
        run = train_until(
            trainer, -400, 20_000, ready=lambda result: result["episodes_total"] >= 10
        )
        greedy = trainer.compute_single_action(np.array([1.0, 0.0, 0.0], np.float32))
    assert run.reached, run
    assert greedy.shape == (1,) and -2.0 <= greedy[0] <= 2.0


def test_hierl_list_and_config_show_sac(capsys):
    from hierl.cli import main

    assert main(["list"]) == 0
    rows = capsys.readouterr().out
    assert re.search(r"^SAC +replay +soft actor-critic", rows, re.M)
    assert re.search(r"^APEX_SAC +apex +Ape-X SAC", rows, re.M)
    assert main(["config", "SAC"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^  lr = 0.0003$", text, re.M) and "target_entropy" in text
    assert "initial_alpha" in text and "exploration_noise" not in text


def test_a_served_checkpoint_answers_the_greedy_action(tmp_path):
    from hierl.serve.policy import ServedPolicy

    with SACTrainer(TINY_PENDULUM) as trainer:
        for _ in range(6):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        obs = np.random.default_rng(2).uniform(-1, 1, (50, 3)).astype(np.float32)
        expected = np.stack([trainer.compute_single_action(o, explore=False) for o in obs])
    served = ServedPolicy.from_checkpoint(path)
    try:
        assert served.spec()["algorithm"] == "SAC"
        (answer,) = served.act([served.parse({"observations": obs.tolist()})])
        np.testing.assert_allclose(answer["actions"], expected, rtol=0, atol=1e-6)
        assert np.ptp(expected) > 1e-3  # not all one action: the check can fail
        (sampled,) = served.act([served.parse({"observations": obs.tolist(), "explore": True})])
        assert not np.allclose(sampled["actions"], expected)
    finally:
        served.trainer.stop()
