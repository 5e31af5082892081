"""SAC and Ape-X SAC: maximum-entropy actor-critic for continuous (Box) and Discrete actions.

* SAC: Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
  https://arxiv.org/abs/1812.05905 (Algorithm 1: twin soft Q-functions with Polyak-averaged
  targets, a tanh-squashed Gaussian policy (Appendix C: the log-likelihood correction of
  the squashing), and the temperature ``alpha`` tuned against a target entropy, §5 eq. 18).
* Ape-X SAC: the same learner on the ``apex`` optimizer (Horgan et al. 2018,
  https://arxiv.org/abs/1803.00933): evaluators feed prioritized replay shards.  Each
  evaluator explores with the policy's own noise, a sample of the squashed Gaussian: SAC's
  exploration is part of the objective (the entropy term, tuned by ``alpha``), so there is
  no noise scale for the optimizer's per-evaluator ladder to pin (SACPolicy has no
  ``ExplorationScale``; ``apex`` pins no ladder when no policy has one).

One learner update (``SACPolicy.learn_on_replay_batch``):

    alpha = exp(log_alpha)                                  (the value before this update)
    u' ~ pi(.|s'),  y = r + gamma (1 - terminated) (min_i Q'_i(s', u') - alpha log pi(u'|s'))
    critics: minimise  1/2 sum_i w * (Q_i(s, a) - y)^2      (w: prioritized replay weights)
    actor:   u ~ pi(.|s) (reparameterised): minimise  alpha log pi(u|s) - min_i Q_i(s, u)
    alpha:   minimise  -log_alpha * (log pi(u|s) + target_entropy)     (same u, detached)
    targets: Q'_i <- tau * Q_i + (1 - tau) * Q'_i

The policy acts in a normalised space: ``u = tanh(x)``, ``x ~ N(mean(s), std(s))``, maps to
``low + (u + 1) (high - low) / 2``; the critics see ``u``.  Greedy actions are
``tanh(mean(s))``.  As in Stable-Baselines3 (whose defaults ``SACConfig`` takes), the
temperature's target entropy ``-|A|`` is in that normalised space.  With ``n_step > 1``
the target sums m rewards and bootstraps the soft value of the m-th next state: the
entropy bonuses of the steps in between are not added (as RLlib's SAC does).

* Discrete SAC: Christodoulou 2019, https://arxiv.org/abs/1910.07207.  On a Discrete
  action space ``SACPolicy`` is a ``DiscreteSACPolicy``: critics give ``Q(s, .)``, the
  actor ``pi(.|s)``, and the expectations over actions above are computed exactly (its
  docstring has the update); the target entropy defaults to ``0.89 log n``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
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
from hierl.devices import host_floats
from hierl.models.networks import MLP, ModelConfig
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, LearnResult
from hierl.sample_batch import SampleBatch as SB
from hierl.torch_policy_graph import make_adam

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The actor's log standard deviation is clamped to this range (SB3's and the authors')."""

SAC_REPLAY = {
    "train_batch_size": 256,
    "replay_ratio": 256.0,
    "buffer_size": 1_000_000,
    "prioritized_replay": False,
}
"""SAC's replay under ``replay`` and ``apex``: batches of 256, one gradient step per env
step (SB3's ``train_freq=1, gradient_steps=1``), uniform replay over the last million rows."""


