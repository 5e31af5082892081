"""IMPALA and APPO: actor-critic on V-trace targets, on the ``aso`` pipeline.

IMPALA: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures", https://arxiv.org/abs/1802.01561 (§4: V-trace
value targets and policy-gradient advantages, §4.2: the actor-critic loss).  Evaluators
sample with weights a few learner updates old; the loss evaluates the learner's policy
and values on the batch and corrects with truncated importance weights
(``hierl.postprocessing.vtrace``).

APPO (RLlib's asynchronous PPO): PPO's clipped surrogate (Schulman et al. 2017) on
V-trace advantages, over the same pipeline; optionally against a target network
``pi_t`` refreshed every ``target_network_update_freq`` updates: V-trace then evaluates
``pi_t`` and the surrogate's ratio is RLlib's (``appo_torch_learner``)
``clamp(mu / pi_t, 0, 2) * pi / mu``, clipped like PPO's inside the min, so the
behaviour/target correction enters once (V-trace's advantages already carry
``min(1, pi_t / mu)``).

Both need, per sampled step, the behaviour policy's ``action_logp`` (and APPO's KL term
its ``action_dist_inputs``): a policy class whose ``compute_actions`` does not return them
is refused when the trainer is built.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hierl.algorithms.ppo import clipped_surrogate_loss
from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.config import ConfigError
from hierl.devices import to_device
from hierl.optimizers import PolicyOptimizer
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED
from hierl.postprocessing import VTrace, trajectory_ends, vtrace
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import (
    TensorBatch,
    TorchPolicyGraph,
    load_module_weights,
    module_weights,
    standardize,
)


@dataclasses.dataclass
class IMPALAConfig(TrainerConfig):
    """IMPALA settings (RLlib's defaults: 2 evaluators x 5 envs x 50-step fragments,
    500-row train batches, one update per batch, Adam at 5e-4).  With lr 2e-3 and
    ``vf_loss_coeff`` 0.25 it reaches 450 on CartPole in 150k-350k env steps
    (``tests/support/learning_configs.py``).  See ``hierl.optimizers.aso.ASOConfig`` for the
    pipeline's settings.
    """

    supported_optimizers = ("aso",)
    default_optimizer = "aso"
    optimizer_defaults = {"aso": {"train_batch_size": 500}}

    num_evaluators: int = 2
    """Remote evaluators sampling continuously (0: the driver samples)."""
    num_envs_per_evaluator: int = 5
    """Sub-envs per evaluator."""
    rollout_fragment_length: int = 50
    """Steps per sub-env per fragment (the trajectory length of the paper)."""
    lr: float = 5e-4
    """Learning rate (Adam)."""
    lambda_: float = 1.0
    """V-trace lambda: the trace coefficients are ``lambda min(c_bar, rho)``."""
    vtrace_clip_rho_threshold: float | None = 1.0
    """rho_bar, the truncation of the importance weights in the value targets."""
    vtrace_clip_pg_rho_threshold: float | None = 1.0
    """The truncation of the importance weights of the policy-gradient advantages."""
    vtrace_clip_c_threshold: float | None = 1.0
    """c_bar, the truncation of the trace coefficients."""
    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""
    entropy_coeff: float = 0.01
    """Weight of the entropy bonus."""
    grad_clip: float | None = 40.0
    """Global gradient-norm clip."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("lambda_", 0.0 <= self.lambda_ <= 1.0, "must be in [0, 1]")
        for name in (
            "vtrace_clip_rho_threshold",
            "vtrace_clip_pg_rho_threshold",
            "vtrace_clip_c_threshold",
        ):
            value = getattr(self, name)
            self.check(name, value is None or value > 0, "must be > 0 or None (no clipping)")
        self.check("vf_loss_coeff", self.vf_loss_coeff >= 0, "must be >= 0")
        self.check("entropy_coeff", self.entropy_coeff >= 0, "must be >= 0")


@dataclasses.dataclass
class APPOConfig(IMPALAConfig):
    """APPO settings: IMPALA's pipeline and V-trace, PPO's clipped surrogate."""

    clip_param: float = 0.4
    """Surrogate clipping epsilon."""
    target_network_update_freq: int = 0
    """Learner updates between refreshes of the target network the surrogate ratio is
    taken against; 0: no target network (the ratio is against the behaviour policy)."""
    kl_coeff: float = 0.0
    """Weight of a KL(reference || current) penalty (0: none)."""
    normalize_advantages: bool = False
    """Standardise the V-trace advantages within each minibatch, as PPO does (and Sample
    Factory's APPO); off by default, as in RLlib's APPO and the IMPALA paper."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("clip_param", self.clip_param > 0, "must be > 0")
        self.check("target_network_update_freq", self.target_network_update_freq >= 0, ">= 0")
        self.check("kl_coeff", self.kl_coeff >= 0, "must be >= 0")


BEHAVIOUR_COLUMNS = (SampleBatch.ACTION_LOGP,)
"""What V-trace needs from ``compute_actions``' extras, per sampled step."""


