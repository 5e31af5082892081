"""A2C / A3C: advantage actor-critic, synchronous (A2C) or with asynchronous gradients (A3C).

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning",
https://arxiv.org/abs/1602.01783 (Algorithm S3: n-step returns, entropy bonus, shared
optimizer); A2C is its synchronous variant (Wu et al. 2017, ACKTR paper, §5).  Advantages
are n-step bootstrapped returns minus V(s) (``use_gae=False``; n = the rollout fragment)
or GAE (Schulman et al. 2016).  RLlib (ICML 2018) §3.4: A3C is this policy graph on the
``async`` optimizer; A2C the same graph on a synchronous one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from hierl.algorithms.pg import PGConfig, PGPolicy
from hierl.algorithms.trainer import Trainer
from hierl.algorithms.trainer_config import same_defaults
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import TensorBatch

A2C_OPTIMIZERS = ("local", "multi_gpu", "allreduce", "auto")
"""The synchronous strategies A2C runs on."""


@dataclasses.dataclass
class A2CConfig(PGConfig):
    """A2C settings: many small synchronous updates on short fragments.

    ``train_batch_size`` (160 by default) is the env steps per update.
    """

    supported_optimizers = A2C_OPTIMIZERS
    optimizer_defaults = {
        **same_defaults(A2C_OPTIMIZERS, train_batch_size=160),
        "auto": {"train_batch_size": 160, "candidates": A2C_OPTIMIZERS[:-1]},
    }

    lr: float = 1e-3
    """Learning rate (Adam)."""
    num_envs_per_evaluator: int = 8
    """Sub-envs per evaluator."""
    rollout_fragment_length: int = 20
    """Steps per sub-env per sample; also the n of the n-step returns."""
    use_gae: bool = True
    """GAE advantages (else n-step bootstrapped returns minus V(s))."""
    lambda_: float = 1.0
    """GAE lambda (1.0: n-step returns minus the baseline, with bootstrapping)."""
    entropy_coeff: float = 0.01
    """Weight of the entropy bonus."""
    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""
    normalize_advantages: bool = False
    """Standardise advantages within each batch."""
    grad_clip: float | None = 40.0
    """Global gradient-norm clip."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("lambda_", 0.0 <= self.lambda_ <= 1.0, "must be in [0, 1]")
        self.check("entropy_coeff", self.entropy_coeff >= 0, "must be >= 0")
        self.check("vf_loss_coeff", self.vf_loss_coeff >= 0, "must be >= 0")


@dataclasses.dataclass
class A3CConfig(A2CConfig):
    """A3C settings: A2C's, with remote evaluators and longer iterations by default.

    ``train_batch_size`` (2000 by default) is the env steps per iteration: gradients are
    applied until this many arrived.
    """

    supported_optimizers = ("async", "sharded_ps", "allreduce")
    default_optimizer = "async"
    optimizer_defaults = same_defaults(supported_optimizers, train_batch_size=2000)

    num_evaluators: int = 2
    """Remote evaluators, each computing gradients on its own samples."""


class A2CPolicy(PGPolicy):
    """PG's loss plus an entropy bonus, on n-step or GAE advantages."""

    def postprocess_trajectories(self, batch: SampleBatch) -> SampleBatch:
        """GAE or n-step advantages for all segments; terminal states are not bootstrapped."""
        cfg = self.config
        boot = self.bootstrap_values(batch)
        return compute_advantages(batch, boot, cfg.gamma, cfg.lambda_, use_gae=cfg.use_gae)

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """``-E[log pi(a|s) A] + c_v E[(V(s) - R)^2] - c_e H[pi(.|s)]``."""
        dist_inputs, values = self.model_outputs(batch)  # recurrent: over sequences
        dist = self.dist_class(dist_inputs)
        total, stats = self.policy_gradient_loss(batch, dist, values)
        entropy = dist.entropy().mean()
        total = total - self.config.entropy_coeff * entropy
        return total, {**stats, "entropy": entropy.detach()}


class A2CTrainer(Trainer):
    """A2C: synchronous sampling and updates (``local`` by default)."""

    name = "A2C"
    config_class = A2CConfig
    policy_class = A2CPolicy


class A3CTrainer(Trainer):
    """A3C: each evaluator's gradient is applied as it arrives (``async`` by default)."""

    name = "A3C"
    config_class = A3CConfig
    policy_class = A2CPolicy
