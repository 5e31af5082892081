"""Plumbing of the ``sharded_ps`` optimizer: the Adam shard servers and the evaluator side.

``ParameterShard`` holds one flat slice of the trainable weights (``ShardSpec`` from
``hierl.optimizers.sharded_ps.sharding``) with its own torch Adam (``ShardGroup`` in
``hierl.optimizers.sharded_ps.shard_group`` drives K of them from the driver).
``compute_gradient_shards`` is the task an evaluator runs for every gradient, and
``gather_adam_state`` / ``split_adam_state`` turn the shards' Adam moments into a
per-parameter checkpoint (restorable with any number of shards) and back.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.sharded_ps.sharding import ShardSpec
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, GlobalVars
from hierl.sample_batch import DEFAULT_POLICY_ID

ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


def _adam(params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    # CRUCIAL: the same Adam as TorchPolicyGraph.make_optimizer (eps=1e-5, fused when
    # available), so sharded updates equal unsharded ones.
    try:
        return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=1e-5, foreach=True)


class ParameterShard:
    """One flat slice of the weights and the Adam that updates it.

    A plain class: the in-process path uses instances directly, and
    ``ray.remote(num_cpus=...)(ParameterShard)`` makes the server actor (``ShardGroup``).

    Args:
        weights: the initial flat slice (1-d float array).
        lr: Adam's learning rate.
        num_threads: torch intra-op threads for this process (actors: their CPUs).
    """

    def __init__(self, weights: np.ndarray, lr: float, num_threads: int | None = None):
        if num_threads:
            torch.set_num_threads(num_threads)
        weights = np.asarray(weights)
        if weights.ndim != 1:
            raise ValueError(f"a shard is a flat vector, got shape {weights.shape}")
        self.param = torch.nn.Parameter(torch.tensor(weights))
        self.optimizer = _adam([self.param], lr)
        self.num_updates = 0
        self.apply_time_s = 0.0

    def _tensor(self, array: np.ndarray, what: str) -> torch.Tensor:
        value = torch.tensor(
            np.asarray(array), dtype=self.param.dtype
        )  # a copy: Ray's are read-only
        if value.shape != self.param.shape:
            raise ValueError(
                f"{what} has shape {tuple(value.shape)}, this shard holds {tuple(self.param.shape)}"
            )
        return value

    def apply_gradients(self, grad_shard: np.ndarray | None) -> np.ndarray:
        """One Adam step with ``grad_shard``; returns the new weights of this shard.

        None (a gradient its evaluator found not finite, ``compute_gradient_shards``):
        no step, the weights and moments stay as they are.
        """
        if grad_shard is None:
            return self.get_weights()
        start = time.perf_counter()
        self.param.grad = self._tensor(grad_shard, "gradient shard")
        self.optimizer.step()
        self.num_updates += 1
        self.apply_time_s += time.perf_counter() - start
        return self.get_weights()

    def get_weights(self) -> np.ndarray:
        """A copy of this shard's weights."""
        return self.param.detach().numpy().copy()

    def set_weights(self, shard: np.ndarray) -> None:
        """Overwrite the weights (Adam's moments are kept)."""
        with torch.no_grad():
            self.param.copy_(self._tensor(shard, "weight shard"))

    def set_lr(self, lr: float) -> None:
        """Change Adam's learning rate (for ``lr_schedule``)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def get_optimizer_state(self) -> dict[str, Any]:
        """Adam's moments (flat arrays, zeros before the first step) and its step count."""
        state = self.optimizer.state.get(self.param) or {}
        zeros = np.zeros(self.param.shape, dtype=self.get_weights().dtype)
        return {
            "exp_avg": state["exp_avg"].numpy().copy() if state else zeros,
            "exp_avg_sq": state["exp_avg_sq"].numpy().copy() if state else zeros.copy(),
            "step": float(state["step"]) if state else 0.0,
        }

    def set_optimizer_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``get_optimizer_state``."""
        if float(state["step"]) == 0.0:
            self.optimizer.state.pop(self.param, None)
            return
        self.optimizer.state[self.param] = {
            "step": torch.tensor(float(state["step"]), dtype=torch.float32),
            "exp_avg": self._tensor(state["exp_avg"], "exp_avg"),
            "exp_avg_sq": self._tensor(state["exp_avg_sq"], "exp_avg_sq"),
        }

    def stats(self) -> dict[str, float]:
        """Size, updates applied and mean Adam step time of this shard."""
        return {
            "size": float(self.param.numel()),
            "num_updates": float(self.num_updates),
            "apply_time_ms": 1000.0 * self.apply_time_s / max(self.num_updates, 1),
        }


def gather_adam_state(spec: ShardSpec, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-parameter Adam moments from the shards' ``get_optimizer_state`` results.

    Returns ``{"exp_avg": {name: array}, "exp_avg_sq": {name: array}, "step": float}``
    (the largest step count of the shards), independent of the number of shards.
    """
    moments = {
        key: dict(zip(spec.names, spec.concat([s[key] for s in states]), strict=True))
        for key in ADAM_MOMENTS
    }
    return {**moments, "step": max(s["step"] for s in states)}