@dataclasses.dataclass
class SACConfig(ActorCriticConfig):
    """SAC settings.

    The defaults are Stable-Baselines3's (``SAC``): Adam 3e-4 for the actor, the critics
    and the temperature, two (256, 256) ReLU critics, tau 0.005, gamma 0.99, the
    temperature learned from 1.0 against the target entropy ``-|A|`` (discrete actions:
    ``0.89 log n``); replay (``replay`` by default, or ``apex``) of batches of 256 rows,
    one update per sampled env step (256 rows replayed per env step), over the last
    million rows, learning from 100 rows on, uniformly random actions for the first 100
    env steps.
    """

    optimizer_defaults = same_defaults(("replay", "apex"), **SAC_REPLAY, learning_starts=100)

    lr: float = 3e-4
    """Learning rate of the three Adam optimizers (actor, critics, temperature)."""
    random_timesteps: int = 100
    """Sampled env steps (the global timestep) with uniformly random actions first
    (SB3 acts uniformly until ``learning_starts``)."""
    initial_alpha: float = 1.0
    """The entropy temperature ``alpha`` at the start (SB3's ``ent_coef="auto"``: 1.0)."""
    learn_alpha: bool = True
    """Tune ``alpha`` against ``target_entropy``; False keeps ``initial_alpha`` fixed."""
    target_entropy: float | None = None
    """The entropy ``alpha`` is tuned towards, in nats; None: ``-|A|`` (minus the number
    of action dimensions, in the normalised action space) for Box actions,
    ``0.89 log n`` for ``n`` discrete actions (CleanRL's Atari setting; RLlib and the
    paper use 0.98).  On two actions 0.89 log 2 = 0.62 nats is a policy near 70/30 on
    average, and CartPole's sampled return stays near 150; 0.3 nats (near 91/9) learns
    it (tests/test_sac_discrete.py)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(
            "initial_alpha",
            self.initial_alpha > 0 and math.isfinite(self.initial_alpha),
            "must be finite and > 0",
        )
        self.check(
            "target_entropy",
            self.target_entropy is None or math.isfinite(self.target_entropy),
            "must be finite or null (-|A|, or 0.89 log n for discrete actions)",
        )
        self.check(
            "lr_schedule",
            self.lr_schedule is None,
            "not supported by SAC (its three optimizers use lr)",
        )


@dataclasses.dataclass
class ApexSACConfig(SACConfig):
    """The ``APEX_SAC`` preset: SAC on the ``apex`` optimizer with 2 evaluators sampling
    from the policy, 50-step fragments, prioritized replay over 4 shards holding 200k
    rows; learning starts after 10k rows."""

    default_optimizer = "apex"
    optimizer_defaults = same_defaults(
        ("replay", "apex"),
        **{**SAC_REPLAY, "buffer_size": 200_000, "prioritized_replay": True},
        learning_starts=10_000,
    )

    num_evaluators: int = 2
    """Remote evaluators (the Ape-X actors)."""
    timesteps_per_iteration: int = 0
    """One ``apex`` step (``min_step_time_s`` of pipelined work) per ``train()``."""
    rollout_fragment_length: int = 50
    """Env steps per sample task of an evaluator (its batch to a replay shard)."""
    random_timesteps: int = 0
    """Uniformly random actions while the global timestep (refreshed on weight syncs) is
    below this; the policy's own noise explores from the start by default."""


# -- networks --------------------------------------------------------------------------------
def squashed_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor):
    """``log pi(tanh(x))`` summed over action dimensions: the Gaussian's log-density of
    ``x`` minus ``sum log(1 - tanh(x)^2)``, the log-Jacobian of the squashing (the paper's
    Appendix C, eq. 21)."""
    gaussian = (
        -0.5 * ((x - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    ).sum(-1)
    # CRUCIAL: log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x)), finite where tanh(x) = ±1.
    log_jacobian = (2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))).sum(-1)
    return gaussian - log_jacobian


class SACActor(nn.Module):
    """The tanh-squashed Gaussian policy: an MLP giving the mean and the log std (clamped
    to ``[LOG_STD_MIN, LOG_STD_MAX]``) of ``x``; the action is ``tanh(x)``."""

    def __init__(self, obs_size: int, act_dim: int, config: ModelConfig):
        super().__init__()
        # With the orthogonal init a small final layer (initial means near 0, stds near
        # 1); PyTorch's init (the default, weight_init "torch") ignores out_gain.
        self.net = MLP.from_config(obs_size, config, 2 * act_dim, out_gain=0.01)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of the Gaussian before the squashing."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample ``u = tanh(mean + std * eps)`` and ``log pi(u|s)``."""
        mean, log_std = self(obs)
        x = mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(x), squashed_log_prob(x, mean, log_std)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """``tanh(mean(s))``: the deterministic action."""
        return torch.tanh(self(obs)[0])

    def greedy_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tanh(mean(s)), [mean, log_std])``: the greedy action and what export reports
        as the actor's outputs."""
        mean, log_std = self(obs)
        return torch.tanh(mean), torch.cat([mean, log_std], dim=-1)


