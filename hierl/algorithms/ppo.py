"""PPO: proximal policy optimization with the clipped surrogate and GAE.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms",
https://arxiv.org/abs/1707.06347 (clipped objective, §3; adaptive KL penalty, §4).
Implementation details follow "The 37 Implementation Details of PPO" (Huang et al. 2022):
per-minibatch advantage normalisation, optional value clipping, global grad-norm clip.

Recurrent PPO is the same trainer with ``model.use_lstm=True``: the loss unrolls the LSTM
over sequences of at most ``model.max_seq_len`` steps (truncated BPTT, as in RLlib's
recurrent PPO), each started from the state recorded while sampling; padded steps are
excluded from every mean (policy, value, entropy, KL).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from hierl.algorithms.ppo_numpy import numpy_ppo_grads
from hierl.algorithms.trainer import Trainer
from hierl.algorithms.trainer_config import TrainerConfig, same_defaults
from hierl.models.distributions import DiagGaussian
from hierl.models.numpy_acting import NumpyActor
from hierl.policy_graph import LearnerStats, PolicyGraph
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import (
    TensorBatch,
    TorchPolicyGraph,
    standardize,
)

PPO_OPTIMIZERS = ("local", "multi_gpu", "allreduce", "auto")
"""The strategies PPO runs on (those that run SGD epochs over each batch)."""
PPO_SGD = {"train_batch_size": 1024, "num_sgd_iter": 10, "sgd_minibatch_size": 256}
"""PPO's batch, epochs and minibatch under each of them."""


@dataclasses.dataclass
class PPOConfig(TrainerConfig):
    """PPO settings.  The defaults solve the classic-control tasks without flags.

    Under every strategy: 1024 env steps per iteration (``train_batch_size``), 10 epochs
    over them (``num_sgd_iter``) in minibatches of 256 rows (``sgd_minibatch_size``).
    """

    supported_optimizers = PPO_OPTIMIZERS
    optimizer_defaults = {
        **same_defaults(PPO_OPTIMIZERS, **PPO_SGD),
        "auto": {**PPO_SGD, "candidates": PPO_OPTIMIZERS[:-1]},
    }

    lr: float = 2e-3
    """Learning rate (Adam)."""
    num_envs_per_evaluator: int = 16
    """Sub-envs per evaluator."""
    lambda_: float = 0.95
    """GAE lambda."""
    use_gae: bool = True
    """Use GAE advantages (else bootstrapped returns minus V(s))."""
    clip_param: float = 0.2
    """Surrogate clipping epsilon."""
    vf_clip_param: float | None = None
    """Clip value updates to ``vf_preds ± vf_clip_param`` (None: no value clipping)."""
    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus."""
    kl_coeff: float = 0.0
    """Initial KL penalty coefficient; > 0 turns on the adaptive KL penalty."""
    kl_target: float = 0.01
    """Target KL for the adaptive penalty (coefficient x1.5 above 2x, x0.5 below 0.5x)."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    grad_clip: float | None = 0.5
    """Global gradient-norm clip."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("clip_param", self.clip_param > 0, "must be > 0")
        self.check("lambda_", 0.0 <= self.lambda_ <= 1.0, "must be in [0, 1]")
        self.check("kl_coeff", self.kl_coeff >= 0, "must be >= 0")
        self.check("kl_target", self.kl_target > 0, "must be > 0")
        self.check("vf_clip_param", self.vf_clip_param is None or self.vf_clip_param > 0, "> 0")


def clipped_surrogate_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_param: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's ``-E[min(r A, clip(r, 1 - eps, 1 + eps) A)]`` and the fraction of rows whose
    ratio lies outside the clip range (no gradient)."""
    clipped = torch.clamp(ratio, 1 - clip_param, 1 + clip_param)
    surrogate = torch.min(ratio * advantages, clipped * advantages)
    with torch.no_grad():
        clip_frac = ((ratio - 1).abs() > clip_param).float().mean()
    return -surrogate.mean(), clip_frac


