"""TorchPolicyGraph: a PolicyGraph built from a torch model, an action distribution and a loss.

A new algorithm subclasses it and defines ``loss`` (and optionally
``postprocess_trajectory``)::

    class MyPolicy(TorchPolicyGraph):
        def loss(self, batch):
            dist_inputs, values = self.model(batch[SampleBatch.OBS])
            logp = self.dist_class(dist_inputs).logp(batch[SampleBatch.ACTIONS])
            return -(logp * batch[SampleBatch.ADVANTAGES]).mean(), {}

Everything framework-specific (devices, tensors, optimizer moments) stays in this file.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hierl.models import ActorCritic, ModelConfig
from hierl.policy_graph import PolicyGraph, Weights
from hierl.postprocessing import segment_ends
from hierl.sample_batch import SampleBatch

TensorBatch = dict[str, torch.Tensor]


def _to_numpy_tree(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, Mapping):
        return {str(k): _to_numpy_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_numpy_tree(v) for v in value]
    return value


def piecewise_linear(schedule: Sequence[Sequence[float]], t: float) -> float:
    """Interpolate ``[[t0, v0], [t1, v1], ...]`` at ``t`` (clamped at both ends)."""
    points = sorted((float(a), float(b)) for a, b in schedule)
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t < t1:
            return v0 + (t - t0) / (t1 - t0) * (v1 - v0)
    return points[-1][1]


class TorchPolicyGraph(PolicyGraph):
    """PolicyGraph on a torch ``nn.Module`` returning ``(dist_inputs, values)``.

    ``config`` is the trainer config; the fields read here are ``model``
    (ModelConfig), ``lr``, ``lr_schedule``, ``grad_clip`` and ``num_gpus``.  Pass
    ``model`` to use your own module: it must return ``(dist_inputs, values)`` from
    ``forward(obs)`` and may define ``value(obs)``.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        model: nn.Module | None = None,
    ):
        super().__init__(observation_space, action_space, config)
        use_cuda = getattr(config, "num_gpus", 0) > 0 and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.model = (model if model is not None else self.make_model()).to(self.device)
        self.dist_class = self.model.dist_class
        self.optimizer = self.make_optimizer()
        self._param_names = [name for name, _ in self.model.named_parameters()]

    # -- construction hooks -------------------------------------------------------------
    def make_model(self) -> nn.Module:
        """Build the default actor-critic model from ``config.model``."""
        model_config = getattr(self.config, "model", None) or ModelConfig()
        return ActorCritic(self.observation_space, self.action_space, model_config)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Build the torch optimizer (Adam with ``config.lr``)."""
        params = list(self.model.parameters())
        try:  # fused Adam: one kernel for all parameters (CPU support since torch 2.4)
            return torch.optim.Adam(params, lr=self.config.lr, eps=1e-5, fused=True)
        except (RuntimeError, TypeError, ValueError):
            return torch.optim.Adam(params, lr=self.config.lr, eps=1e-5, foreach=True)

    # -- act ---------------------------------------------------------------------------
    @torch.no_grad()
    def compute_actions(
        self,
        obs_batch: np.ndarray,
        state_batches: list[np.ndarray] | None = None,
        explore: bool = True,
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Sample (or, with ``explore=False``, take the mode of) the action distribution."""
        obs = torch.as_tensor(obs_batch, device=self.device)
        dist_inputs, values = self.model(obs)
        dist = self.dist_class(dist_inputs)
        actions = dist.sample() if explore else dist.deterministic_sample()
        extra = {
            SampleBatch.ACTION_LOGP: dist.logp(actions).cpu().numpy(),
            SampleBatch.VF_PREDS: values.cpu().numpy(),
            SampleBatch.ACTION_DIST_INPUTS: dist_inputs.cpu().numpy(),
        }
        return actions.cpu().numpy(), [], extra

    @torch.no_grad()
    def value(self, obs_batch: np.ndarray) -> np.ndarray:
        """State values V(obs) for a batch of preprocessed observations."""
        obs = torch.as_tensor(obs_batch, device=self.device)
        if hasattr(self.model, "value"):
            return self.model.value(obs).cpu().numpy()
        return self.model(obs)[1].cpu().numpy()

    def bootstrap_values(self, batch: SampleBatch) -> np.ndarray:
        """Per row: V(NEW_OBS) at segment ends that did not terminate, else 0.

        One batched forward pass over the rows that need it (truncated episodes and
        fragments cut mid-episode); terminal states get no bootstrap.
        """
        out = np.zeros(batch.count, dtype=np.float32)
        if batch.count == 0:
            return out
        rows = np.flatnonzero(segment_ends(batch) & ~batch[SampleBatch.TERMINATEDS])
        if len(rows):
            out[rows] = self.value(batch[SampleBatch.NEW_OBS][rows])
        return out

    # -- loss --------------------------------------------------------------------------
    @abc.abstractmethod
    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return ``(scalar loss, stats)`` for a batch of tensors keyed by column name."""

    def to_tensors(self, batch: SampleBatch) -> TensorBatch:
        """Convert a SampleBatch to tensors on this policy's device (zero-copy on CPU)."""
        batch.decompress_if_needed()
        return {
            k: torch.as_tensor(np.ascontiguousarray(v), device=self.device)
            for k, v in batch.items()
            if k != SampleBatch.SEQ_LENS or v is not None
        }

    def _backward(self, batch: SampleBatch, clip: bool = True) -> dict[str, float]:
        loss, stats = self.loss(self.to_tensors(batch))
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"{type(self).__name__}: loss is {loss.item()} on a batch of {batch.count} rows; "
                "weights left unchanged"
            )
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        out = {k: float(v) for k, v in stats.items()}
        out["total_loss"] = float(loss.detach())
        if clip:
            out.update(self._clip_grads())
        return out

    def _clip_grads(self) -> dict[str, float]:
        clip = getattr(self.config, "grad_clip", None)
        if not clip:
            return {}
        gnorm = nn.utils.clip_grad_norm_(self.model.parameters(), clip, foreach=True)
        return {"grad_gnorm": float(gnorm)}

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """Compute the loss on ``batch``, clip gradients and take one optimizer step."""
        stats = self._backward(batch)
        self.optimizer.step()
        return stats

    def compute_gradients(
        self, batch: SampleBatch, clip: bool = True
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Gradients of the loss (clipped unless ``clip=False``) as numpy arrays.

        They are in ``gradient_names()`` order.
        """
        stats = self._backward(batch, clip=clip)
        grads = [p.grad.detach().cpu().numpy().copy() for p in self.model.parameters()]
        return grads, stats

    def apply_gradients(self, gradients: list[np.ndarray], clip: bool = False) -> dict[str, float]:
        """Load ``gradients`` into the parameters' ``.grad`` and take one optimizer step.

        ``clip=True`` clips their global norm to ``config.grad_clip`` first.
        """
        params = list(self.model.parameters())
        if len(gradients) != len(params):
            raise ValueError(f"got {len(gradients)} gradients for {len(params)} parameters")
        for p, g in zip(params, gradients, strict=True):
            # A copy: gradients from the object store are read-only, clipping writes.
            p.grad = torch.tensor(g, dtype=p.dtype, device=self.device).reshape(p.shape)
        stats = self._clip_grads() if clip else {}
        self.optimizer.step()
        return stats

    def gradient_names(self) -> list[str]:
        """Weight names of the trainable parameters, in ``compute_gradients`` order."""
        return list(self._param_names)

    # -- weights and state -------------------------------------------------------------
    def get_weights(self) -> Weights:
        """Model ``state_dict`` as numpy arrays (copies)."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def set_weights(self, weights: Weights) -> None:
        """Load weights; a missing name or a shape mismatch raises ValueError naming it."""
        own = self.model.state_dict()
        missing = sorted(set(own) - set(weights))
        unexpected = sorted(set(weights) - set(own))
        if missing or unexpected:
            raise ValueError(
                f"weights do not match {type(self).__name__}'s model: missing {missing}, "
                f"unexpected {unexpected}"
            )
        for name, value in weights.items():
            if tuple(np.shape(value)) != tuple(own[name].shape):
                raise ValueError(
                    f"weight '{name}' has shape {tuple(np.shape(value))}, the model expects "
                    f"{tuple(own[name].shape)}"
                )
        self.model.load_state_dict(
            {k: torch.from_numpy(np.array(v, copy=True)) for k, v in weights.items()},
            strict=True,
        )

    def get_state(self) -> dict[str, Any]:
        """Weights, optimizer moments and the global timestep."""
        state = super().get_state()
        state["optimizer"] = _to_numpy_tree(self.optimizer.state_dict())
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore weights, optimizer moments and the global timestep."""
        super().set_state(state)
        if "optimizer" in state:
            saved = state["optimizer"]
            opt_state = {
                # copies: arrays from the object store are shared, read-only memory
                int(k): {n: torch.tensor(np.asarray(v)) for n, v in s.items()}
                for k, s in saved["state"].items()
            }
            self.optimizer.load_state_dict(
                {"state": opt_state, "param_groups": list(saved["param_groups"])}
            )
            for s in self.optimizer.state.values():
                for n, v in s.items():
                    if torch.is_tensor(v):
                        s[n] = v.to(self.device) if n != "step" else v

    def on_global_var_update(self, global_vars: Mapping[str, Any]) -> None:
        """Track the timestep and follow ``config.lr_schedule`` if one is set."""
        super().on_global_var_update(global_vars)
        schedule = getattr(self.config, "lr_schedule", None)
        if schedule:
            lr = piecewise_linear(schedule, self.global_timestep)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
