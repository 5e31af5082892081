"""Discrete SAC (Christodoulou 2019): the exact expectations over actions against numpy
(soft target at terminals vs truncations, critic, actor and temperature losses), acting,
the dispatch from ``SACPolicy``, checkpoints, export, Ape-X, and learning CartPole-v1."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.ddpg import DDPGPolicy, TD3Config
from hierl.algorithms.sac import (
    DISCRETE_TARGET_ENTROPY_SCALE,
    DiscreteSACPolicy,
    SACConfig,
    SACPolicy,
    SACTrainer,
)
from hierl.export import export_policy
from hierl.policy_graph import GlobalVars, TDErrors
from hierl.sample_batch import SampleBatch as SB
from hierl.serve.policy import ServedPolicy
from tests.support.actor_critic import (
    OBS_SPACE,
    TINY_NET,
    TINY_PENDULUM,
    changed,
    np_mlp,
    perturb_targets,
)
from tests.support.helpers import train_until_done
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

N = 3
ACT_SPACE = gym.spaces.Discrete(N)
TINY_CARTPOLE = {**TINY_PENDULUM, "env": "CartPole-v1"}


def make_policy(**changes) -> DiscreteSACPolicy:
    config = SACConfig.from_dict({"model": TINY_NET, "gamma": 0.9, **changes})
    torch.manual_seed(0)
    return SACPolicy(OBS_SPACE, ACT_SPACE, config)


def make_batch(n: int = 8, seed: int = 0) -> SB:
    """``n`` random rows; row 1 terminated, row 2 truncated."""
    rng = np.random.default_rng(seed)
    terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
    terminated[1], truncated[2] = True, True
    return SB(
        {
            SB.OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SB.NEW_OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SB.ACTIONS: np.arange(n) % N,  # every action taken
            SB.REWARDS: rng.normal(size=n).astype(np.float32),
            SB.TERMINATEDS: terminated,
            SB.TRUNCATEDS: truncated,
        }
    )


def np_policy(weights: dict, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pi(.|s), log pi(.|s))`` in float64."""
    logits = np_mlp(weights, "actor", obs)
    log_probs = logits - logits.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    return np.exp(log_probs), log_probs


def np_twin_min(weights: dict, prefix: str, obs: np.ndarray) -> np.ndarray:
    """``min_i Q_i(s, .)`` of ``prefix`` and ``prefix + "2"``: ``(B, n)``."""
    q1, q2 = np_mlp(weights, prefix, obs), np_mlp(weights, prefix + "2", obs)
    assert (q1 < q2).any() and (q2 < q1).any()  # the min picks from both
    return np.minimum(q1, q2)


def soft_target_by_hand(policy: DiscreteSACPolicy, batch: SB, alpha: float) -> np.ndarray:
    w = policy.get_weights()
    probs, log_probs = np_policy(w, batch[SB.NEW_OBS])
    q = np_twin_min(w, "target_critic", batch[SB.NEW_OBS])
    soft_value = (probs * (q - alpha * log_probs)).sum(1)
    return batch[SB.REWARDS] + 0.9 * (1.0 - batch[SB.TERMINATEDS]) * soft_value


def targets(policy: DiscreteSACPolicy, batch: SB) -> np.ndarray:
    return policy.td_targets(policy._tensors(batch), policy.model.log_alpha.exp()).numpy()


def sharpen_actor(policy: DiscreteSACPolicy, scale: float = 3.0) -> None:
    """Make the actor far from uniform, so that the expectations over actions matter."""
    with torch.no_grad():
        for p in policy.model.actor.parameters():
            p.add_(scale * torch.randn_like(p) / math.sqrt(p.numel()))


# -- the dispatch and the space ------------------------------------------------------------
def test_sac_policy_on_a_discrete_space_is_discrete_sac():
    policy = make_policy()
    assert type(policy) is DiscreteSACPolicy and isinstance(policy, TDErrors)
    assert policy.act_dim == N and policy.act_shape == ()
    assert type(SACPolicy(OBS_SPACE, gym.spaces.Box(-1, 1, (2,)), SACConfig())) is SACPolicy
    weights = policy.get_weights()
    assert weights["critic.net.net.4.weight"].shape == (N, 8)  # Q(s, .): one output per action
    assert weights["actor.net.net.4.weight"].shape == (N, 8)  # logits


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (gym.spaces.MultiDiscrete([2, 3]), "SAC need a continuous Box action space"),
        (gym.spaces.Discrete(1), "a Discrete action space of at least 2 actions"),
    ],
)
def test_other_spaces_are_refused_by_name(space, message):
    with pytest.raises(ValueError, match=message):
        SACPolicy(OBS_SPACE, space, SACConfig())


