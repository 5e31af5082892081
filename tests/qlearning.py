"""A minimal DQN-style PolicyGraph and Trainer for the replay optimizer tests.

Double DQN (van Hasselt et al. 2016) with a Huber TD loss weighted by the replay's
importance weights, a periodically copied target network and linear epsilon-greedy
exploration (Mnih et al. 2015).  It is the pattern for the full DQN algorithm.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import hierl.optimizers.replay  # noqa: F401  (registers "replay")
from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.models import MLP, Categorical, ModelConfig, get_preprocessor
from hierl.policy_graph import LearnResult
from hierl.sample_batch import SampleBatch as SB
from hierl.torch_policy_graph import TensorBatch, TorchPolicyGraph, piecewise_linear


@dataclasses.dataclass
class QConfig(TrainerConfig):
    """Q-learning settings; the defaults learn CartPole-v1 with the ``replay`` optimizer."""

    lr: float = 2e-3
    gamma: float = 0.98
    train_batch_size: int = 64
    """Rows per replayed batch."""
    rollout_fragment_length: int = 8
    num_envs_per_evaluator: int = 2
    grad_clip: float | None = 10.0
    model: ModelConfig = dataclasses.field(
        default_factory=lambda: ModelConfig(hiddens=(64, 64), activation="relu")
    )
    epsilon_timesteps: int = 10_000
    """Sampled timesteps over which epsilon falls linearly from 1 to ``final_epsilon``."""
    final_epsilon: float = 0.02
    target_network_update_freq: int = 100
    """Learner updates between copies of the online network into the target network."""
    double_q: bool = True
    """Evaluate the target network at the online network's argmax action."""


class QNetwork(nn.Module):
    """MLP of Q-values; ``forward`` returns ``(q_values, max_a q)`` = (dist inputs, values)."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, config: ModelConfig):
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"Q-learning needs a Discrete action space, got {action_space}")
        size = get_preprocessor(obs_space).size
        self.q = MLP(size, config.hiddens, config.activation, out_size=int(action_space.n))
        self.dist_class = Categorical

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q(obs.float())
        return q, q.max(-1).values


class QPolicy(TorchPolicyGraph):
    """Epsilon-greedy Q-learning policy with a target network."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.epsilon = 1.0
        self.epsilon_pinned = False
        self.num_updates = 0
        self._td_error: np.ndarray | None = None

    def make_model(self) -> nn.Module:
        return QNetwork(self.observation_space, self.action_space, self.config.model)

    @torch.no_grad()
    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        q, _ = self.model(torch.as_tensor(obs_batch, device=self.device))
        actions = q.argmax(-1).cpu()
        if explore:  # torch's global RNG: seeded per evaluator
            explore_rows = torch.rand(len(actions)) < self.epsilon
            random_actions = torch.randint(0, q.shape[-1], actions.shape)
            actions = torch.where(explore_rows, random_actions, actions)
        return actions.numpy(), [], {}

    def _td(self, batch: TensorBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(s, a), 1-step target)`` for every row."""
        q = self.model(batch[SB.OBS])[0]
        q_taken = q.gather(1, batch[SB.ACTIONS].long()[:, None]).squeeze(1)
        with torch.no_grad():
            q_next_target = self.target_model(batch[SB.NEW_OBS])[0]
            q_next_select = self.model(batch[SB.NEW_OBS])[0] if self.config.double_q else None
            a_next = (q_next_select if q_next_select is not None else q_next_target).argmax(1)
            q_next = q_next_target.gather(1, a_next[:, None]).squeeze(1)
            # CRUCIAL: only termination stops bootstrapping; truncated steps bootstrap.
            not_terminal = 1.0 - batch[SB.TERMINATEDS].float()
            target = batch[SB.REWARDS] + self.config.gamma * not_terminal * q_next
        return q_taken, target

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """Huber TD loss weighted by ``PRIO_WEIGHTS`` (all 1 when absent)."""
        q_taken, target = self._td(batch)
        weights = batch.get(SB.PRIO_WEIGHTS, torch.ones_like(target))
        loss = (weights * F.huber_loss(q_taken, target, reduction="none")).mean()
        td = (q_taken - target).detach()
        self._td_error = td.cpu().numpy()
        return loss, {"mean_q": q_taken.detach().mean(), "mean_abs_td_error": td.abs().mean()}

    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        stats = super().learn_on_batch(batch)
        self.num_updates += 1
        if self.num_updates % self.config.target_network_update_freq == 0:
            self.target_model.load_state_dict(self.model.state_dict())
        return stats

    def learn_on_replay_batch(self, batch: SB) -> LearnResult:
        stats = self.learn_on_batch(batch)
        return LearnResult(stats, self._td_error)

    @torch.no_grad()
    def compute_priorities(self, batch: SB) -> np.ndarray:
        q_taken, target = self._td(self.to_tensors(batch))
        return (q_taken - target).abs().cpu().numpy() + 1e-6

    def set_epsilon(self, epsilon: float) -> None:
        """Pin epsilon (Ape-X's per-evaluator ladder); the schedule no longer changes it."""
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon, self.epsilon_pinned = float(epsilon), True

    def on_global_var_update(self, global_vars: Mapping[str, Any]) -> None:
        super().on_global_var_update(global_vars)
        if not self.epsilon_pinned:
            schedule = ((0, 1.0), (self.config.epsilon_timesteps, self.config.final_epsilon))
            self.epsilon = piecewise_linear(schedule, self.global_timestep)

    def set_weights(self, weights) -> None:
        # Replicas that never learn compute priorities with target = the latest weights.
        super().set_weights(weights)
        self.target_model.load_state_dict(self.model.state_dict())

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        target = {k: v.cpu().numpy().copy() for k, v in self.target_model.state_dict().items()}
        state.update(target_weights=target, epsilon=self.epsilon, num_updates=self.num_updates)
        state["epsilon_pinned"] = self.epsilon_pinned
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        target = {k: torch.as_tensor(np.asarray(v)) for k, v in state["target_weights"].items()}
        self.target_model.load_state_dict(target)
        self.epsilon, self.epsilon_pinned = float(state["epsilon"]), bool(state["epsilon_pinned"])
        self.num_updates = int(state["num_updates"])


class QTrainer(Trainer):
    """Q-learning on the ``replay`` (default) or ``apex`` optimizer."""

    name = "QTEST"
    config_class = QConfig
    policy_class = QPolicy
    supported_optimizers = ("replay", "apex")
    default_optimizer = "replay"


def padded_cartpole(env_config: Mapping[str, Any]) -> gym.Env:
    """CartPole-v1 with its observation zero-padded to ``env_config["obs_size"]`` floats.

    Same dynamics, heavier rows: makes memory per replayed row large enough to measure.
    """
    size = int(env_config.get("obs_size", 1024))
    space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def pad(obs: np.ndarray) -> np.ndarray:
        out = np.zeros(size, np.float32)
        out[: obs.shape[0]] = obs
        return out

    return gym.wrappers.TransformObservation(gym.make("CartPole-v1"), pad, space)