class IMPALAPolicy(TorchPolicyGraph):
    """Actor-critic with the V-trace loss (IMPALA §4.2)."""

    required_extras: tuple[str, ...] = BEHAVIOUR_COLUMNS
    """The ``compute_actions`` extras the loss reads (checked when the trainer is built)."""
    host_columns = (  # read on the host (run ends) or at a few rows (V after each run)
        SampleBatch.EPS_ID,
        SampleBatch.AGENT_INDEX,
        SampleBatch.T,
        SampleBatch.TERMINATEDS,
        SampleBatch.NEW_OBS,
    )

    def postprocess_trajectories(self, batch: SampleBatch) -> SampleBatch:
        """Nothing: the targets depend on the learner's weights, so the loss computes them."""
        return batch

    def vtrace_targets(
        self, batch: TensorBatch, target_logp: torch.Tensor, values: torch.Tensor
    ) -> VTrace:
        """V-trace over the batch's trajectory runs (consecutive steps of an episode),
        bootstrapped from the current V(NEW_OBS) after each run that did not terminate."""
        cfg = self.config

        def host(column: str) -> np.ndarray | None:
            return batch[column].cpu().numpy() if column in batch else None

        ends = trajectory_ends(
            host(SampleBatch.EPS_ID), host(SampleBatch.T), host(SampleBatch.AGENT_INDEX)
        )
        terminated = batch[SampleBatch.TERMINATEDS].cpu().numpy().astype(bool)
        rows = np.flatnonzero(ends & ~terminated)
        bootstrap = torch.zeros_like(values)
        if len(rows):
            bootstrap[to_device(rows, values.device)] = self.values_after(batch, rows)
        log_rhos = target_logp.detach() - batch[SampleBatch.ACTION_LOGP]
        return vtrace(
            log_rhos,
            batch[SampleBatch.REWARDS].to(values.dtype),
            values.detach(),
            bootstrap,
            ends,
            cfg.gamma,
            cfg.lambda_,
            clip_rho_threshold=cfg.vtrace_clip_rho_threshold,
            clip_pg_rho_threshold=cfg.vtrace_clip_pg_rho_threshold,
            clip_c_threshold=cfg.vtrace_clip_c_threshold,
        )

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """``policy objective + c_v E[(V(x) - v_s)^2] / 2 - c_e H[pi(.|x)]``."""
        cfg = self.config
        dist_inputs, values = self.model_outputs(batch)
        dist = self.dist_class(dist_inputs)
        policy_loss, targets, stats = self.policy_objective(batch, dist, values)
        vf_loss = 0.5 * ((values - targets.vs) ** 2).mean()
        entropy = dist.entropy().mean()
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * entropy
        return total, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": entropy.detach(),
            **stats,
            **_rho_stats(targets.rhos, cfg.vtrace_clip_rho_threshold),
        }

    def policy_objective(
        self, batch: TensorBatch, dist: Any, values: torch.Tensor
    ) -> tuple[torch.Tensor, VTrace, dict[str, Any]]:
        """``-E[log pi(a|x) A_vtrace]``, the V-trace targets, extra stats (none)."""
        logp = dist.logp(batch[SampleBatch.ACTIONS])
        targets = self.vtrace_targets(batch, logp, values)
        return -(logp * targets.pg_advantages).mean(), targets, {}


def _rho_stats(rhos: torch.Tensor, clip: float | None) -> dict[str, torch.Tensor]:
    """Mean importance ratio pi/mu and the fraction the value targets truncate."""
    clipped = (rhos > clip).float().mean() if clip is not None else torch.zeros(())
    return {"mean_rho": rhos.mean(), "rho_clip_frac": clipped}


