"""hierl's SAC and TD3 updates are Stable-Baselines3's: from the same weights, on the same
replayed batches and the same noise, SB3's ``train`` and hierl's ``learn_on_replay_batch``
report the same losses (and SAC's temperature) and leave the same networks, target
networks and ``log_alpha`` after several updates.  Needs SB3 (the ``bench`` extra, not in
README's test install): ``benchmarks/learning.py --peer sb3`` compares the two
libraries' learning, and this pins down that the update is not where they differ."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.ddpg import DDPGPolicy, TD3Config
from hierl.algorithms.sac import SACConfig, SACPolicy
from hierl.sample_batch import SampleBatch as SB

pytestmark = pytest.mark.timeout(120)

OBS_DIM, ACT_DIM, ROWS, HIDDEN = 5, 2, 64, [32, 32]


class BoxEnv(gym.Env):
    """Spaces only: SB3 builds its networks from an env."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(OBS_DIM, np.float32), {}

    def step(self, action):
        return np.zeros(OBS_DIM, np.float32), 0.0, False, False, {}


def fixed_noise(mean: torch.Tensor) -> torch.Tensor:
    """The exploration noise both libraries draw, as a smooth function of the Gaussian's
    mean (so the same rows get the same noise whichever library, in whichever order)."""
    return 1.5 * torch.sin(37.0 * mean.detach() + 1.0)


def critic_pairs(sb3, model) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """SB3's twin critics and their targets beside hierl's (the same layers)."""
    return [
        (sb3.critic.qf0, model.critic.net.net),
        (sb3.critic.qf1, model.critic2.net.net),
        (sb3.critic_target.qf0, model.target_critic.net.net),
        (sb3.critic_target.qf1, model.target_critic2.net.net),
    ]


def copy_parameters(pairs) -> None:
    """Each pair's first module's parameters into its second's."""
    with torch.no_grad():
        for theirs, mine in pairs:
            for a, b in zip(theirs.parameters(), mine.parameters(), strict=True):
                b.copy_(a)


def copy_sb3_weights(sb3, policy: SACPolicy) -> None:
    """SB3's actor (``latent_pi``, ``mu``, ``log_std``), critics and targets into hierl's
    networks (hierl's actor has one last layer for the mean and the log std)."""
    actor = sb3.actor
    ours = policy.model.actor.net.net
    copy_parameters([(actor.latent_pi, ours[:4]), *critic_pairs(sb3, policy.model)])
    with torch.no_grad():
        ours[4].weight.copy_(torch.cat([actor.mu.weight, actor.log_std.weight]))
        ours[4].bias.copy_(torch.cat([actor.mu.bias, actor.log_std.bias]))
        model = policy.model
        model.log_alpha.copy_(sb3.log_ent_coef.detach().reshape(model.log_alpha.shape))


def batches(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        {
            SB.OBS: rng.normal(size=(ROWS, OBS_DIM)).astype(np.float32),
            SB.ACTIONS: rng.uniform(-0.99, 0.99, (ROWS, ACT_DIM)).astype(np.float32),
            SB.REWARDS: rng.normal(size=ROWS).astype(np.float32),
            SB.NEW_OBS: rng.normal(size=(ROWS, OBS_DIM)).astype(np.float32),
            SB.TERMINATEDS: rng.random(ROWS) < 0.2,
        }
        for _ in range(count)
    ]


def make_sb3(algo: str, data: list[dict[str, np.ndarray]], monkeypatch):
    """SB3's ``algo`` on ``BoxEnv`` with hierl's defaults, its replay buffer handing over
    ``data``'s batches in turn and its logger keeping what ``train`` records."""
    sb3_lib = pytest.importorskip("stable_baselines3")  # the bench extra
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    sb3 = getattr(sb3_lib, algo)(
        "MlpPolicy",
        BoxEnv(),
        learning_rate=3e-4,
        batch_size=ROWS,
        buffer_size=1_000,
        learning_starts=0,
        tau=0.005,
        gamma=0.99,
        policy_kwargs={"net_arch": HIDDEN},
        device="cpu",
        seed=0,
    )
    sb3.set_logger(Logger(folder=None, output_formats=[]))
    fed = iter(data)

    def sample(batch_size, env=None):
        b = next(fed)
        return ReplayBufferSamples(
            observations=torch.from_numpy(b[SB.OBS]),
            actions=torch.from_numpy(b[SB.ACTIONS]),
            next_observations=torch.from_numpy(b[SB.NEW_OBS]),
            dones=torch.from_numpy(b[SB.TERMINATEDS].astype(np.float32)).reshape(-1, 1),
            rewards=torch.from_numpy(b[SB.REWARDS]).reshape(-1, 1),
        )

    monkeypatch.setattr(sb3.replay_buffer, "sample", sample)
    return sb3