def split_adam_state(spec: ShardSpec, adam: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Inverse of ``gather_adam_state``: one ``set_optimizer_state`` argument per shard.

    Raises ValueError if the moments do not fit ``spec`` (another policy's state).
    """
    try:
        moments = {key: spec.split(adam[key]) for key in ADAM_MOMENTS}
    except ValueError as e:
        raise ValueError(f"sharded_ps state does not fit this policy: {e}") from e
    step = float(adam["step"])
    return [
        {"exp_avg": m, "exp_avg_sq": v, "step": step}
        for m, v in zip(moments["exp_avg"], moments["exp_avg_sq"], strict=True)
    ]


@dataclasses.dataclass
class GradientInfo:
    """What an evaluator reports with each gradient (its K shards travel separately)."""

    count: int
    """Rows of the sampled batch the gradient was computed on."""
    stats: dict[str, float]
    """``compute_gradients`` statistics (losses, gradient norm)."""
    sample_time_s: float
    """Seconds the evaluator spent in ``sample()``."""
    grad_time_s: float
    """Seconds the evaluator spent in ``compute_gradients``."""


def load_weight_shards(
    evaluator: PolicyEvaluator, spec: ShardSpec, shards: Sequence[np.ndarray]
) -> None:
    """Load trainable weights from ``shards`` into the default policy (other entries kept).

    Goes through the evaluator's own (locked) methods, safe beside background sampling.
    """
    weights = evaluator.get_weights()[DEFAULT_POLICY_ID]
    weights.update(zip(spec.names, spec.concat(shards), strict=True))
    evaluator.set_weights({DEFAULT_POLICY_ID: weights})


def compute_gradient_shards(
    evaluator: PolicyEvaluator,
    spec: ShardSpec,
    global_vars: GlobalVars,
    *weight_shards: np.ndarray,
) -> tuple[Any, ...]:
    """Evaluator-side task: [load weight shards] → sample → clipped gradients → K shards.

    Returns ``(*gradient_shards, GradientInfo)``; every shard None when the loss or a
    gradient is not finite (``NONFINITE_GRADS_SKIPPED`` in the info's stats).  Run remotely as
    ``evaluator.apply.options(num_returns=K + 1).remote(compute_gradient_shards, ...)``
    so that each gradient shard is its own object ref, and pass the weight shards as
    top-level refs so Ray moves them from the shard actors straight to the evaluator.
    """
    if weight_shards:
        load_weight_shards(evaluator, spec, weight_shards)
    evaluator.set_global_vars(global_vars)
    start = time.perf_counter()
    batch = evaluator.sample()
    sampled = time.perf_counter()
    grads, stats = evaluator.compute_gradients(batch, clip=True)
    info = GradientInfo(batch.count, stats, sampled - start, time.perf_counter() - sampled)
    if stats.get(NONFINITE_GRADS_SKIPPED):  # refused: no shard takes a step
        info.stats = {NONFINITE_GRADS_SKIPPED: 1.0}
        return (*[None] * spec.num_shards, info)
    return (*spec.split(grads), info)
