"""DDPG, TD3 and Ape-X DDPG: deterministic actor-critic for continuous (Box) actions.

* DDPG: Lillicrap et al. 2016, "Continuous control with deep reinforcement learning",
  https://arxiv.org/abs/1509.02971 (Algorithm 1: deterministic actor, critic Q(s, a),
  Polyak-averaged target networks, exploration noise added to the actor's action).
* TD3: Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
  Methods", https://arxiv.org/abs/1802.09477 (Algorithm 1: clipped double-Q with twin
  critics, target policy smoothing, delayed actor and target updates).  TD3 is DDPG with
  ``twin_q``, ``smooth_target_policy`` and ``policy_delay=2`` on.
* Ape-X DDPG: Horgan et al. 2018, "Distributed Prioritized Experience Replay",
  https://arxiv.org/abs/1803.00933 (§4.2): the same learner on the ``apex`` optimizer;
  each evaluator explores with its own noise scale (``DDPGPolicy.set_exploration_scale``).

One learner update (``DDPGPolicy.learn_on_replay_batch``), as in TD3's Algorithm 1:

    y = r + gamma * (1 - terminated) * min_i Q'_i(s', clip(mu'(s') + clip(eps, -c, c), -1, 1))
    critic(s): minimise  w * (Q_i(s, a) - y)^2         (w: prioritized replay weights)
    every policy_delay-th update:
        actor: maximise Q_1(s, mu(s));  then targets <- tau * online + (1 - tau) * targets

With ``policy_delay=1`` the actor and the targets are updated after every critic update,
which is DDPG's Algorithm 1.  Actions are handled in a normalised space: the actor's tanh
output ``u`` in ``[-1, 1]`` maps to ``low + (u + 1) (high - low) / 2``; the critic sees ``u``
and all noise scales are fractions of half the action range (TD3's ``0.1 * max_action``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hierl.algorithms.actor_critic import (
    ActorCriticConfig,
    ActorCriticPolicy,
    DDPGCritic,
    frozen,
)
from hierl.algorithms.trainer import Trainer
from hierl.algorithms.trainer_config import same_defaults
from hierl.models.networks import MLP, ModelConfig
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, LearnResult
from hierl.sample_batch import SampleBatch as SB
from hierl.torch_policy_graph import make_adam

DDPG_REPLAY = {
    "train_batch_size": 256,
    "replay_ratio": 256.0,
    "buffer_size": 1_000_000,
    "prioritized_replay": False,
}
"""DDPG's replay under ``replay`` and ``apex``: batches of 256, one update per env step,
uniform replay over the last million rows."""


@dataclasses.dataclass
class DDPGConfig(ActorCriticConfig):
    """DDPG settings.

    The defaults are the TD3 paper's re-tuned DDPG ("Our DDPG", Fujimoto et al. 2018,
    §6.1): Adam 1e-3 for both networks, tau 0.005, Gaussian exploration noise 0.1, actions
    fed to the critic's first layer, no L2 penalty, a uniform-random warm-up.  Replay
    (``replay`` by default, or ``apex``): batches of 256 rows (``train_batch_size``), 256
    rows replayed per env step sampled (one update per step: TD3's interleaving),
    uniform replay over the last million rows.
    """

    optimizer_defaults = same_defaults(("replay", "apex"), **DDPG_REPLAY)

    lr: float = 1e-3
    """Not used: DDPG has two optimizers (``actor_lr``, ``critic_lr``)."""
    actor_lr: float = 1e-3
    """Learning rate of the actor's Adam optimizer."""
    critic_lr: float = 1e-3
    """Learning rate of the critics' Adam optimizer."""
    twin_q: bool = False
    """Two critics; the TD target takes their minimum (TD3's clipped double-Q)."""
    policy_delay: int = 1
    """Critic updates per actor update; the targets are updated with the actor (TD3: 2)."""
    smooth_target_policy: bool = False
    """Add clipped Gaussian noise to the target actor's action (TD3's target smoothing)."""
    target_noise: float = 0.2
    """Std of the target smoothing noise, as a fraction of half the action range."""
    target_noise_clip: float = 0.5
    """The smoothing noise is clipped to ``[-c, c]`` (same units as ``target_noise``)."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's action when exploring, as a fraction
    of half the action range; ``set_exploration_scale(x)`` multiplies it by ``x``."""
    n_step: int = 1
    """n-step TD targets (Ape-X); windows stay inside one sample fragment, so
    ``rollout_fragment_length`` must be >= ``n_step``."""
    use_huber: bool = False
    """Huber critic loss instead of the squared error."""
    huber_threshold: float = 1.0
    """Huber loss delta (with ``use_huber``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("actor_lr", "critic_lr", "target_noise_clip", "huber_threshold"):
            self.check(name, getattr(self, name) > 0, "must be > 0")
        for name in ("exploration_noise", "target_noise"):
            self.check(name, getattr(self, name) >= 0, "must be >= 0")
        self.check("policy_delay", self.policy_delay >= 1, "must be >= 1")
        self.check(
            "lr_schedule",
            self.lr_schedule is None,
            "not supported by DDPG (it has two optimizers: set actor_lr and critic_lr)",
        )


@dataclasses.dataclass
class TD3Config(DDPGConfig):
    """TD3 (Fujimoto et al. 2018, Algorithm 1 and §6.1): DDPG with twin critics, target
    policy smoothing (0.2, clipped at 0.5) and actor/target updates every 2 critic updates;
    10k uniformly random warm-up steps, learning from then on (``learning_starts``)."""

    optimizer_defaults = same_defaults(("replay", "apex"), **DDPG_REPLAY, learning_starts=10_000)

    actor_lr: float = 3e-4
    """Learning rate of the actor's Adam optimizer (the authors' code)."""
    critic_lr: float = 3e-4
    """Learning rate of the critics' Adam optimizer (the authors' code)."""
    twin_q: bool = True
    """Clipped double-Q: the TD target is the minimum of two target critics."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    smooth_target_policy: bool = True
    """Target policy smoothing."""
    random_timesteps: int = 10_000
    """Uniformly random actions for the first this-many sampled env steps."""


