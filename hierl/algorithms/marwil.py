"""MARWIL and BC: imitation of logged actions, weighted by their advantage.

Wang et al. 2018, "Exponentially Weighted Imitation Learning for Batched Historical
Data" (NeurIPS): maximise ``E[exp(beta * A(s, a) / c) log pi(a|s)]`` over logged
``(s, a)`` pairs, where ``A = R - V(s)`` is the logged discounted return minus a learned
value function and ``c`` a running root-mean-square of ``A`` (RLlib's normaliser:
``c^2 <- c^2 + rate * (mean(A^2) - c^2)``).  ``beta = 0`` is behaviour cloning (BC).

Both train from ``input`` (logged data, :mod:`hierl.evaluators.offline`); the returns
are computed as the data is read (``postprocess_inputs``; episodes cut by a fragment
boundary are bootstrapped with the current value function).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from hierl.algorithms.trainer import Trainer, TrainerConfig, same_defaults
from hierl.config import ConfigError
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import TensorBatch, TorchPolicyGraph

MARWIL_OPTIMIZERS = ("local", "multi_gpu")
"""Synchronous SGD over each batch read (the normaliser is one running statistic)."""
MARWIL_SGD = {"train_batch_size": 2000, "num_sgd_iter": 1, "sgd_minibatch_size": 128}


@dataclasses.dataclass
class MARWILConfig(TrainerConfig):
    """MARWIL settings: RLlib's defaults (beta 1, lr 1e-4, 2000-row batches)."""

    supported_optimizers = MARWIL_OPTIMIZERS
    optimizer_defaults = same_defaults(MARWIL_OPTIMIZERS, **MARWIL_SGD)

    lr: float = 1e-3
    """Learning rate (Adam)."""
    beta: float = 1.0
    """Advantage weighting temperature; 0 is behaviour cloning."""
    vf_loss_coeff: float = 1.0
    """Weight of the value function's squared error (unused when beta is 0)."""
    moving_average_sqd_adv_norm_start: float = 100.0
    """Initial value of the running mean of squared advantages."""
    moving_average_sqd_adv_norm_update_rate: float = 1e-2
    """Its update rate per batch."""
    postprocess_inputs: bool = True
    """Compute the discounted returns as logged data is read."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("beta", self.beta >= 0, "must be >= 0")
        self.check("vf_loss_coeff", self.vf_loss_coeff >= 0, "must be >= 0")


@dataclasses.dataclass
class BCConfig(MARWILConfig):
    """Behaviour cloning: MARWIL with ``beta = 0`` (the value function is not trained)."""

    beta: float = 0.0
    """0: every logged action weighs the same."""
    postprocess_inputs: bool = False
    """BC needs no returns."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("beta", self.beta == 0, "BC has beta 0 (use MARWIL for beta > 0)")


class MARWILPolicy(TorchPolicyGraph):
    """Advantage-weighted log-likelihood of the logged actions, plus a value loss."""

    def __init__(self, observation_space, action_space, config) -> None:
        super().__init__(observation_space, action_space, config)
        self.ma_sqd_adv_norm = float(config.moving_average_sqd_adv_norm_start)

    def postprocess_trajectories(self, batch: SampleBatch) -> SampleBatch:
        """VALUE_TARGETS: the discounted returns of each run (bootstrapped with V at
        cuts that did not terminate)."""
        boot = self.bootstrap_values(batch) if self.config.beta > 0 else 0.0
        return compute_advantages(batch, boot, self.config.gamma, use_gae=False, use_critic=False)

    def postprocess_trajectory(self, batch, other_agent_batches=None):
        """As ``postprocess_trajectories`` for one run."""
        return self.postprocess_trajectories(batch)

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """``-E[w log pi(a|s)] + vf_loss_coeff * E[(V(s) - R)^2] / 2`` with
        ``w = exp(beta * (R - V(s)) / c)`` (``w = 1`` for BC)."""
        cfg = self.config
        dist_inputs, values = self.model_outputs(batch)
        logp = self.dist_class(dist_inputs).logp(batch[SampleBatch.ACTIONS])
        stats: dict[str, Any] = {}
        if cfg.beta == 0:
            policy_loss = -logp.mean()
            total = policy_loss
        else:
            returns = batch[SampleBatch.VALUE_TARGETS]
            adv = returns - values.detach()
            self.ma_sqd_adv_norm += cfg.moving_average_sqd_adv_norm_update_rate * (
                float((adv**2).mean()) - self.ma_sqd_adv_norm
            )
            weights = torch.exp(cfg.beta * adv / (1e-8 + self.ma_sqd_adv_norm**0.5))
            policy_loss = -(weights * logp).mean()
            vf_loss = 0.5 * ((values - returns) ** 2).mean()
            total = policy_loss + cfg.vf_loss_coeff * vf_loss
            stats = {
                "vf_loss": vf_loss.detach(),
                "mean_weight": weights.mean(),
                "ma_sqd_adv_norm": self.ma_sqd_adv_norm,
            }
        stats["policy_loss"] = policy_loss.detach()
        stats["logp_mean"] = logp.detach().mean()
        return total, stats

    def get_state(self) -> dict[str, Any]:
        """Weights, optimizer state and the advantage normaliser."""
        return {**super().get_state(), "ma_sqd_adv_norm": self.ma_sqd_adv_norm}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        super().set_state(state)
        self.ma_sqd_adv_norm = float(state.get("ma_sqd_adv_norm", self.ma_sqd_adv_norm))


class MARWILTrainer(Trainer):
    """MARWIL on logged data (``input``)."""

    name = "MARWIL"
    config_class = MARWILConfig
    policy_class = MARWILPolicy

    def train(self) -> dict[str, Any]:
        """One iteration on logged data.  A trainer without it (``input: sampler``) can
        act, e.g. rebuilt from a checkpoint to roll out, export or serve its policy, but
        not train: imitating its own samples teaches nothing."""
        if self.config.input_spec() is None:
            raise ConfigError(
                f"{self.name} learns from logged data: config field 'input' = 'sampler' is "
                "not valid; give a directory, glob or list of files written with 'output' "
                "(or a ray.data.Dataset), or an input_mix"
            )
        return super().train()


class BCTrainer(MARWILTrainer):
    """Behaviour cloning on logged data (``input``)."""

    name = "BC"
    config_class = BCConfig
    policy_class = MARWILPolicy