class PPOPolicy(TorchPolicyGraph):
    """PPO's act (Gaussian/categorical), GAE postprocessing and clipped-surrogate loss."""

    def __init__(self, observation_space, action_space, config: PPOConfig, model=None):
        super().__init__(observation_space, action_space, config, model)
        self.kl_coeff = config.kl_coeff
        self._numpy_learner = self._make_numpy_learner()

    def _make_numpy_learner(self) -> NumpyActor | None:
        """A numpy mirror of the model to learn through (``hierl.algorithms.ppo_numpy``)
        when ``model.numpy_learning`` is on, the actions are Gaussian and this class's loss
        is PPOPolicy's own; else None."""
        if not self.model_config.numpy_learning or self.dist_class is not DiagGaussian:
            return None
        if type(self).loss is not PPOPolicy.loss:
            return None
        # the acting mirror when there is one: the same views of the same weights
        return self._numpy_actor or NumpyActor.mirror(self.model)

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One update: through numpy when ``_make_numpy_learner`` allowed it (and the
        KL penalty is off and the weights still back the mirror), else through torch."""
        learner = self._numpy_learner
        if (
            learner is None
            or self.kl_coeff > 0
            or SampleBatch.SEQ_LENS in batch
            or not learner.is_current()
        ):
            return super().learn_on_batch(batch)
        total, stats, grads = numpy_ppo_grads(learner, self.config, batch)
        for param, grad in grads:
            param.grad = torch.from_numpy(grad)
        return self.step_if_finite({**stats, "total_loss": total, **self._clipped_norm()}, batch)

    def postprocess_trajectory(self, batch, other_agent_batches=None):
        """GAE; bootstraps from V(final obs) unless the segment ended in termination."""
        return self.postprocess_trajectories(batch)

    def postprocess_trajectories(self, batch: SampleBatch) -> SampleBatch:
        """GAE for all segments of a fragment at once (one batched value pass)."""
        cfg = self.config
        boot = self.bootstrap_values(batch)
        return compute_advantages(batch, boot, cfg.gamma, cfg.lambda_, use_gae=cfg.use_gae)

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """Clipped surrogate + value loss - entropy bonus (+ adaptive KL penalty)."""
        cfg = self.config
        # Recurrent models: truncated BPTT over the batch's sequences, padding dropped.
        dist_inputs, values = self.model_outputs(batch)
        dist = self.dist_class(dist_inputs)
        logp = dist.logp(batch[SampleBatch.ACTIONS])
        ratio = torch.exp(logp - batch[SampleBatch.ACTION_LOGP])
        adv = batch[SampleBatch.ADVANTAGES]
        if cfg.normalize_advantages:
            adv = standardize(adv)
        policy_loss, clip_frac = clipped_surrogate_loss(ratio, adv, cfg.clip_param)
        targets = batch[SampleBatch.VALUE_TARGETS]
        vf_loss = (values - targets) ** 2
        if cfg.vf_clip_param:
            old = batch[SampleBatch.VF_PREDS]
            clipped = old + torch.clamp(values - old, -cfg.vf_clip_param, cfg.vf_clip_param)
            vf_loss = torch.max(vf_loss, (clipped - targets) ** 2)
        vf_loss = 0.5 * vf_loss.mean()
        total = policy_loss + cfg.vf_loss_coeff * vf_loss
        # Entropy and KL enter the graph only when they are weighted (cheaper backward).
        with torch.set_grad_enabled(cfg.entropy_coeff > 0):
            entropy = dist.entropy().mean()
        with torch.set_grad_enabled(self.kl_coeff > 0):
            kl = self.dist_class(batch[SampleBatch.ACTION_DIST_INPUTS]).kl(dist).mean()
        if cfg.entropy_coeff > 0:
            total = total - cfg.entropy_coeff * entropy
        if self.kl_coeff > 0:
            total = total + self.kl_coeff * kl
        return total, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": entropy.detach(),
            "kl": kl.detach(),
            "clip_frac": clip_frac,
            "kl_coeff": self.kl_coeff,
        }

    def update_kl(self, sampled_kl: float) -> float:
        """Adapt the KL coefficient towards ``kl_target`` (PPO paper §4); returns it."""
        if self.kl_coeff > 0:
            if sampled_kl > 2.0 * self.config.kl_target:
                self.kl_coeff *= 1.5
            elif sampled_kl < 0.5 * self.config.kl_target:
                self.kl_coeff *= 0.5
        return self.kl_coeff

    def get_state(self) -> dict[str, Any]:
        """Adds the current KL coefficient."""
        return {**super().get_state(), "kl_coeff": self.kl_coeff}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores the KL coefficient too."""
        super().set_state(state)
        self.kl_coeff = float(state.get("kl_coeff", self.kl_coeff))


class PPOTrainer(Trainer):
    """PPO on the ``local`` optimizer (minibatch SGD epochs on the driver)."""

    name = "PPO"
    config_class = PPOConfig
    policy_class = PPOPolicy

    def after_optimizer_step(self, learner_stats: LearnerStats) -> None:
        """Adapt each policy's KL coefficient from its own epoch-mean KL."""
        kls = {pid: stats["kl"] for pid, stats in learner_stats.items() if "kl" in stats}
        if not any(getattr(self.get_policy(pid), "kl_coeff", 0) > 0 for pid in kls):
            return

        def update(policy: PolicyGraph, policy_id: str) -> None:
            if policy_id in kls and isinstance(policy, PPOPolicy):
                policy.update_kl(kls[policy_id])

        # every replica: with allreduce the evaluators compute the loss too
        self.evaluators.foreach_evaluator(lambda ev: ev.foreach_policy(update))