@dataclasses.dataclass
class ApexDDPGConfig(DDPGConfig):
    """The ``APEX_DDPG`` preset (Horgan et al. 2018, §4.2): DDPG on the ``apex`` optimizer.

    Evaluator ``i`` of ``N`` explores with noise ``exploration_noise * 0.4 ** (1 + 7 (i-1)
    / (N-1))`` (the optimizer's ladder, pinned through the policy's exploration scale);
    replay is prioritized by |TD error| and sharded over 4 shards holding 200k rows, and
    the learner starts after 10k.
    """

    default_optimizer = "apex"
    optimizer_defaults = same_defaults(
        ("replay", "apex"),
        **{**DDPG_REPLAY, "buffer_size": 200_000, "prioritized_replay": True},
        learning_starts=10_000,
    )

    num_evaluators: int = 2
    """Remote evaluators (the Ape-X actors)."""
    timesteps_per_iteration: int = 0
    """One ``apex`` step (``min_step_time_s`` of pipelined work) per ``train()``."""
    rollout_fragment_length: int = 50
    """Env steps per sample task of an evaluator (its batch to a replay shard)."""
    n_step: int = 3
    """n-step TD targets (RLlib's Ape-X DDPG value)."""
    exploration_noise: float = 0.25
    """Noise std before the per-evaluator ladder scales it (rung 1: 0.4 x 0.25 = 0.1)."""
    random_timesteps: int = 0
    """Uniformly random actions while the global timestep (refreshed on weight syncs) is
    below this; the noise ladder explores instead by default."""


# -- networks --------------------------------------------------------------------------------
class DDPGActor(nn.Module):
    """Deterministic policy ``mu(s)``: an MLP with a tanh output in ``[-1, 1]^act_dim``."""

    def __init__(self, obs_size: int, act_dim: int, config: ModelConfig):
        super().__init__()
        # With the orthogonal init a small final layer (initial actions near the middle of
        # the range); PyTorch's init (the default, weight_init "torch") ignores out_gain.
        self.net = MLP.from_config(obs_size, config, act_dim, out_gain=0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))

    def greedy_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu(s), the pre-tanh output)``: the action and what export reports as the
        actor's outputs."""
        pre = self.net(obs)
        return torch.tanh(pre), pre