class SACModel(nn.Module):
    """Actor, twin critics, their target copies and ``log_alpha`` in one module.

    ``state_dict`` names: ``actor.*``, ``critic.*``, ``critic2.*``, ``target_critic.*``,
    ``target_critic2.*`` and ``log_alpha`` (SAC has no target actor).  The networks are
    the continuous ones (``SACActor``, ``DDPGCritic``) or the discrete ones
    (``DiscreteSACActor``, ``DiscreteCritic``).
    """

    def __init__(
        self, actor: nn.Module, critics: tuple[nn.Module, nn.Module], initial_alpha: float
    ):
        super().__init__()
        self.actor = actor
        self.critic, self.critic2 = critics
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_critic2 = copy.deepcopy(self.critic2).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))

    def critics(self) -> list[nn.Module]:
        return [self.critic, self.critic2]

    def target_critics(self) -> list[nn.Module]:
        return [self.target_critic, self.target_critic2]

    def online_target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.critic, self.target_critic), (self.critic2, self.target_critic2)]


def min_q(critics: list[nn.Module], obs: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
    """``min_i Q_i(s, u)`` over the twin critics (clipped double-Q); discrete critics with
    ``u`` None: ``min_i Q_i(s, .)`` per action."""
    return torch.minimum(critics[0](obs, u), critics[1](obs, u))


# -- the policy graph ------------------------------------------------------------------------
class SACPolicy(ActorCriticPolicy):
    """SAC policy graph: act by sampling the squashed Gaussian, learn on replayed batches.

    ``config`` is a ``SACConfig``.  Weights (``get_weights``) include the target
    critics and ``log_alpha``, so replicas that compute Ape-X priorities use the learner's
    targets and temperature.  ``get_state`` adds the three Adam optimizers' moments and the
    update counter.
    """

    algorithm = "SAC"
    optimizer_names = ("actor", "critic", "alpha")

    def __new__(cls, observation_space: Any = None, action_space: Any = None, config: Any = None):
        """``SACPolicy(observation_space, Discrete(n), config)`` is a ``DiscreteSACPolicy``:
        one algorithm for both kinds of action space, as the trainers name one policy
        class."""
        if cls is SACPolicy and isinstance(action_space, gym.spaces.Discrete):
            cls = DiscreteSACPolicy
        return super().__new__(cls)

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        target = config.target_entropy
        self.target_entropy = -float(self.act_dim) if target is None else float(target)
        """The entropy ``alpha`` is tuned towards (``-|A|`` by default)."""

    def setup_actions(self, action_space: gym.Space) -> None:
        """A Box space as for every replay actor-critic; a Discrete one is refused by
        name here only for subclasses (``SACPolicy`` itself builds a
        ``DiscreteSACPolicy``: subclass that for discrete actions)."""
        if isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(
                f"{type(self).__name__} is SAC for Box actions, got {action_space!r}; "
                "for discrete actions subclass DiscreteSACPolicy (SACPolicy builds one "
                "on a Discrete space)"
            )
        super().setup_actions(action_space)

    def make_model(self, obs_size: int) -> SACModel:
        """Actor, twin critics, target critics and ``log_alpha``."""
        cfg = self.config
        actor = SACActor(obs_size, self.act_dim, cfg.model)  # first: the seeds' draw order
        critics = (DDPGCritic(obs_size, self.act_dim, cfg.model) for _ in range(2))
        return SACModel(actor, tuple(critics), cfg.initial_alpha)

    def make_optimizers(self) -> None:
        """One Adam (``lr``) each for the actor, the two critics together and ``log_alpha``."""
        lr = self.config.lr
        self.actor_optimizer = make_adam(list(self.model.actor.parameters()), lr)
        critic_params = [p for c in self.model.critics() for p in c.parameters()]
        self.critic_optimizer = make_adam(critic_params, lr)
        self.alpha_optimizer = make_adam([self.model.log_alpha], lr)

    @property
    def alpha(self) -> float:
        """The entropy temperature ``exp(log_alpha)``."""
        return float(self.model.log_alpha.detach().exp())

    # -- act -------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        """A sample ``tanh(x)``, ``x ~ N(mean(s), std(s))``, when exploring (uniformly random
        while the global timestep is below ``random_timesteps``); ``explore=False``:
        ``tanh(mean(s))``."""
        obs = self._obs(obs_batch)
        if not explore:
            u = self.model.actor.greedy(obs)
        elif self.global_timestep < self.config.random_timesteps:
            u = torch.rand(obs.shape[0], self.act_dim, device=self.device) * 2.0 - 1.0
        else:
            u = self.model.actor.sample(obs)[0]
        return self.env_actions(u), [], {}

    # -- loss ------------------------------------------------------------------------------
    @torch.no_grad()
    def td_targets(self, batch: Mapping[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """``r + gamma (1 - terminated) (min_i Q'_i(s', u') - alpha log pi(u'|s'))`` with
        ``u' ~ pi(.|s')``; ``gamma ** m`` from ``N_STEP_DISCOUNTS`` for n-step rows."""
        new_obs = batch[SB.NEW_OBS]
        u_next, logp_next = self.model.actor.sample(new_obs)
        soft_value = min_q(self.model.target_critics(), new_obs, u_next) - alpha * logp_next
        return self.bootstrap(batch, soft_value)

    def taken_q_values(self, critics: list[nn.Module], batch: Mapping[str, torch.Tensor]):
        """``[Q_i(s, a)]`` of each of ``critics`` at the batch's actions."""
        return [critic(batch[SB.OBS], batch["u"]) for critic in critics]

    def actor_objective(self, obs: torch.Tensor, alpha: torch.Tensor):
        """``(actor loss, log pi per row)``: the loss ``mean(alpha log pi(u|s) - min_i
        Q_i(s, u))`` on a reparameterised ``u ~ pi(.|s)``, and its ``log pi(u|s)``
        (detached) for the temperature's loss."""
        u_pi, logp_pi = self.model.actor.sample(obs)
        loss = (alpha * logp_pi - min_q(self.model.critics(), obs, u_pi)).mean()
        return loss, logp_pi.detach()

    def learn_on_replay_batch(self, batch: SB) -> LearnResult:
        """One update of the critics, the actor, ``log_alpha`` and the target critics.

        The critic loss is weighted by ``PRIO_WEIGHTS`` when present; ``td_error`` is
        ``Q_1(s, a) - y`` before the update.  A step whose gradients are not finite is
        refused (``num_nonfinite_grads_skipped`` 1): a refused critic step ends the
        update there (no actor, temperature or target step; ``td_error`` None).
        """
        model = self.model
        tb = self._tensors(batch)
        alpha = model.log_alpha.detach().exp()
        target = self.td_targets(tb, alpha)
        weights = tb.get(SB.PRIO_WEIGHTS)
        qs = self.taken_q_values(model.critics(), tb)
        per_row = sum((q - target) ** 2 for q in qs)
        critic_loss = 0.5 * (per_row if weights is None else weights * per_row).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        values = {**self._clip(model.critic, "critic"), **self._clip(model.critic2, "critic2")}
        stats = self._step("critic", values, batch)
        if stats[NONFINITE_GRADS_SKIPPED]:
            return LearnResult(stats, None)
        self.num_updates += 1
        # The actor descends on the critics just updated (SB3's and the authors' order);
        # no gradients of the critics' weights are computed for it.
        with frozen(model.critics()):
            actor_loss, logp_pi = self.actor_objective(tb[SB.OBS], alpha)
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
        values = {**self._clip(model.actor, "actor"), "actor_loss": actor_loss.detach()}
        actor_stats = self._step("actor", values, batch)
        skipped = actor_stats.pop(NONFINITE_GRADS_SKIPPED)
        alpha_stats: dict[str, float] = {}
        if self.config.learn_alpha:
            alpha_loss = -(model.log_alpha * (logp_pi + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            alpha_stats = self._step("alpha", {"alpha_loss": alpha_loss.detach()}, batch)
            skipped += alpha_stats.pop(NONFINITE_GRADS_SKIPPED)
        self.update_target()
        td = (qs[0] - target).detach()
        stats.update(
            actor_stats,
            **alpha_stats,
            **{NONFINITE_GRADS_SKIPPED: skipped},
            **host_floats(  # one read from the device
                {
                    "critic_loss": critic_loss.detach(),
                    "alpha": alpha,
                    "entropy": -logp_pi.mean(),
                    "mean_q": qs[0].detach().mean(),
                    "mean_target": target.mean(),
                    "mean_abs_td_error": td.abs().mean(),
                }
            ),
        )
        return LearnResult(stats, td.cpu().numpy())

    @torch.no_grad()
    def compute_td_errors(self, batch: SB):
        """``|Q_1(s, a) - y|`` of fresh rows (``TDErrors``: Ape-X initial priorities)."""
        tb = self._tensors(batch)
        alpha = self.model.log_alpha.exp()
        (q,) = self.taken_q_values([self.model.critic], tb)
        return (q - self.td_targets(tb, alpha)).abs().cpu().numpy()


# -- discrete actions ------------------------------------------------------------------------
DISCRETE_TARGET_ENTROPY_SCALE = 0.89
"""Discrete SAC's default target entropy is this fraction of the uniform policy's
``log n`` (CleanRL's ``sac_atari``; Christodoulou 2019 used 0.98)."""


class DiscreteSACActor(nn.Module):
    """A categorical policy: an MLP giving the logits of the ``n`` actions."""

    def __init__(self, obs_size: int, num_actions: int, config: ModelConfig):
        super().__init__()
        # With the orthogonal init a small final layer (initial probabilities near
        # uniform); PyTorch's init (the default, weight_init "torch") ignores out_gain.
        self.net = MLP.from_config(obs_size, config, num_actions, out_gain=0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The logits ``(B, n)``."""
        return self.net(obs)

    def probs_and_log_probs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pi(.|s), log pi(.|s))``, each ``(B, n)``."""
        logits = self(obs)
        return logits.softmax(-1), logits.log_softmax(-1)

    def greedy_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(argmax_a pi(a|s), logits)``: the greedy action and what export reports as the
        actor's outputs."""
        logits = self(obs)
        return logits.argmax(-1), logits


class DiscreteCritic(nn.Module):
    """``Q(s, .)``: an MLP from the observation to one value per action."""

    def __init__(self, obs_size: int, num_actions: int, config: ModelConfig):
        super().__init__()
        self.net = MLP.from_config(obs_size, config, num_actions)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        """``Q(s, .)`` ``(B, n)``; with ``actions`` (indices ``(B,)``): ``Q(s, a)`` ``(B,)``."""
        q = self.net(obs)
        if actions is None:
            return q
        return q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


class DiscreteSACPolicy(SACPolicy):
    """SAC for a Discrete action space (Christodoulou 2019, "Soft Actor-Critic for
    Discrete Action Settings", https://arxiv.org/abs/1910.07207).

    ``SACPolicy(observation_space, Discrete(n), config)`` builds one.  The critics give
    ``Q(s, .)`` for every action and the actor the probabilities ``pi(.|s)``, so the
    expectations over actions that continuous SAC samples are computed exactly:

        y = r + gamma (1 - terminated) sum_a pi(a|s') (min_i Q'_i(s', a) - alpha log pi(a|s'))
        critics: minimise  1/2 sum_i w * (Q_i(s, a) - y)^2
        actor:   minimise  sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))  (Q fixed)
        alpha:   minimise  -log_alpha * (sum_a pi(a|s) log pi(a|s) + target_entropy)

    The target entropy defaults to ``DISCRETE_TARGET_ENTROPY_SCALE * log n``.  Exploring
    samples ``pi(.|s)``; greedy actions are ``argmax_a pi(a|s)``.  Actions are the indices
    ``0..n-1`` (the sampler adds the space's ``start``).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        if config.target_entropy is None:
            self.target_entropy = DISCRETE_TARGET_ENTROPY_SCALE * math.log(self.act_dim)

    def setup_actions(self, action_space: gym.Space) -> None:
        """``act_dim``: the number of actions ``n`` (the actor's and critics' outputs)."""
        if not isinstance(action_space, gym.spaces.Discrete) or action_space.n < 2:
            raise ValueError(
                f"{self.algorithm} for discrete actions needs a Discrete action space of "
                f"at least 2 actions, got {action_space!r}"
            )
        self.act_shape = ()
        self.act_dim = int(action_space.n)

    def make_model(self, obs_size: int) -> SACModel:
        """Categorical actor, twin ``Q(s, .)`` critics, their targets and ``log_alpha``."""
        cfg = self.config
        actor = DiscreteSACActor(obs_size, self.act_dim, cfg.model)
        critics = (DiscreteCritic(obs_size, self.act_dim, cfg.model) for _ in range(2))
        return SACModel(actor, tuple(critics), cfg.initial_alpha)

    def batch_actions(self, actions: Any) -> torch.Tensor:
        """The ``ACTIONS`` column as int64 indices."""
        return self._tensor(actions).reshape(-1).long()

    def env_actions(self, u: torch.Tensor) -> np.ndarray:
        """Action indices as an int64 numpy batch."""
        return u.cpu().numpy().astype(np.int64, copy=False)

    @torch.no_grad()
    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        """A sample of ``pi(.|s)`` when exploring (uniformly random while the global
        timestep is below ``random_timesteps``); ``explore=False``: ``argmax_a pi(a|s)``."""
        obs = self._obs(obs_batch)
        if not explore:
            u = self.model.actor.greedy_outputs(obs)[0]
        elif self.global_timestep < self.config.random_timesteps:
            u = torch.randint(0, self.act_dim, (obs.shape[0],), device=self.device)
        else:
            u = torch.multinomial(self.model.actor.probs_and_log_probs(obs)[0], 1).squeeze(-1)
        return self.env_actions(u), [], {}

    @torch.no_grad()
    def td_targets(self, batch: Mapping[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """``r + gamma (1 - terminated) sum_a pi(a|s') (min_i Q'_i(s', a) - alpha log
        pi(a|s'))``; ``gamma ** m`` from ``N_STEP_DISCOUNTS`` for n-step rows."""
        new_obs = batch[SB.NEW_OBS]
        probs, log_probs = self.model.actor.probs_and_log_probs(new_obs)
        q_next = min_q(self.model.target_critics(), new_obs, None)
        soft_value = (probs * (q_next - alpha * log_probs)).sum(-1)
        return self.bootstrap(batch, soft_value)

    def actor_objective(self, obs: torch.Tensor, alpha: torch.Tensor):
        """``(mean(sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))), sum_a pi log pi)``:
        the expectation over actions in closed form, the critics held fixed; the second is
        ``-H(pi(.|s))`` per row (detached) for the temperature's loss."""
        probs, log_probs = self.model.actor.probs_and_log_probs(obs)
        with torch.no_grad():
            q = min_q(self.model.critics(), obs, None)
        loss = (probs * (alpha * log_probs - q)).sum(-1).mean()
        return loss, (probs * log_probs).sum(-1).detach()

    def export_model(self) -> tuple[nn.Module, None]:
        """The greedy policy for ``hierl.export.export_policy``: observation rows to
        ``(argmax_a pi(a|s), logits, min_i Q_i(s, argmax))``."""
        actor = copy.deepcopy(self.model.actor)
        critics = [copy.deepcopy(c) for c in self.model.critics()]
        return GreedyDiscreteActorCritic(actor, critics), None


class GreedyDiscreteActorCritic(nn.Module):
    """Discrete SAC's greedy policy for export: observation rows to ``(action index,
    logits, min_i Q_i(s, action))``."""

    def __init__(self, actor: DiscreteSACActor, critics: list[DiscreteCritic]) -> None:
        super().__init__()
        self.actor = actor
        self.critics = nn.ModuleList(critics)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(argmax_a pi(a|s), logits, min_i Q_i(s, argmax))`` of a batch of rows."""
        actions, logits = self.actor.greedy_outputs(obs)
        values = torch.stack([q(obs, actions) for q in self.critics]).amin(0)
        return actions, logits, values


# -- trainers --------------------------------------------------------------------------------
class SACTrainer(Trainer):
    """SAC on the ``replay`` optimizer (default) or ``apex``."""

    name = "SAC"
    config_class = SACConfig
    policy_class = SACPolicy


class ApexSACTrainer(SACTrainer):
    """Ape-X SAC: the ``APEX_SAC`` preset of SAC (``ApexSACConfig``)."""

    name = "APEX_SAC"
    config_class = ApexSACConfig


__all__ = [
    "DISCRETE_TARGET_ENTROPY_SCALE",
    "ApexSACConfig",
    "ApexSACTrainer",
    "DiscreteCritic",
    "DiscreteSACActor",
    "DiscreteSACPolicy",
    "GreedyDiscreteActorCritic",
    "SACActor",
    "SACConfig",
    "SACModel",
    "SACPolicy",
    "SACTrainer",
    "squashed_log_prob",
]