@pytest.mark.parametrize(
    ("policy_class", "config", "action_space"),
    [
        (SACPolicy, SACConfig(), ACT_SPACE),
        (SACPolicy, SACConfig(), gym.spaces.Box(-1, 1, (2,))),
        (DDPGPolicy, TD3Config(), gym.spaces.Box(-1, 1, (2,))),
    ],
)
def test_image_observations_are_refused_by_name(policy_class, config, action_space):
    # the replay actor-critics are MLPs: raw uint8 pixels would make a silent 28k-input MLP
    pixels = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    with pytest.raises(ValueError, match=r"MLPs on flat observations, got image observations"):
        policy_class(pixels, action_space, config)


def test_subclasses_pick_their_kind_of_space():
    class BoxSAC(SACPolicy):
        pass

    class MyDiscreteSAC(DiscreteSACPolicy):
        pass

    with pytest.raises(ValueError, match=r"BoxSAC is SAC for Box actions.*DiscreteSACPolicy"):
        BoxSAC(OBS_SPACE, ACT_SPACE, SACConfig())
    assert type(MyDiscreteSAC(OBS_SPACE, ACT_SPACE, SACConfig())) is MyDiscreteSAC
    assert type(BoxSAC(OBS_SPACE, gym.spaces.Box(-1, 1, (2,)), SACConfig())) is BoxSAC


def test_default_target_entropy_is_a_fraction_of_the_uniform_entropy():
    assert DISCRETE_TARGET_ENTROPY_SCALE == 0.89  # CleanRL's sac_atari
    assert make_policy().target_entropy == pytest.approx(0.89 * math.log(N))
    assert make_policy(target_entropy=0.2).target_entropy == 0.2


# -- acting --------------------------------------------------------------------------------
def test_warmup_is_uniform_then_samples_follow_pi_and_greedy_is_the_argmax():
    policy = make_policy(random_timesteps=10)
    sharpen_actor(policy, 1.0)
    obs = np.tile(np.array([[0.3, -0.2, 0.5]], np.float32), (20_000, 1))
    probs = np_policy(policy.get_weights(), obs[:1])[0][0]
    assert probs.max() < 0.9 and probs.min() > 0.02  # a distribution worth testing
    torch.manual_seed(1)
    warmup = policy.compute_actions(obs)[0]
    assert warmup.dtype == np.int64
    np.testing.assert_allclose(np.bincount(warmup, minlength=N) / len(obs), 1 / N, atol=0.015)
    policy.on_global_var_update(GlobalVars(timestep=10))
    sampled = policy.compute_actions(obs)[0]
    # 20,000 draws: the frequencies are within 0.015 of pi (over 4 standard errors)
    np.testing.assert_allclose(np.bincount(sampled, minlength=N) / len(obs), probs, atol=0.015)
    rows = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)
    greedy = policy.compute_actions(rows, explore=False)[0]
    np.testing.assert_array_equal(greedy, np_mlp(policy.get_weights(), "actor", rows).argmax(1))


# -- targets and losses --------------------------------------------------------------------
def test_soft_target_is_the_exact_expectation_with_terminal_vs_truncated():
    policy = make_policy(initial_alpha=0.5)
    perturb_targets(policy)
    sharpen_actor(policy)
    batch = make_batch(n=32)
    got = targets(policy, batch)
    np.testing.assert_allclose(got, soft_target_by_hand(policy, batch, 0.5), rtol=1e-4, atol=1e-4)
    assert got[1] == pytest.approx(batch[SB.REWARDS][1])  # terminated: reward only
    assert got[2] != pytest.approx(batch[SB.REWARDS][2])  # truncated: bootstrapped
    with torch.no_grad():
        policy.model.log_alpha.fill_(math.log(2.0))
    np.testing.assert_allclose(
        targets(policy, batch), soft_target_by_hand(policy, batch, 2.0), rtol=1e-4, atol=1e-4
    )