class DDPGModel(nn.Module):
    """Actor, critic(s) and their target copies in one module (one stable naming).

    ``state_dict`` names: ``actor.*``, ``critic.*``, ``critic2.*`` (twin only) and the same
    with a ``target_`` prefix.
    """

    def __init__(self, obs_size: int, act_dim: int, config: ModelConfig, twin_q: bool):
        super().__init__()
        self.actor = DDPGActor(obs_size, act_dim, config)
        self.critic = DDPGCritic(obs_size, act_dim, config)
        self.critic2 = DDPGCritic(obs_size, act_dim, config) if twin_q else None
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_critic2 = copy.deepcopy(self.critic2).requires_grad_(False) if twin_q else None

    def critics(self) -> list[DDPGCritic]:
        return [c for c in (self.critic, self.critic2) if c is not None]

    def target_critics(self) -> list[DDPGCritic]:
        return [c for c in (self.target_critic, self.target_critic2) if c is not None]

    def online_target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        pairs = [(self.actor, self.target_actor), (self.critic, self.target_critic)]
        if self.critic2 is not None:
            pairs.append((self.critic2, self.target_critic2))
        return pairs


# -- the policy graph ------------------------------------------------------------------------
class DDPGPolicy(ActorCriticPolicy):
    """DDPG/TD3 policy graph: act with noise, learn on replayed batches, Polyak targets.

    ``config`` is a ``DDPGConfig`` (or a subclass).  Weights (``get_weights``) include
    the target networks, so replicas that compute Ape-X priorities use the learner's
    targets.  ``get_state`` adds both Adam optimizers' moments, the update counter (the
    ``policy_delay`` phase), the last actor loss and the exploration scale.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.noise_scale = 1.0
        """Multiplies ``exploration_noise``; pinned per evaluator by
        ``set_exploration_scale``."""
        self.last_actor_loss = math.nan

    def make_model(self, obs_size: int) -> DDPGModel:
        """Actor, critic(s) and their targets."""
        return DDPGModel(obs_size, self.act_dim, self.config.model, self.config.twin_q)

    def make_optimizers(self) -> None:
        """Adam for the actor (``actor_lr``) and one for the critics (``critic_lr``)."""
        self.actor_optimizer = make_adam(list(self.model.actor.parameters()), self.config.actor_lr)
        critic_params = [p for c in self.model.critics() for p in c.parameters()]
        self.critic_optimizer = make_adam(critic_params, self.config.critic_lr)

    # -- act -------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        """``mu(s)`` plus Gaussian noise (clipped to the bounds) when exploring.

        Uniformly random actions while the global timestep is below ``random_timesteps``;
        ``explore=False`` returns the deterministic ``mu(s)``.
        """
        cfg = self.config
        obs = self._obs(obs_batch)
        u = self.model.actor(obs)
        if explore:
            if self.global_timestep < cfg.random_timesteps:
                u = torch.rand_like(u) * 2.0 - 1.0
            else:
                std = cfg.exploration_noise * self.noise_scale
                if std > 0:
                    u = (u + std * torch.randn_like(u)).clamp(-1.0, 1.0)
        return self.env_actions(u), [], {}

    def set_exploration_scale(self, scale: float | None) -> None:
        """Scale the exploration noise by ``scale`` (``ExplorationScale``: Ape-X's
        per-evaluator ladder); None: back to the unscaled noise (1).

        The Gaussian noise std becomes ``scale * exploration_noise``; 0 explores only
        during the random warm-up.
        """
        if scale is None:
            self.noise_scale = 1.0
            return
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise ValueError(f"exploration scale must be a number (noise scale), got {scale!r}")
        if not (math.isfinite(scale) and scale >= 0):
            raise ValueError(f"exploration scale (noise) must be finite and >= 0, got {scale}")
        self.noise_scale = float(scale)

    # -- loss ------------------------------------------------------------------------------
    @torch.no_grad()
    def td_targets(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``r + gamma (1 - terminated) min_i Q'_i(s', u')`` with ``u'`` the target actor's
        (smoothed) normalised action; ``gamma ** m`` from ``N_STEP_DISCOUNTS`` for n-step
        rows."""
        cfg = self.config
        new_obs = batch[SB.NEW_OBS]
        u_next = self.model.target_actor(new_obs)
        if cfg.smooth_target_policy and cfg.target_noise > 0:
            noise = (torch.randn_like(u_next) * cfg.target_noise).clamp(
                -cfg.target_noise_clip, cfg.target_noise_clip
            )
            u_next = (u_next + noise).clamp(-1.0, 1.0)
        q_next = torch.stack([q(new_obs, u_next) for q in self.model.target_critics()]).amin(0)
        return self.bootstrap(batch, q_next)

    def _critic_loss(self, q: torch.Tensor, target: torch.Tensor, weights: torch.Tensor):
        cfg = self.config
        if cfg.use_huber:
            per_row = F.huber_loss(q, target, reduction="none", delta=cfg.huber_threshold)
        else:
            per_row = (q - target) ** 2
        return (weights * per_row).mean()

    def learn_on_replay_batch(self, batch: SB) -> LearnResult:
        """One critic update; every ``policy_delay``-th also the actor and the targets.

        The critic loss is weighted by ``PRIO_WEIGHTS`` when present; ``td_error`` is
        ``Q_1(s, a) - y`` before the update.  A step whose gradients are not finite is
        refused (``num_nonfinite_grads_skipped`` 1): a refused critic step ends the
        update there (no actor step, no priorities: ``td_error`` None).
        """
        tb = self._tensors(batch)
        obs, u = tb[SB.OBS], tb["u"]
        target = self.td_targets(tb)
        weights = tb.get(SB.PRIO_WEIGHTS, torch.ones_like(target))
        qs = [critic(obs, u) for critic in self.model.critics()]
        critic_loss = sum(self._critic_loss(q, target, weights) for q in qs)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        values = self._clip(self.model.critic, "critic")
        if self.model.critic2 is not None:
            values.update(self._clip(self.model.critic2, "critic2"))
        stats = self._step("critic", values, batch)
        if stats[NONFINITE_GRADS_SKIPPED]:
            return LearnResult(stats, None)
        self.num_updates += 1
        if self.num_updates % self.config.policy_delay == 0:
            # The actor climbs the first critic, just updated (TD3's order); no gradients
            # of the critics' weights are computed for it.
            with frozen(self.model.critics()):
                actor_loss = -self.model.critic(obs, self.model.actor(obs)).mean()
                self.actor_optimizer.zero_grad(set_to_none=True)
                actor_loss.backward()
            values = {**self._clip(self.model.actor, "actor"), "actor_loss": actor_loss.detach()}
            actor_stats = self._step("actor", values, batch)
            if not actor_stats[NONFINITE_GRADS_SKIPPED]:
                self.last_actor_loss = actor_stats.pop("actor_loss")
            stats.update(actor_stats)  # counts a refused actor step
            self.update_target(self.config.tau)
        td = (qs[0] - target).detach()
        stats.update(
            critic_loss=float(critic_loss.detach()),
            # the latest actor loss (also on critic-only updates: stats are averaged)
            actor_loss=self.last_actor_loss,
            mean_q=float(qs[0].detach().mean()),
            mean_target=float(target.mean()),
            mean_abs_td_error=float(td.abs().mean()),
        )
        return LearnResult(stats, td.cpu().numpy())

    @torch.no_grad()
    def compute_td_errors(self, batch: SB) -> np.ndarray:
        """``|Q_1(s, a) - y|`` of fresh rows (``TDErrors``: Ape-X initial priorities)."""
        tb = self._tensors(batch)
        td = self.model.critic(tb[SB.OBS], tb["u"]) - self.td_targets(tb)
        return td.abs().cpu().numpy()

    # -- state ---------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Weights (with targets), both optimizers' moments and the counters."""
        return {
            **super().get_state(),
            "noise_scale": self.noise_scale,
            "last_actor_loss": self.last_actor_loss,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        super().set_state(state)
        self.noise_scale = float(state["noise_scale"])
        self.last_actor_loss = float(state["last_actor_loss"])


# -- trainers --------------------------------------------------------------------------------
class DDPGTrainer(Trainer):
    """DDPG on the ``replay`` optimizer (default) or ``apex``."""

    name = "DDPG"
    config_class = DDPGConfig
    policy_class = DDPGPolicy


class TD3Trainer(DDPGTrainer):
    """TD3: DDPG with ``TD3Config``'s defaults (twin critics, smoothing, delay 2)."""

    name = "TD3"
    config_class = TD3Config


class ApexDDPGTrainer(DDPGTrainer):
    """Ape-X DDPG: the ``APEX_DDPG`` preset of DDPG (``ApexDDPGConfig``)."""

    name = "APEX_DDPG"
    config_class = ApexDDPGConfig


__all__ = [
    "ApexDDPGConfig",
    "ApexDDPGTrainer",
    "DDPGConfig",
    "DDPGPolicy",
    "DDPGTrainer",
    "TD3Config",
    "TD3Trainer",
]