def assert_same_parameters(pairs) -> None:
    for theirs, mine in pairs:
        for a, b in zip(theirs.parameters(), mine.parameters(), strict=True):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_sac_updates_match_sb3_s(monkeypatch):
    data = batches(5)
    sb3 = make_sb3("SAC", data, monkeypatch)
    policy = SACPolicy(
        BoxEnv.observation_space,
        BoxEnv.action_space,
        SACConfig.from_dict(
            {"model": {"hiddens": HIDDEN, "activation": "relu"}, "lr": 3e-4, "tau": 0.005}
        ),
    )
    copy_sb3_weights(sb3, policy)
    monkeypatch.setattr(
        torch.distributions.Normal,
        "rsample",
        lambda d, shape=(): d.loc + fixed_noise(d.loc) * d.scale,
    )
    monkeypatch.setattr(torch, "randn_like", fixed_noise)  # hierl's SACActor.sample
    for b in data:
        sb3.train(gradient_steps=1, batch_size=ROWS)
        logged = dict(sb3.logger.name_to_value)
        stats = policy.learn_on_replay_batch(SB(b)).stats
        assert stats["critic_loss"] == pytest.approx(logged["train/critic_loss"], rel=1e-4)
        assert stats["actor_loss"] == pytest.approx(logged["train/actor_loss"], rel=1e-4)
        assert stats["alpha_loss"] == pytest.approx(logged["train/ent_coef_loss"], rel=1e-4)
        assert stats["alpha"] == pytest.approx(logged["train/ent_coef"], rel=1e-6)
    model = policy.model
    assert_same_parameters(
        [*critic_pairs(sb3, model), (sb3.actor.latent_pi, model.actor.net.net[:4])]
    )
    head = model.actor.net.net[4]
    actor = sb3.actor
    torch.testing.assert_close(head.weight, torch.cat([actor.mu.weight, actor.log_std.weight]))
    torch.testing.assert_close(head.bias, torch.cat([actor.mu.bias, actor.log_std.bias]))
    torch.testing.assert_close(model.log_alpha.reshape(()), sb3.log_ent_coef.detach().reshape(()))
    # five updates moved every network and the temperature: the comparison can fail
    assert float(model.log_alpha) != 0.0
    assert not torch.equal(model.target_critic.net.net[0].weight, sb3.critic.qf0[0].weight)


def test_td3_updates_match_sb3_s(monkeypatch):
    data = batches(6)  # three actor steps (policy delay 2)
    sb3 = make_sb3("TD3", data, monkeypatch)
    policy = DDPGPolicy(
        BoxEnv.observation_space,
        BoxEnv.action_space,
        TD3Config.from_dict({"model": {"hiddens": HIDDEN, "activation": "relu"}}),
    )
    model = policy.model
    actors = [
        (sb3.actor.mu, model.actor.net.net),
        (sb3.actor_target.mu, model.target_actor.net.net),
    ]
    copy_parameters([*critic_pairs(sb3, model), *actors])
    # the target policy's smoothing noise: each side draws the same tensors in turn
    noise = torch.from_numpy(np.random.default_rng(1).normal(size=(6, ROWS, ACT_DIM)))
    sb3_draws, hierl_draws = iter(noise), iter(noise)

    def normal_(tensor, mean=0.0, std=1.0):  # SB3 draws it into a clone of the actions
        return tensor.copy_(mean + std * next(sb3_draws).to(tensor.dtype))

    monkeypatch.setattr(torch.Tensor, "normal_", normal_)
    monkeypatch.setattr(torch, "randn_like", lambda t: next(hierl_draws).to(t.dtype))
    for step, b in enumerate(data):
        sb3.train(gradient_steps=1, batch_size=ROWS)
        logged = dict(sb3.logger.name_to_value)
        stats = policy.learn_on_replay_batch(SB(b)).stats
        assert stats["critic_loss"] == pytest.approx(logged["train/critic_loss"], rel=1e-4)
        if step % 2:  # the actor's step
            assert stats["actor_loss"] == pytest.approx(logged["train/actor_loss"], rel=1e-4)
    assert_same_parameters([*critic_pairs(sb3, model), *actors])
    # the updates moved the target networks: the comparison can fail
    assert not torch.equal(model.target_actor.net.net[0].weight, sb3.actor.mu[0].weight)
