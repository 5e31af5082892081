"""PG: REINFORCE with a learned value baseline.

Williams 1992, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning"; the baseline as in Sutton & Barto §13.4.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from hierl.algorithms.trainer import Trainer
from hierl.algorithms.trainer_config import TrainerConfig, same_defaults
from hierl.models.distributions import ActionDistribution
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import TensorBatch, TorchPolicyGraph, standardize

PG_OPTIMIZERS = ("local", "multi_gpu", "allreduce", "async", "sharded_ps", "auto")
"""The strategies PG runs on (any gradient strategy: its loss allows them all)."""


@dataclasses.dataclass
class PGConfig(TrainerConfig):
    """PG settings (defaults solve CartPole-v1 to ~200 in well under a minute)."""

    supported_optimizers = PG_OPTIMIZERS
    # env steps per update; auto compares every gradient strategy (its default)
    optimizer_defaults = same_defaults(PG_OPTIMIZERS, train_batch_size=2000)

    lr: float = 0.004
    """Learning rate (Adam)."""
    num_envs_per_evaluator: int = 8
    """Sub-envs per evaluator."""
    vf_loss_coeff: float = 0.5
    """Weight of the baseline's squared error."""
    normalize_advantages: bool = True
    """Standardise returns-minus-baseline within each batch."""


class PGPolicy(TorchPolicyGraph):
    """Policy gradient with Monte-Carlo returns (bootstrapped at cuts) minus V(s)."""

    def postprocess_trajectory(self, batch, other_agent_batches=None):
        """Discounted returns (bootstrapped at cuts) minus the value baseline."""
        return self.postprocess_trajectories(batch)

    def postprocess_trajectories(self, batch: SampleBatch) -> SampleBatch:
        """Returns for all segments at once."""
        boot = self.bootstrap_values(batch)
        return compute_advantages(batch, boot, self.config.gamma, use_gae=False)

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """``-E[log pi(a|s) A] + c * E[(V(s) - R)^2]``."""
        dist_inputs, values = self.model_outputs(batch)  # recurrent: over sequences
        return self.policy_gradient_loss(batch, self.dist_class(dist_inputs), values)

    def policy_gradient_loss(
        self, batch: TensorBatch, dist: ActionDistribution, values: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The loss of ``loss`` given the model's action distribution and values."""
        logp = dist.logp(batch[SampleBatch.ACTIONS])
        adv = batch[SampleBatch.ADVANTAGES]
        if self.config.normalize_advantages:
            adv = standardize(adv)
        policy_loss = -(logp * adv).mean()
        vf_loss = ((values - batch[SampleBatch.VALUE_TARGETS]) ** 2).mean()
        total = policy_loss + self.config.vf_loss_coeff * vf_loss
        return total, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach()}


class PGTrainer(Trainer):
    """Vanilla policy gradient on the ``local`` optimizer."""

    name = "PG"
    config_class = PGConfig
    policy_class = PGPolicy
