"""PPO's update for small Gaussian MLP policies in numpy: the loss of
``hierl.algorithms.ppo.PPOPolicy.loss`` and its gradients written out by hand.

On CPU a 64-row minibatch through two 64x64 MLPs is a hundred-odd tiny tensor ops, and
torch's per-op cost, not arithmetic, sets the time of an update: ~1.7 ms, the same for
hierl's loss and for a bare CleanRL-style torch loop (``benchmarks/mujoco_ppo.py``).
The same forward pass, loss and backward pass in numpy, with torch's gradient clipping
and fused Adam step, take about half of it (873 vs 1,694 µs on Hopper's model).  The
gradients follow torch's autograd exactly, ties included (``torch.min``/``torch.max``
send half the gradient to each equal operand; ``clamp`` passes it at its bounds), and
the parameters' ``.grad`` are then clipped and stepped by the policy's own torch
optimizer, so its state, checkpoints and everything downstream are unchanged.

It applies to ``PPOPolicy`` itself (not subclasses that
change its loss) on the default feed-forward model that
``NumpyActor`` mirrors, with
``DiagGaussian`` actions and without the adaptive KL
penalty (``kl_coeff`` 0); ``ModelConfig.numpy_learning`` switches it off.  Everything
else learns through torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.models.distributions import DiagGaussian
from hierl.models.numpy_acting import HALF_LOG_2PI, NumpyActor, ParamGrads
from hierl.sample_batch import SampleBatch

Array = np.ndarray

_HALF_LOG_2PI_E = HALF_LOG_2PI + 0.5  # the entropy's constant: log(sqrt(2 pi e))


def _min_grad(a: Array, b: Array) -> tuple[Array, Array]:
    """Share of d min(a, b) going to ``a`` and to ``b`` (torch: half each on ties)."""
    to_a = np.where(a < b, 1.0, np.where(a > b, 0.0, 0.5))
    return to_a, 1.0 - to_a


def _clamp_passes(x: Array, low: float, high: float) -> Array:
    """Where torch's ``clamp`` passes the gradient: inside the bounds, bounds included."""
    return (x >= low) & (x <= high)


def _standardize(adv: Array) -> Array:
    """``hierl.torch_policy_graph.standardize`` (unbiased std, as ``Tensor.std``)."""
    if adv.size < 2:
        return adv
    return (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)


# Longer than 60 lines on purpose: one forward pass and its hand-derived backward pass,
# read top to bottom against PPOPolicy's torch loss term by term; split, the gradients
# would be separated from the terms they differentiate.
def gaussian_ppo_loss_grads(
    config: Any, dist_inputs: Array, values: Array, batch: Mapping[str, Array]
) -> tuple[float, dict[str, float], Array, Array]:
    """PPOPolicy's loss on a DiagGaussian policy's outputs (``kl_coeff`` 0):
    ``(total loss, stats, d loss / d dist_inputs, d loss / d values)``.

    ``config`` is the policy's ``PPOConfig``; ``batch`` holds
    the minibatch's columns as numpy arrays.
    """
    n = len(values)
    dim = dist_inputs.shape[1] // 2
    mean, log_std_in = dist_inputs[:, :dim], dist_inputs[:, dim:]
    low, high = DiagGaussian.LOG_STD_MIN, DiagGaussian.LOG_STD_MAX
    log_std = np.clip(log_std_in, low, high)
    std = np.exp(log_std)
    actions = np.asarray(batch[SampleBatch.ACTIONS]).reshape(mean.shape).astype(mean.dtype)
    z = (actions - mean) / std
    logp = (-0.5 * z * z - log_std - HALF_LOG_2PI).sum(-1)
    ratio = np.exp(logp - batch[SampleBatch.ACTION_LOGP])
    adv = batch[SampleBatch.ADVANTAGES]
    if config.normalize_advantages:
        adv = _standardize(adv)

    # policy loss: -mean(min(r A, clip(r) A))
    clip = config.clip_param
    clipped = np.clip(ratio, 1 - clip, 1 + clip)
    surr_a, surr_b = ratio * adv, clipped * adv
    policy_loss = -float(np.minimum(surr_a, surr_b).mean())
    to_a, to_b = _min_grad(surr_a, surr_b)
    d_ratio = -(adv / n) * (to_a + to_b * _clamp_passes(ratio, 1 - clip, 1 + clip))
    d_logp = d_ratio * ratio

    # value loss: 0.5 mean((v - t)^2), or of the max with the clipped value's error
    targets = batch[SampleBatch.VALUE_TARGETS]
    err = values - targets
    sq = err * err
    d_sq = 2.0 * err
    if config.vf_clip_param:
        old = batch[SampleBatch.VF_PREDS]
        c = config.vf_clip_param
        err_c = old + np.clip(values - old, -c, c) - targets
        sq_c = err_c * err_c
        to_u, to_c = _min_grad(-sq, -sq_c)  # the max's shares: min of the negations
        d_sq = to_u * d_sq + to_c * 2.0 * err_c * _clamp_passes(values - old, -c, c)
        sq = np.maximum(sq, sq_c)
    vf_loss = 0.5 * float(sq.mean())
    d_values = config.vf_loss_coeff * 0.5 / n * d_sq

    passes = _clamp_passes(log_std_in, low, high)
    entropy = float((log_std + _HALF_LOG_2PI_E).sum(-1).mean())
    total = policy_loss + config.vf_loss_coeff * vf_loss
    d_mean = d_logp[:, None] * z / std
    d_log_std = d_logp[:, None] * (z * z - 1.0)
    if config.entropy_coeff > 0:
        total -= config.entropy_coeff * entropy
        d_log_std = d_log_std - config.entropy_coeff / n
    d_dist = np.concatenate([d_mean, d_log_std * passes], axis=1).astype(np.float32)

    old_mean, old_log_std_in = np.split(np.asarray(batch[SampleBatch.ACTION_DIST_INPUTS]), 2, 1)
    old_log_std = np.clip(old_log_std_in, low, high)
    old_var = np.exp(2.0 * old_log_std)
    kl = log_std - old_log_std + (old_var + (old_mean - mean) ** 2) / (2.0 * std * std) - 0.5
    stats = {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": entropy,
        "kl": float(kl.sum(-1).mean()),
        "clip_frac": float((np.abs(ratio - 1) > clip).mean()),
        "kl_coeff": 0.0,
    }
    return total, stats, d_dist, d_values.astype(np.float32)


def numpy_ppo_grads(
    learner: NumpyActor, config: Any, batch: SampleBatch
) -> tuple[float, dict[str, float], ParamGrads]:
    """Forward pass, ``gaussian_ppo_loss_grads`` and backward pass on ``batch``:
    ``(total loss, stats, gradients of every model parameter)``."""
    batch.decompress_if_needed()
    dist_inputs, values, tape = learner.forward_train(batch[SampleBatch.OBS])
    total, stats, d_dist, d_values = gaussian_ppo_loss_grads(config, dist_inputs, values, batch)
    return total, stats, learner.backward(tape, d_dist, d_values)