def test_n_step_rows_use_their_discount():
    policy = make_policy(n_step=2, rollout_fragment_length=4)
    raw = make_batch(n=4)
    raw[SB.EPS_ID] = np.array([7, 7, 7, 7])
    raw[SB.TERMINATEDS] = np.zeros(4, bool)
    raw[SB.TRUNCATEDS] = np.zeros(4, bool)
    batch = policy.postprocess_trajectories(raw)
    one_step = targets(policy, SB({**raw, SB.NEW_OBS: batch[SB.NEW_OBS]}))
    r = raw[SB.REWARDS]
    bootstrap = (one_step - r) / 0.9  # the soft value of each row's window end
    expected = [r[0] + 0.9 * r[1] + 0.81 * bootstrap[0], r[1] + 0.9 * r[2] + 0.81 * bootstrap[1]]
    np.testing.assert_allclose(targets(policy, batch)[:2], expected, rtol=1e-4)


def test_critic_loss_on_the_taken_actions_with_priority_weights():
    policy = make_policy()
    batch = make_batch()
    w = policy.get_weights()
    y = targets(policy, batch)  # no random draw: the same target inside the update
    rows, taken = np.arange(batch.count), batch[SB.ACTIONS]
    q1 = np_mlp(w, "critic", batch[SB.OBS])[rows, taken]
    q2 = np_mlp(w, "critic2", batch[SB.OBS])[rows, taken]
    prio = np.linspace(0.0, 2.0, batch.count).astype(np.float32)
    result = policy.learn_on_replay_batch(SB({**batch, SB.PRIO_WEIGHTS: prio}))
    expected = 0.5 * np.mean(prio * ((q1 - y) ** 2 + (q2 - y) ** 2))
    assert result.stats["critic_loss"] == pytest.approx(expected, rel=1e-4)
    np.testing.assert_allclose(result.td_error, q1 - y, rtol=1e-4, atol=1e-5)
    after = policy.get_weights()
    assert changed(w, after, "critic.") and changed(w, after, "actor.")
    fresh = make_policy()  # priorities of fresh rows: |Q_1(s, a) - y|
    np.testing.assert_allclose(fresh.compute_td_errors(batch), np.abs(q1 - y), rtol=1e-4)


def test_actor_loss_is_the_expectation_under_pi_on_the_updated_critics():
    policy = make_policy(initial_alpha=0.3, learn_alpha=False, lr=1e-3)
    sharpen_actor(policy)
    batch = make_batch(n=16)
    before = policy.get_weights()
    stats = policy.learn_on_batch(batch)
    w = policy.get_weights()  # the critics after their step (the actor's step leaves them)
    obs = batch[SB.OBS]
    probs, log_probs = np_policy(before, obs)
    q = np_twin_min(w, "critic", obs)
    expected = np.mean((probs * (0.3 * log_probs - q)).sum(1))
    assert stats["actor_loss"] == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert stats["entropy"] == pytest.approx(-(probs * log_probs).sum(1).mean(), rel=1e-4)
    assert "alpha_loss" not in stats and policy.alpha == pytest.approx(0.3)


def test_actor_gradient_is_the_closed_form_and_holds_the_critics_fixed():
    # d/d logits of sum_a pi (alpha log pi - Q) = pi * (g - sum_a pi g), g = alpha (log pi + 1) - Q
    policy = make_policy(initial_alpha=0.7)
    sharpen_actor(policy)
    obs = torch.as_tensor(make_batch(n=5)[SB.OBS])
    seen: list[torch.Tensor] = []

    def keep_logits(module, inputs, logits):
        logits.retain_grad()
        seen.append(logits)

    hook = policy.model.actor.register_forward_hook(keep_logits)
    try:
        loss, _ = policy.actor_objective(obs, torch.tensor(0.7))
        loss.backward()
    finally:
        hook.remove()
    (logits,) = seen
    with torch.no_grad():
        q = torch.minimum(policy.model.critic(obs), policy.model.critic2(obs))
        p, log_p = logits.softmax(-1), logits.log_softmax(-1)
        g = 0.7 * (log_p + 1) - q
        expected = p * (g - (p * g).sum(-1, keepdim=True)) / 5
    torch.testing.assert_close(logits.grad, expected, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for c in policy.model.critics() for p in c.parameters())


@pytest.mark.parametrize("target_entropy", [0.05, 1.0])
def test_temperature_loss_uses_the_exact_entropy(target_entropy):
    policy = make_policy(initial_alpha=0.5, target_entropy=target_entropy, lr=0.01)
    sharpen_actor(policy)
    batch = make_batch(n=16)
    probs, log_probs = np_policy(policy.get_weights(), batch[SB.OBS])
    entropy = -(probs * log_probs).sum(1).mean()
    assert 0.05 < entropy < 1.0  # between the two targets
    stats = policy.learn_on_batch(batch)
    assert stats["entropy"] == pytest.approx(entropy, rel=1e-4)
    assert stats["alpha_loss"] == pytest.approx(
        -math.log(0.5) * (-entropy + target_entropy), rel=1e-4
    )
    # entropy above the target lowers alpha (Adam's first step: lr times the sign)
    step = -0.01 * np.sign(entropy - target_entropy)
    assert policy.alpha == pytest.approx(0.5 * math.exp(step), rel=1e-5)