class APPOPolicy(IMPALAPolicy):
    """PPO's clipped surrogate on V-trace advantages, with an optional target network."""

    required_extras = (SampleBatch.ACTION_LOGP, SampleBatch.ACTION_DIST_INPUTS)

    def __init__(self, observation_space, action_space, config: APPOConfig, model=None):
        super().__init__(observation_space, action_space, config, model)
        self.target_model: torch.nn.Module | None = None
        if config.target_network_update_freq:
            self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.num_learner_updates = 0

    def policy_objective(
        self, batch: TensorBatch, dist: Any, values: torch.Tensor
    ) -> tuple[torch.Tensor, VTrace, dict[str, Any]]:
        """Clipped surrogate on V-trace advantages (+ KL penalty), against the target
        network when there is one, else against the behaviour policy.

        With a target network ``pi_t`` the ratio is RLlib's APPO ratio
        ``clamp(mu / pi_t, 0, 2) * pi / mu`` (``pi / pi_t`` unless ``pi_t`` and the
        behaviour policy ``mu`` differ by more than a factor 2), inside the clipped
        surrogate.
        """
        cfg = self.config
        logp = dist.logp(batch[SampleBatch.ACTIONS])
        behaviour_logp = batch[SampleBatch.ACTION_LOGP]
        ratio = torch.exp(logp - behaviour_logp)  # pi / mu
        if self.target_model is None:
            ref_inputs = batch[SampleBatch.ACTION_DIST_INPUTS]
            targets = self.vtrace_targets(batch, logp, values)
        else:  # V-trace for the target network's policy
            with torch.no_grad():
                ref_inputs = self.model_outputs(batch, self.target_model)[0]
            ref_logp = self.dist_class(ref_inputs).logp(batch[SampleBatch.ACTIONS])
            targets = self.vtrace_targets(batch, ref_logp, values)
            # CRUCIAL: the mu -> pi_t correction enters once, in the ratio, clipped to
            # [0, 2] (RLlib's appo_torch_learner), not as a second factor on the surrogate.
            ratio = torch.exp(behaviour_logp - ref_logp).clamp(0.0, 2.0) * ratio
        advantages = targets.pg_advantages
        if cfg.normalize_advantages:
            advantages = standardize(advantages)
        loss, clip_frac = clipped_surrogate_loss(ratio, advantages, cfg.clip_param)
        with torch.set_grad_enabled(cfg.kl_coeff > 0):
            kl = self.dist_class(ref_inputs).kl(dist).mean()
        if cfg.kl_coeff > 0:
            loss = loss + cfg.kl_coeff * kl
        return loss, targets, {"kl": kl.detach(), "clip_frac": clip_frac}

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One update; refresh the target network every ``target_network_update_freq``
        applied updates."""
        stats = super().learn_on_batch(batch)
        if stats[NONFINITE_GRADS_SKIPPED]:
            return stats
        self.num_learner_updates += 1
        freq = self.config.target_network_update_freq
        if self.target_model is not None and self.num_learner_updates % freq == 0:
            self.target_model.load_state_dict(self.model.state_dict())
        return stats

    def get_state(self) -> dict[str, Any]:
        """Adds the target network and the update count (exact resume)."""
        state = {**super().get_state(), "num_learner_updates": self.num_learner_updates}
        if self.target_model is not None:
            state["target_weights"] = module_weights(self.target_model)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores the target network and the update count too."""
        super().set_state(state)
        self.num_learner_updates = int(state.get("num_learner_updates", 0))
        if self.target_model is not None and "target_weights" in state:
            load_module_weights(self.target_model, state["target_weights"], "target network")


def probe_extras(policy: Any) -> list[str]:
    """The names of the extras ``policy.compute_actions`` returns, probed on one
    observation sampled from its observation space."""
    obs = np.asarray(policy.observation_space.sample())[None]
    state = [s[None] for s in policy.get_initial_state()] or None
    return list(policy.compute_actions(obs, state, explore=True)[2])


class IMPALATrainer(Trainer):
    """IMPALA: V-trace actor-critic on the ``aso`` pipeline."""

    name = "IMPALA"
    config_class = IMPALAConfig
    policy_class = IMPALAPolicy

    def _make_optimizer(self, name: str) -> PolicyOptimizer:
        """Refuse a policy without the behaviour extras V-trace needs, then build."""
        for policy_id, policy in self.local_evaluator.policy_map.items():
            extras = probe_extras(policy)
            required = getattr(policy, "required_extras", BEHAVIOUR_COLUMNS)
            missing = [column for column in required if column not in extras]
            if missing:
                self.evaluators.stop()
                raise ConfigError(
                    f"{self.name} needs the behaviour policy's {', '.join(missing)} per "
                    f"sampled step for V-trace, but {type(policy).__name__}.compute_actions "
                    f"(policy {policy_id!r}) returns only the extras {sorted(extras)}"
                )
        return super()._make_optimizer(name)


class APPOTrainer(IMPALATrainer):
    """APPO: PPO's clipped surrogate on V-trace advantages, on the ``aso`` pipeline."""

    name = "APPO"
    config_class = APPOConfig
    policy_class = APPOPolicy
