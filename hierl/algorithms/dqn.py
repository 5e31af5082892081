"""DQN (double, dueling, n-step, prioritized) and Ape-X DQN.

* DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning"
  (Nature 518), target network and Huber loss;
* double Q: van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461 (Eq. 4);
* dueling heads: Wang et al. 2016, https://arxiv.org/abs/1511.06581 (Eq. 9);
* prioritized replay: Schaul et al. 2016, https://arxiv.org/abs/1511.05952;
* n-step returns as in Rainbow (Hessel et al. 2018, https://arxiv.org/abs/1710.02298);
* Ape-X: Horgan et al. 2018, "Distributed Prioritized Experience Replay",
  https://arxiv.org/abs/1803.00933 (epsilon ladder, actor-side initial priorities).

The policy graph holds all numerics: epsilon-greedy ``compute_actions``, n-step
``postprocess_trajectories``, the TD ``loss`` and the utilities ``update_target`` and
``set_exploration_scale`` (epsilon).  The trainers only schedule the target updates
between optimizer steps:

    with DQNTrainer({"env": "CartPole-v1"}) as trainer:   # "replay" (default) or "async"
        result = trainer.train()     # >= timesteps_per_iteration env steps
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hierl.algorithms.off_policy import OffPolicyConfig
from hierl.algorithms.trainer import Trainer
from hierl.evaluators import PolicyEvaluator
from hierl.models.distributions import Categorical
from hierl.models.networks import MLP, ModelConfig, check_default_model, make_torso
from hierl.models.preprocessors import is_image_space
from hierl.policy_graph import (
    NONFINITE_GRADS_SKIPPED,
    GlobalVars,
    LearnerStats,
    LearnResult,
    Weights,
)
from hierl.postprocessing import N_STEP_DISCOUNTS, compute_n_step
from hierl.sample_batch import SampleBatch as SB
from hierl.torch_policy_graph import TensorBatch, TorchPolicyGraph
from hierl.utils import piecewise_linear


@dataclasses.dataclass
class DQNConfig(OffPolicyConfig):
    """DQN settings.  The defaults solve CartPole-v1 with the ``replay`` optimizer.

    Optimizers: ``replay`` (default), ``apex`` (the Ape-X epsilon ladder; the ``APEX``
    preset sets it with its trainer defaults) and ``async`` (gradients of fresh
    samples).  ``train_batch_size`` is the rows per replayed batch (with ``async``: env
    steps sampled per optimizer step).  Replay: batches of 64 with 16 rows replayed per
    env step sampled, i.e. one update per 4-step fragment.  Ape-X: batches of 256, two
    replay shards, 16 replay requests in flight per shard, steps of at least 0.5 s.
    """

    supported_optimizers = ("replay", "apex", "async")
    optimizer_defaults = {
        "replay": {"train_batch_size": 64, "replay_ratio": 16.0},
        "async": {"train_batch_size": 64},
        "apex": {
            "train_batch_size": 256,
            "replay_ratio": 16.0,
            "num_replay_shards": 2,
            "replay_requests_in_flight_per_shard": 16,
            "min_step_time_s": 0.5,
        },
    }

    lr: float = 1e-3
    """Learning rate (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    model: ModelConfig = dataclasses.field(
        default_factory=lambda: ModelConfig(hiddens=(64, 64), activation="relu")
    )
    """Torso of the Q-network (an MLP of ``hiddens``, or the Nature CNN for images)."""
    grad_clip: float | None = 10.0
    """Global gradient-norm clip (None: no clipping)."""
    rollout_fragment_length: int = 4
    """Env steps per sub-env per sample (learner updates happen between samples)."""
    timesteps_per_iteration: int = 1000
    """Each ``train()`` repeats optimizer steps until this many env steps were sampled
    (0: one step); the target network is updated between steps when due."""
    # -- Q-learning ------------------------------------------------------------------
    double_q: bool = True
    """Double DQN: the online network picks the next action, the target one values it."""
    dueling: bool = True
    """Dueling heads: ``Q = V + A - mean_a A``."""
    n_step: int = 3
    """Rewards summed in each target before bootstrapping (1: one-step Q-learning)."""
    target_network_update_freq: int = 500
    """Sampled env steps between copies of the online network into the target network."""
    huber_delta: float = 1.0
    """Huber loss threshold on the TD error (quadratic inside, linear outside)."""
    cql_alpha: float = 0.0
    """Weight of the conservative term of discrete CQL (Kumar et al. 2020, CQL(H)):
    ``alpha * (logsumexp_a Q(s, a) - Q(s, a_data))`` per row, which keeps the Q-values of
    actions the data never took from rising above those it did.  For learning from
    logged data (``input``), where plain DQN's max over actions chases the errors of
    actions it cannot try (1.0 is a common start); 0: plain DQN."""
    # -- exploration -----------------------------------------------------------------
    initial_epsilon: float = 1.0
    """Epsilon-greedy exploration at timestep 0."""
    final_epsilon: float = 0.02
    """Epsilon after ``epsilon_timesteps`` sampled env steps (and from then on)."""
    epsilon_timesteps: int = 10_000
    """Sampled env steps over which epsilon falls linearly to ``final_epsilon``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("target_network_update_freq", self.target_network_update_freq >= 1, ">= 1")
        self.check("huber_delta", self.huber_delta > 0, "must be > 0")
        self.check("cql_alpha", self.cql_alpha >= 0, "must be >= 0")
        for name in ("initial_epsilon", "final_epsilon"):
            self.check(name, 0.0 <= getattr(self, name) <= 1.0, "must be in [0, 1]")
        self.check("epsilon_timesteps", self.epsilon_timesteps >= 0, "must be >= 0")


class QNetwork(nn.Module):
    """Q-values from a torso and a plain or dueling head.

    ``forward`` returns ``(q_values, max_a q)``, the ``(dist inputs, values)`` pair that
    TorchPolicyGraph expects; ``q_values(obs)`` is the ``(B, num_actions)`` table.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        config: ModelConfig,
        dueling: bool = True,
    ):
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"DQN needs a Discrete action space, got {action_space}")
        num_actions = int(action_space.n)
        self.is_image = is_image_space(obs_space)
        self.torso = make_torso(obs_space, config)
        width = self.torso.out_features
        self.dueling = dueling
        # Heads are single linear layers (MLPs without hiddens), initialised per weight_init.
        act, init = config.activation, config.weight_init
        self.advantage_head = MLP(width, (), act, num_actions, weight_init=init)
        self.value_head = MLP(width, (), act, 1, weight_init=init) if dueling else None
        self.dist_class = Categorical

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, num_actions)`` Q-values of preprocessed observations."""
        features = self.torso(obs if self.is_image else obs.float())  # the CNN scales images
        adv = self.advantage_head(features)
        if self.value_head is None:
            return adv
        # Wang et al. 2016, Eq. 9: the mean (not max) advantage is subtracted.
        return self.value_head(features) + adv - adv.mean(-1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q-values, max_a Q)``."""
        q = self.q_values(obs)
        return q, q.max(-1).values

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``max_a Q(obs, a)``."""
        return self.q_values(obs).max(-1).values


class DQNPolicy(TorchPolicyGraph):
    """Epsilon-greedy Q-learning with a target network; see the module docstring.

    Utilities called between optimizer steps: ``update_target()`` (copy online →
    target), ``set_exploration_scale(eps)`` (pin epsilon, e.g. Ape-X's ladder:
    ``ExplorationScale``) and
    ``on_global_var_update`` (the linear epsilon schedule over sampled timesteps).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.epsilon = self._scheduled_epsilon(0)
        self.epsilon_pinned = False
        self._last_td_error: np.ndarray | None = None

    def make_model(self) -> nn.Module:
        """A ``QNetwork`` (dueling when ``config.dueling``)."""
        cfg = self.config
        model = getattr(cfg, "model", None) or ModelConfig()
        check_default_model(model, "DQN's Q-network")
        return QNetwork(
            self.observation_space, self.action_space, model, getattr(cfg, "dueling", True)
        )

    # -- act ---------------------------------------------------------------------------
    @torch.no_grad()
    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        """Greedy actions; with ``explore``, uniformly random ones with probability epsilon."""
        q = self.model.q_values(torch.as_tensor(obs_batch, device=self.device))
        actions = q.argmax(-1).cpu()
        if explore and self.epsilon > 0:  # torch's global RNG: seeded per evaluator
            random_rows = torch.rand(len(actions)) < self.epsilon
            random_actions = torch.randint(0, q.shape[-1], actions.shape)
            actions = torch.where(random_rows, random_actions, actions)
        return actions.numpy(), [], {}

    # -- postprocess -------------------------------------------------------------------
    def postprocess_trajectories(self, batch: SB) -> SB:
        """n-step returns over all segments of a fragment (adds ``N_STEP_DISCOUNTS``)."""
        return compute_n_step(batch, self.config.n_step, self.config.gamma)

    def postprocess_trajectory(self, batch, other_agent_batches=None):
        """n-step returns of one segment."""
        return self.postprocess_trajectories(batch)

    # -- loss --------------------------------------------------------------------------
    def q_and_targets(self, batch: TensorBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Q(s_t, .), Q(s_t, a_t), target)`` per row; only the first two carry
        gradients.

        ``target = R + discount * (1 - terminated) * Q_target(s', a')`` with ``a'`` the
        online argmax (double Q) or the target argmax, and ``discount`` the row's
        ``N_STEP_DISCOUNTS`` (``gamma`` for rows without n-step postprocessing).
        """
        q = self.model.q_values(batch[SB.OBS])
        q_taken = q.gather(1, batch[SB.ACTIONS].long().reshape(-1, 1)).squeeze(1)
        with torch.no_grad():
            new_obs = batch[SB.NEW_OBS]
            q_next_target = self.target_model.q_values(new_obs)
            if self.config.double_q:
                next_actions = self.model.q_values(new_obs).argmax(-1)
            else:
                next_actions = q_next_target.argmax(-1)
            q_next = q_next_target.gather(1, next_actions[:, None]).squeeze(1)
            discount = batch.get(N_STEP_DISCOUNTS)
            if discount is None:
                discount = torch.full_like(q_next, self.config.gamma)
            # CRUCIAL: only termination stops bootstrapping; truncated or cut segments
            # bootstrap from their NEW_OBS.
            not_terminal = 1.0 - batch[SB.TERMINATEDS].to(q_next.dtype)
            target = batch[SB.REWARDS].to(q_next.dtype) + discount * not_terminal * q_next
        return q, q_taken, target

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """Huber TD loss (plus CQL's conservative term when ``cql_alpha``), weighted by
        ``PRIO_WEIGHTS`` when present (prioritized replay)."""
        q, q_taken, target = self.q_and_targets(batch)
        per_row = F.huber_loss(q_taken, target, reduction="none", delta=self.config.huber_delta)
        if self.config.cql_alpha:
            per_row = per_row + self.config.cql_alpha * (torch.logsumexp(q, -1) - q_taken)
        weights = batch.get(SB.PRIO_WEIGHTS)
        if weights is not None:
            per_row = per_row * weights.to(per_row.dtype)
        td = (q_taken - target).detach()
        self._last_td_error = td.cpu().numpy()
        return per_row.mean(), {
            "mean_q": q_taken.detach().mean(),
            "max_q": q_taken.detach().max(),
            "mean_td_error": td.abs().mean(),
        }

    def learn_on_replay_batch(self, batch: SB) -> LearnResult:
        """One update; ``td_error`` is each row's TD error before it (new priorities),
        None when the update was refused (a non-finite loss or gradient)."""
        stats = self.learn_on_batch(batch)
        if stats.get(NONFINITE_GRADS_SKIPPED):
            return LearnResult(stats, None)
        return LearnResult(stats, self._last_td_error)

    @torch.no_grad()
    def compute_td_errors(self, batch: SB) -> np.ndarray:
        """``|TD error|`` of fresh rows (``TDErrors``: Ape-X initial priorities)."""
        # A shallow copy: the caller's (possibly compressed) batch goes to replay as it is.
        _, q_taken, target = self.q_and_targets(self.to_tensors(SB(batch)))
        return (q_taken - target).abs().cpu().numpy().astype(np.float64)

    # -- utilities ---------------------------------------------------------------------
    def update_target(self) -> None:
        """Copy the online network's weights into the target network."""
        self.target_model.load_state_dict(self.model.state_dict())

    def get_target_weights(self) -> Weights:
        """Target network weights as numpy arrays (copies)."""
        return {k: v.cpu().numpy().copy() for k, v in self.target_model.state_dict().items()}

    def set_target_weights(self, weights: Weights) -> None:
        """Load target network weights (as ``get_target_weights`` returns them)."""
        self.target_model.load_state_dict(
            {k: torch.tensor(np.asarray(v)) for k, v in weights.items()}, strict=True
        )

    def set_exploration_scale(self, epsilon: float | None) -> None:
        """Pin epsilon (``ExplorationScale``, Ape-X's ladder); None follows the schedule
        again."""
        if epsilon is None:
            self.epsilon_pinned = False
            self.epsilon = self._scheduled_epsilon(self.global_timestep)
            return
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon, self.epsilon_pinned = float(epsilon), True

    def _scheduled_epsilon(self, timestep: int) -> float:
        cfg = self.config
        initial = getattr(cfg, "initial_epsilon", 1.0)
        final = getattr(cfg, "final_epsilon", 0.02)
        horizon = getattr(cfg, "epsilon_timesteps", 10_000)
        if horizon <= 0:
            return float(final)
        return float(piecewise_linear(((0, initial), (horizon, final)), timestep))

    def on_global_var_update(self, global_vars: GlobalVars) -> None:
        """Track the timestep; move epsilon along its schedule unless it is pinned."""
        super().on_global_var_update(global_vars)
        if not self.epsilon_pinned:
            self.epsilon = self._scheduled_epsilon(self.global_timestep)

    # -- state -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Adds the target weights and the exploration state."""
        return {
            **super().get_state(),
            "target_weights": self.get_target_weights(),
            "epsilon": self.epsilon,
            "epsilon_pinned": self.epsilon_pinned,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores the target weights and the exploration state too."""
        super().set_state(state)
        self.set_target_weights(state["target_weights"])
        self.epsilon = float(state["epsilon"])
        self.epsilon_pinned = bool(state["epsilon_pinned"])


def _update_target(evaluator: PolicyEvaluator) -> None:
    evaluator.foreach_policy(lambda policy, _pid: policy.update_target())


def _set_target_weights(weights: Weights, evaluator: PolicyEvaluator) -> None:
    evaluator.foreach_policy(lambda policy, _pid: policy.set_target_weights(weights))


class DQNTrainer(Trainer):
    """DQN on the ``replay`` optimizer (default), ``apex`` or ``async`` (gradients of
    fresh samples).

    Between optimizer steps it updates the target network of every evaluator's policy
    (the learner's, and the replicas' that compute gradients or initial priorities) each
    ``target_network_update_freq`` sampled env steps.
    """

    name = "DQN"
    config_class = DQNConfig
    policy_class = DQNPolicy

    def __init__(self, config: Any = None, env: Any = None):
        super().__init__(config, env)
        self.last_target_update = 0
        """``num_steps_sampled`` at the last target network update."""

    def update_target_if_due(self) -> bool:
        """Update every evaluator's target network if it is due; True if it was."""
        sampled = self.optimizer.num_steps_sampled
        if sampled - self.last_target_update < self.config.target_network_update_freq:
            return False
        self.evaluators.foreach_evaluator(_update_target)
        self.last_target_update = sampled
        return True

    def result_extras(self) -> dict[str, Any]:
        """``epsilon``: the schedule's value (evaluators pinned to a ladder by ``apex``
        report theirs as the optimizer's ``epsilon_min`` / ``epsilon_max``)."""
        return {"epsilon": self.get_policy().epsilon}

    def after_optimizer_step(self, learner_stats: LearnerStats) -> None:
        """Between optimizer steps: update the target networks when due."""
        self.update_target_if_due()

    def get_state(self) -> dict[str, Any]:
        """Adds the timestep of the last target update."""
        return {**super().get_state(), "dqn": {"last_target_update": self.last_target_update}}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Also gives every replica the restored target network."""
        super().set_state(state)
        self.last_target_update = int(state.get("dqn", {}).get("last_target_update", 0))
        if self.evaluators.remote_evaluators:
            weights = self.get_policy().get_target_weights()
            self.evaluators.foreach_evaluator(functools.partial(_set_target_weights, weights))


@dataclasses.dataclass
class ApexDQNConfig(DQNConfig):
    """The ``APEX`` preset: DQN on the ``apex`` optimizer with Ape-X trainer defaults.

    Evaluators explore with the ladder ``epsilon_base ** (1 + epsilon_alpha i / (N-1))``
    instead of the schedule; the defaults learn CartPole-v1 with 0 or 2 evaluators.
    """

    default_optimizer = "apex"

    rollout_fragment_length: int = 16
    """Env steps per sub-env per sample (a batch pushed to a replay shard)."""
    num_envs_per_evaluator: int = 4
    """Sub-envs per evaluator."""
    timesteps_per_iteration: int = 0
    """Each ``train()`` repeats ``apex`` steps (``min_step_time_s`` each) until this many
    env steps were sampled (0: one step)."""
    target_network_update_freq: int = 5000
    """Sampled env steps between target network updates (checked between apex steps)."""


class ApexTrainer(DQNTrainer):
    """Ape-X DQN: the ``APEX`` preset of DQN (``ApexDQNConfig``)."""

    name = "APEX"
    config_class = ApexDQNConfig
