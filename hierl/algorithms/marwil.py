"""MARWIL and BC: imitation of logged actions, weighted by their advantage.

Wang et al. 2018, "Exponentially Weighted Imitation Learning for Batched Historical
Data" (NeurIPS): maximise ``E[exp(beta * A(s, a) / c) log pi(a|s)]`` over logged
``(s, a)`` pairs, where ``A = R - V(s)`` is the logged discounted return minus a learned
value function and ``c`` a running root-mean-square of ``A`` (RLlib's normaliser:
``c^2 <- c^2 + rate * (mean(A^2) - c^2)``, moved by each batch before it weighs it, as in
RLlib).  ``beta = 0`` is behaviour cloning (BC).

Two departures from RLlib's MARWIL, both only where it fails: the exponent
``beta * A / c`` is clipped at ``max_weight_exponent`` (20) before ``exp``: RLlib does not
clip, and one advantage outlier (~1e4) then overflows float32 to an inf weight; AWR
(Peng et al. 2019, §5) and d3rlpy's AWR clip the weight itself, at 20.  And ``c^2`` is
committed only when the update is applied (``after_update``): a refused update (a
non-finite loss or gradient) leaves it as it was, and under ``multi_gpu`` it moves once
per update, from the rows of every tower.

Both train from ``input`` (logged data, ``hierl.evaluators.offline``); the returns
are computed as the data is read (``postprocess_inputs``; episodes cut by a fragment
boundary are bootstrapped with the current value function).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from hierl.algorithms.trainer import Trainer
from hierl.algorithms.trainer_config import TrainerConfig, same_defaults
from hierl.config import ConfigError
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import TensorBatch, TorchPolicyGraph

MARWIL_OPTIMIZERS = ("local", "multi_gpu")
"""Synchronous SGD over each batch read (the normaliser is one running statistic)."""
MARWIL_SGD = {"train_batch_size": 2000, "num_sgd_iter": 1, "sgd_minibatch_size": 128}


@dataclasses.dataclass
class MARWILConfig(TrainerConfig):
    """MARWIL settings: RLlib's defaults (beta 1, 2000-row batches, ``c^2`` starting at 100
    and moving at 1e-8 per update) except the learning rate, 1e-3 where RLlib has 1e-4
    (see ``lr`` for why)."""

    supported_optimizers = MARWIL_OPTIMIZERS
    optimizer_defaults = same_defaults(MARWIL_OPTIMIZERS, **MARWIL_SGD)

    lr: float = 1e-3
    """Learning rate (Adam).  RLlib's MARWIL has 1e-4, with which the learning test
    (``tests/test_offline_learning.py``: a sampled return of 200 from expert plus random
    CartPole data within 400k rows read) fails: best 97.3 at 400k rows on seed 0
    (2026-11-27); with 1e-3 it reaches 200 after 40k-120k rows on seeds 0-4
    (``tests/LEARNING.md``)."""
    beta: float = 1.0
    """Advantage weighting temperature; 0 is behaviour cloning."""
    vf_loss_coeff: float = 1.0
    """Weight of the value function's squared error (unused when beta is 0)."""
    moving_average_sqd_adv_norm_start: float = 100.0
    """Initial value of the running mean of squared advantages."""
    moving_average_sqd_adv_norm_update_rate: float = 1e-8
    """Its update rate per update (RLlib's default: ``c`` stays near its start, 10).  A
    faster rate makes ``c`` track the data's RMS advantage; 1e-2 (hierl's default before
    2026-11-27) moved ``c`` from 14 to 80 over 100 batches and needed 110k-210k rows on
    the learning test's seeds 0-4 where 1e-8 needs 40k-120k."""
    max_weight_exponent: float = 20.0
    """The exponent ``beta * A / c`` is clipped to at most this before ``exp`` (weights
    <= e^20 ~ 4.9e8): float32 ``exp`` overflows past 88.7, so one outlier advantage would
    make an inf weight and a NaN gradient.  High enough to leave ordinary data alone
    (CartPole's discounted returns stay under 100 and ``c`` starts at 10); AWR's clip
    at weight 20 would be ``log(20) ~ 3.0`` here."""
    postprocess_inputs: bool = True
    """Compute the discounted returns as logged data is read."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("beta", self.beta >= 0, "must be >= 0")
        self.check("vf_loss_coeff", self.vf_loss_coeff >= 0, "must be >= 0")
        self.check("max_weight_exponent", self.max_weight_exponent > 0, "must be > 0")


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
        ``w = exp(min(beta * (R - V(s)) / c, max_weight_exponent))`` (``w = 1`` for BC),
        ``c^2`` moved by this batch first (committed by ``after_update``)."""
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
            sqd_adv_mean = float((adv**2).mean())
            norm = self._moved_norm(sqd_adv_mean)  # not stored: see after_update
            # CRUCIAL: clip the exponent, not the weight: exp overflows float32 past 88.7.
            exponent = (cfg.beta * adv / (1e-8 + norm**0.5)).clamp(max=cfg.max_weight_exponent)
            weights = torch.exp(exponent)
            policy_loss = -(weights * logp).mean()
            vf_loss = 0.5 * ((values - returns) ** 2).mean()
            total = policy_loss + cfg.vf_loss_coeff * vf_loss
            stats = {
                "vf_loss": vf_loss.detach(),
                "mean_weight": weights.mean(),
                "ma_sqd_adv_norm": norm,
                "sqd_adv_mean": sqd_adv_mean,
            }
        stats["policy_loss"] = policy_loss.detach()
        stats["logp_mean"] = logp.detach().mean()
        return total, stats

    def _moved_norm(self, sqd_adv_mean: float) -> float:
        """``c^2 + rate * (mean(A^2) - c^2)``: the normaliser moved by one update."""
        rate = self.config.moving_average_sqd_adv_norm_update_rate
        return self.ma_sqd_adv_norm + rate * (sqd_adv_mean - self.ma_sqd_adv_norm)

    def after_update(self, stats: Mapping[str, float]) -> None:
        """Commit ``c^2`` from the applied update's ``mean(A^2)`` (under ``multi_gpu``
        the mean over every tower's rows)."""
        if "sqd_adv_mean" in stats:
            self.ma_sqd_adv_norm = self._moved_norm(stats["sqd_adv_mean"])

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