# -- trainers ------------------------------------------------------------------------------
def test_trainer_trains_checkpoints_exports_and_serves_on_cartpole(tmp_path):
    with SACTrainer({**TINY_CARTPOLE, "lr": 0.01}) as trainer:  # an actor far from uniform
        policy = trainer.get_policy()
        assert type(policy) is DiscreteSACPolicy
        before = policy.get_weights()
        for _ in range(8):
            result = trainer.train()
        # one 16-row update per sampled step once 50 rows are stored (the 5th fragment's
        # steps included), as on Pendulum (test_sac.py::test_sac_runs_on_replay)
        assert result["timesteps_total"] == 80 and result["num_steps_trained"] == 40 * 16
        assert math.isfinite(result["learner/alpha_loss"]) and result["learner/alpha"] != 1.0
        assert changed(before, policy.get_weights(), "actor.")
        path = trainer.save(tmp_path / "ckpt")
        rows = np.random.default_rng(3).uniform(-3, 3, (40, 4)).astype(np.float32)
        expected = policy.compute_actions(rows, explore=False)[0]
        exported = export_policy(policy, tmp_path / "export")
    restored = SACTrainer.from_checkpoint(path)
    try:
        again = restored.get_policy()
        for key, value in policy.get_state().items():
            if key.endswith("_optimizer") or key == "num_updates":
                assert str(again.get_state()[key]) == str(value)
        np.testing.assert_array_equal(again.compute_actions(rows, explore=False)[0], expected)
    finally:
        restored.stop()
    module = torch.jit.load(str(exported.model_path))
    actions, logits, values = module(torch.as_tensor(rows))
    np.testing.assert_array_equal(actions.numpy(), expected)
    weights = policy.get_weights()
    np.testing.assert_allclose(logits.numpy(), np_mlp(weights, "actor", rows), rtol=1e-4)
    q = np.minimum(np_mlp(weights, "critic", rows), np_mlp(weights, "critic2", rows))
    np.testing.assert_allclose(values.numpy(), q[np.arange(40), expected], rtol=1e-4)
    assert 0 < expected.mean() < 1  # both actions: the comparisons can fail
    served = ServedPolicy.from_checkpoint(path)
    try:
        (answer,) = served.act([served.parse({"observations": rows.tolist()})])
        np.testing.assert_array_equal(answer["actions"], expected)
    finally:
        served.trainer.stop()


def test_in_process_apex_trains_discrete_sac():
    config = {
        **TINY_CARTPOLE,
        "optimizer": "apex",
        "prioritized_replay": True,
        "optimizer_config": {"num_replay_shards": 2, "min_step_time_s": 0.2},
    }
    with SACTrainer(config) as trainer:
        before = trainer.get_weights()["default_policy"]
        result = train_until_done(trainer, lambda r: r["num_learner_updates"] > 0)
        after = trainer.get_weights()["default_policy"]
    assert result["num_learner_updates"] > 0
    assert result["num_steps_trained"] == 16 * result["num_learner_updates"]
    assert changed(before, after, "actor.") and math.isfinite(result["learner/critic_loss"])


# -- learning ------------------------------------------------------------------------------
@pytest.mark.learning
@pytest.mark.timeout(600)
def test_discrete_sac_learns_cartpole():
    # A target entropy of 0.3 nats (0.43 log 2): the default (0.89 log 2 = 0.62 nats, a
    # policy near 70/30) keeps the sampled return near 150.  tests/LEARNING.md: seeds 0-4.
    config = {
        "env": "CartPole-v1",
        "seed": SEED,
        "model": {"hiddens": [64, 64], "activation": "relu"},
        "lr": 1e-3,
        "train_batch_size": 64,
        "replay_ratio": 64.0,
        "random_timesteps": 1000,
        "learning_starts": 1000,
        "metrics_smoothing_episodes": 10,
        "timesteps_per_iteration": 500,
        "target_entropy": 0.3,
    }
    with SACTrainer(config) as trainer:
        run = train_until(trainer, 200, 12_000, ready=lambda r: r["episodes_total"] >= 10)
    assert run.reached, run
