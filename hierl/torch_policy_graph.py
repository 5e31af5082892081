"""TorchPolicyGraph: a PolicyGraph built from a torch model, an action distribution and a loss.

A new algorithm subclasses it and defines ``loss`` (and optionally
``postprocess_trajectory``):

    class MyPolicy(TorchPolicyGraph):
        def loss(self, batch):
            dist_inputs, values = self.model(batch[SampleBatch.OBS])
            logp = self.dist_class(dist_inputs).logp(batch[SampleBatch.ACTIONS])
            return -(logp * batch[SampleBatch.ADVANTAGES]).mean(), {}

A loss that reads the model through ``self.model_outputs(batch)`` (as PPO's does) works
unchanged for recurrent models: for them it unrolls the LSTM over the batch's sequences
(truncated BPTT) and returns one output per row, padded steps dropped.

Everything framework-specific (devices, tensors, optimizer moments) stays in this file.
"""

from __future__ import annotations

import abc
import logging
import math
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hierl.devices import host_floats, to_device
from hierl.models.networks import ModelConfig, make_actor_critic, make_custom_model
from hierl.models.numpy_acting import NumpyActor
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, GlobalVars, PolicyGraph, Weights
from hierl.postprocessing import segment_ends
from hierl.sample_batch import SampleBatch
from hierl.utils import piecewise_linear

TensorBatch = dict[str, torch.Tensor]

logger = logging.getLogger(__name__)


class LazyRows(Mapping):
    """Read-only view of the rows at ``positions`` of a tensor batch (all rows if None),
    gathered column by column on first access, on each column's device.

    A loss reads a handful of columns; gathering only those (``index_select``) keeps the
    per-minibatch cost at what the loss needs (e.g. ``new_obs`` is never copied).
    ``device`` is where the index goes (default: the first column's).
    """

    def __init__(
        self,
        columns: Mapping[str, torch.Tensor],
        positions: np.ndarray | None = None,
        device: torch.device | None = None,
    ):
        self._columns = columns
        self._positions = positions  # host copy of the index, for host-memory columns
        self._device = device or (next(iter(columns.values())).device if columns else None)
        self._index = None if positions is None else to_device(positions, self._device)
        self._rows: TensorBatch = {}

    @property
    def count(self) -> int:
        """Number of rows in the view."""
        if self._positions is not None:
            return len(self._positions)
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def take(self, positions: np.ndarray) -> LazyRows:
        """The view of the rows at ``positions`` of this (whole-column) view."""
        if self._positions is not None:
            raise ValueError("take() needs a view of whole columns")
        return LazyRows(self._columns, positions, self._device)

    def __getitem__(self, key: str) -> torch.Tensor:
        column = self._columns[key]
        if self._positions is None:
            return column
        rows = self._rows.get(key)
        if rows is None:
            index = self._index  # a column kept in host memory (host_columns): gathered there
            if column.device != index.device:
                index = torch.from_numpy(self._positions)
            rows = self._rows[key] = column.index_select(0, index)
        return rows

    def __contains__(self, key: object) -> bool:
        return key in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)


def _to_numpy_tree(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().cpu().numpy().copy()
    if isinstance(value, Mapping):
        return {str(k): _to_numpy_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_numpy_tree(v) for v in value]
    return value


def batch_statistics(batch: Mapping[str, Any]) -> str:
    """``column: min/max/mean (non-finite count)`` of a batch's numeric columns, for
    error messages (e.g. a NaN loss)."""
    parts = []
    for key, value in batch.items():
        if torch.is_tensor(value):
            value = value.detach().cpu().numpy()
        arr = np.asarray(value) if isinstance(value, np.ndarray) else None
        if arr is None or arr.size == 0 or not np.issubdtype(arr.dtype, np.number):
            continue
        arr = arr.astype(np.float64, copy=False)
        finite = np.isfinite(arr)
        bad = int(arr.size - finite.sum())
        ok = arr[finite]
        stats = f"min {ok.min():.4g} max {ok.max():.4g} mean {ok.mean():.4g}" if ok.size else "-"
        parts.append(f"{key}: {stats}" + (f" ({bad} non-finite)" if bad else ""))
    return "; ".join(parts)


def grads_finite(params: list[nn.Parameter]) -> torch.Tensor:
    """Whether every gradient of ``params`` is finite: a 0-dim bool tensor on their device
    (read it with the update's other stats, one transfer).  The per-tensor max-abs is NaN
    or inf exactly when a gradient holds one; unlike a norm it cannot overflow.  (Taken as
    ``abs().amax()``: ``_foreach_norm(grads, inf)`` gives the same, about six times
    slower on CPU, where it has no fused kernel.)"""
    grads = [p.grad for p in params if p.grad is not None and p.grad.numel()]
    if not grads:
        return torch.ones((), dtype=torch.bool)
    return torch.isfinite(torch.stack([g.abs().amax() for g in grads])).all()


_refusals: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = weakref.WeakKeyDictionary()
"""Refused updates so far, per optimizer (so per policy)."""


def step_if_finite(
    optimizer: torch.optim.Optimizer,
    params: list[nn.Parameter],
    values: Mapping[str, Any],
    owner: str,
    batch: Mapping[str, Any] | None = None,
    norm: torch.Tensor | None = None,
) -> dict[str, float]:
    """Take ``optimizer``'s step only if the loss (``values["total_loss"]`` when present)
    and every gradient of ``params`` (already clipped) are finite: the one check every
    torch update path makes before it steps.

    ``norm``, the global norm of the gradients before the caller clipped them, stands in
    for ``grads_finite`` (one pass over the gradients less): finite, every clipped
    gradient is finite; not finite, some gradient was not, or their norm overflowed
    float32, and the update is refused either way.

    Returns the update's stats as floats (``values`` read in one transfer) with
    ``NONFINITE_GRADS_SKIPPED`` 0; for a refused update only
    that count, 1: no step, so the weights and the optimizer moments stay exactly as
    they were, and a warning (``owner``, the loss, ``batch``'s column statistics) is
    logged on the 1st, 2nd, 4th, 8th... refusal of ``optimizer``.
    """
    finite = grads_finite(params) if norm is None else torch.isfinite(norm)
    out = host_floats({**values, NONFINITE_GRADS_SKIPPED: finite})
    finite = out.pop(NONFINITE_GRADS_SKIPPED) == 1.0
    if finite and math.isfinite(out.get("total_loss", 0.0)):
        optimizer.step()
        out[NONFINITE_GRADS_SKIPPED] = 0.0
        return out
    count = _refusals[optimizer] = _refusals.get(optimizer, 0) + 1
    if count & (count - 1) == 0:
        stats = f"; batch statistics: {batch_statistics(batch)}" if batch is not None else ""
        logger.warning(
            "%s: update refused (%d so far): loss %s, gradients %s; weights and optimizer "
            "state left unchanged%s",
            owner,
            count,
            out.get("total_loss", "n/a"),
            "finite" if finite else "not finite",
            stats,
        )
    return {NONFINITE_GRADS_SKIPPED: 1.0}


def standardize(advantages: torch.Tensor) -> torch.Tensor:
    """``(A - mean A) / (std A + 1e-8)`` over a loss batch (a single row is left as it is):
    the per-minibatch advantage normalisation of PPO implementations (CleanRL, SB3) and of
    Sample Factory's APPO."""
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale the gradients of ``params`` so their global L2 norm is at most ``max_norm``;
    the norm before clipping.

    The arithmetic of ``torch.nn.utils.clip_grad_norm_`` (coefficient
    ``max_norm / (norm + 1e-6)`` clamped to 1, one multiply per gradient) for gradients on
    one device, without its per-call grouping of tensors by device and dtype: 45-80 µs
    instead of 132-153 µs per update for the 64x64 MLPs of a MuJoCo policy on CPU.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def make_adam(params: list[nn.Parameter], lr: float, eps: float = 1e-8) -> torch.optim.Optimizer:
    """Adam over ``params``: fused (one kernel for all, CPU too since torch 2.4) if possible."""
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A torch optimizer's ``state_dict`` as numpy arrays and JSON scalars (checkpointable)."""
    return _to_numpy_tree(optimizer.state_dict())


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, saved: Mapping[str, Any], device: torch.device
) -> None:
    """Inverse of ``optimizer_state``; the moments go to ``device``."""
    state = {
        # copies: arrays from the object store are shared, read-only memory
        int(k): {n: torch.tensor(np.asarray(v)) for n, v in s.items()}
        for k, s in saved["state"].items()
    }
    optimizer.load_state_dict({"state": state, "param_groups": list(saved["param_groups"])})
    for s in optimizer.state.values():
        for n, v in s.items():
            if torch.is_tensor(v):
                s[n] = v.to(device) if n != "step" else v


def module_weights(module: nn.Module) -> Weights:
    """A module's ``state_dict`` as numpy arrays (copies), by name."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_module_weights(module: nn.Module, weights: Weights, owner: str) -> None:
    """Load ``module_weights`` output; a missing name or a shape mismatch raises
    ValueError naming it (``owner`` names the policy in the message)."""
    own = module.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"weights do not match {owner}'s model: missing {missing}, unexpected {unexpected}"
        )
    for name, value in weights.items():
        if tuple(np.shape(value)) != tuple(own[name].shape):
            raise ValueError(
                f"weight '{name}' has shape {tuple(np.shape(value))}, the model expects "
                f"{tuple(own[name].shape)}"
            )
    module.load_state_dict(
        {k: torch.from_numpy(np.array(v, copy=True)) for k, v in weights.items()}, strict=True
    )


def writable_array(array: Any) -> np.ndarray:
    """``array`` itself if it is C-contiguous and writable, else a copy that is."""
    array = np.ascontiguousarray(array)  # (a copy only if it was not C-contiguous)
    return array if array.flags.writeable else array.copy()


def _action_extras(logp: np.ndarray, values: np.ndarray, dist_inputs: np.ndarray) -> dict:
    """The per-step extras acting records."""
    return {
        SampleBatch.ACTION_LOGP: logp,
        SampleBatch.VF_PREDS: values,
        SampleBatch.ACTION_DIST_INPUTS: dist_inputs,
    }


class TorchPolicyGraph(PolicyGraph):
    """PolicyGraph on a torch ``nn.Module`` returning ``(dist_inputs, values)``.

    ``config`` is the trainer config; the fields read here are ``model``
    (ModelConfig), ``lr``, ``lr_schedule``, ``grad_clip`` and ``num_gpus``.  Pass
    ``model`` to use your own module, or name a registered one in
    ``config.model.custom_model`` (``hierl.register_model``; works from YAML files and
    checkpoints): it must return ``(dist_inputs, values)`` from ``forward(obs)`` and may
    define ``value(obs)`` (see ``hierl.models.networks.make_custom_model``).

    A *recurrent* model (``ModelConfig.use_lstm``, or your own module with
    ``is_recurrent = True``) instead defines ``get_initial_state() -> [arrays]`` (one
    agent's state), ``max_seq_len`` and ``forward(obs (N, T, ...), state [(N, ...)]) ->
    (dist_inputs (N, T, D), values (N, T), state_out)``.  Then ``compute_actions`` takes
    one state per row and returns the next one, sample batches carry the state at the
    start of every step (``state_in_0``, ``state_in_1``, ...) and ``seq_lens``, and
    ``model_outputs`` unrolls the model over those sequences.

    Attributes:
        is_recurrent: Whether the model is recurrent.
        max_seq_len: Longest training sequence (recurrent models only; else 0).
    """

    host_columns: tuple[str, ...] = ()
    """Columns ``to_tensors`` leaves in host memory on an accelerator: those the loss
    reads on the host (IMPALA's ``eps_id``, ``t`` and ``terminateds``, which mark its
    trajectory runs) or at a few rows only, moving those itself (``new_obs``: V after each
    run, through ``values_after``).  Saves copies both ways, and a whole frame column."""

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
        self.is_recurrent = bool(getattr(self.model, "is_recurrent", False))
        self._initial_state: list[np.ndarray] = []
        self.max_seq_len = 0
        if self.is_recurrent:
            self._initial_state = [
                np.asarray(s, dtype=np.float32) for s in self.model.get_initial_state()
            ]
            self.max_seq_len = int(getattr(self.model, "max_seq_len", ModelConfig.max_seq_len))
        self.optimizer = self.make_optimizer()
        self._numpy_actor = self._make_numpy_actor()
        self._param_names = [name for name, _ in self.model.named_parameters()]
        self._params = list(self.model.parameters())

    # -- construction hooks -------------------------------------------------------------
    @property
    def model_config(self) -> ModelConfig:
        """``config.model`` (the defaults when the config has none)."""
        return getattr(self.config, "model", None) or ModelConfig()

    def make_model(self) -> nn.Module:
        """Build the model ``config.model`` describes: its ``custom_model`` if set, else
        the default actor-critic (LSTM if ``use_lstm``)."""
        model_config = self.model_config
        if model_config.custom_model is not None:
            return make_custom_model(self.observation_space, self.action_space, model_config)
        return make_actor_critic(self.observation_space, self.action_space, model_config)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Build the torch optimizer (Adam with ``config.lr``)."""
        return make_adam(list(self.model.parameters()), self.config.lr, eps=1e-5)

    def _make_numpy_actor(self) -> NumpyActor | None:
        """The numpy actor over the model (``ModelConfig.numpy_acting``; CPU models
        only, which ``NumpyActor.mirror`` checks), or None."""
        return NumpyActor.mirror(self.model) if self.model_config.numpy_acting else None

    # -- act ---------------------------------------------------------------------------
    def compute_actions(
        self,
        obs_batch: np.ndarray,
        state_batches: list[np.ndarray] | None = None,
        explore: bool = True,
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Sample (or, with ``explore=False``, take the mode of) the action distribution.

        For a recurrent model ``state_batches`` holds one array per state tensor with one
        row per observation (None: every row starts from ``get_initial_state``), and
        the returned ``state_out`` is the state after this step, in the same layout.
        Small batches on a model ``NumpyActor`` mirrors act through it
        (``ModelConfig.numpy_acting``).
        """
        if self.is_recurrent:
            return self._compute_actions_recurrent(obs_batch, state_batches, explore)
        actor = self._numpy_actor
        if actor is not None and len(obs_batch) <= actor.max_rows and actor.is_current():
            actions, logp, values, dist_inputs = actor.act(obs_batch, explore)
            return actions, [], _action_extras(logp, values, dist_inputs)
        return self._compute_actions_torch(obs_batch, explore)

    @torch.no_grad()
    def _compute_actions_torch(
        self, obs_batch: np.ndarray, explore: bool
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        dist_inputs, values = self.model(torch.as_tensor(obs_batch, device=self.device))
        actions, extra = self._act(dist_inputs, values, explore)
        return actions, [], extra

    def _act(
        self, dist_inputs: torch.Tensor, values: torch.Tensor, explore: bool
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions sampled (or the mode) from the distribution, with the per-step extras."""
        dist = self.dist_class(dist_inputs)
        if explore:
            actions, logp = dist.sample_with_logp()
        else:
            actions = dist.deterministic_sample()
            logp = dist.logp(actions)
        extra = _action_extras(logp.cpu().numpy(), values.cpu().numpy(), dist_inputs.cpu().numpy())
        return actions.cpu().numpy(), extra

    @torch.no_grad()
    def _compute_actions_recurrent(
        self,
        obs_batch: np.ndarray,
        state_batches: list[np.ndarray] | None,
        explore: bool,
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        obs = torch.as_tensor(obs_batch, device=self.device).unsqueeze(1)
        state = self._state_tensors(state_batches, obs.shape[0])
        dist_inputs, values, state_out = self.model(obs, state)
        actions, extra = self._act(dist_inputs[:, 0], values[:, 0], explore)
        return actions, [s.cpu().numpy() for s in state_out], extra

    def _state_tensors(self, state_batches: list[np.ndarray] | None, n: int) -> list[torch.Tensor]:
        """Recurrent state tensors for ``n`` rows (the initial state when None/empty)."""
        if not state_batches:
            return [
                torch.from_numpy(s).to(self.device).expand(n, *s.shape) for s in self._initial_state
            ]
        if len(state_batches) != len(self._initial_state):
            raise ValueError(
                f"{type(self).__name__} has {len(self._initial_state)} recurrent state "
                f"tensors, got {len(state_batches)} state batches"
            )
        return [torch.as_tensor(np.asarray(s), device=self.device) for s in state_batches]

    def get_initial_state(self) -> list[np.ndarray]:
        """The model's recurrent state at an episode start (``[]`` for feed-forward models)."""
        return [s.copy() for s in self._initial_state]

    @torch.no_grad()
    def value(
        self, obs_batch: np.ndarray, state_batches: list[np.ndarray] | None = None
    ) -> np.ndarray:
        """State values V(obs) for a batch of preprocessed observations.

        A recurrent model reads one state per row (None: the initial state).
        """
        obs = torch.as_tensor(obs_batch, device=self.device)
        if self.is_recurrent:
            state = self._state_tensors(state_batches, obs.shape[0])
            return self.model(obs.unsqueeze(1), state)[1][:, 0].cpu().numpy()
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
            out[rows] = self.values_after(batch, rows).cpu().numpy()
        return out

    @torch.no_grad()
    def values_after(self, batch: Mapping[str, Any], rows: np.ndarray) -> torch.Tensor:
        """V(NEW_OBS) of the given rows of a batch of arrays or tensors, without gradient.

        A recurrent model evaluates V(NEW_OBS) in the state *after* the row's step: it
        re-runs that step from the row's recorded ``state_in`` (exactly the state the
        sampler carried on).
        """

        def take(value: Any) -> torch.Tensor:
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                return value[to_device(rows, value.device)].to(self.device)
            return to_device(np.asarray(value[rows]), self.device)

        new_obs = take(batch[SampleBatch.NEW_OBS])
        if not self.is_recurrent:
            if hasattr(self.model, "value"):
                return self.model.value(new_obs)
            return self.model(new_obs)[1]
        # CRUCIAL: V(s_T) must see the memory of the whole segment: unroll two steps,
        # (obs_T-1 from state_in_T-1) then new_obs, and read the value of the second.
        obs = take(batch[SampleBatch.OBS])
        state = [take(column) for column in self._state_in_columns(batch)]
        return self.model(torch.stack([obs, new_obs], dim=1), state)[1][:, 1]

    def _state_in_columns(self, batch: Mapping[str, Any], rows: Any = None) -> list[Any]:
        """The batch's ``state_in_i`` columns (at ``rows`` if given)."""
        names = [SampleBatch.STATE_IN + str(i) for i in range(len(self._initial_state))]
        missing = [n for n in names if n not in batch]
        if missing:
            raise ValueError(
                f"{type(self).__name__} is recurrent but the batch lacks the state columns "
                f"{missing} (sample it with a recurrent-aware sampler)"
            )
        return [batch[n] if rows is None else batch[n][rows] for n in names]

    def model_outputs(
        self, batch: Mapping[str, torch.Tensor], model: nn.Module | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dist_inputs (B, D), values (B,))`` of the model (or of ``model``, one of the
        same architecture such as a target network) for every row of a loss batch.

        Feed-forward: ``model(batch[OBS])``.  Recurrent: the rows are laid out as the
        padded ``(num_seqs, max(seq_lens))`` sequences of ``batch[SEQ_LENS]``, the model is
        unrolled over each from its first row's ``state_in`` (truncated BPTT: gradients stop
        at sequence starts), and the padded steps are dropped again, so every loss term is
        a mean over real steps only (padding is masked out) and rows keep their order.
        """
        model = self.model if model is None else model
        if not self.is_recurrent:
            return model(batch[SampleBatch.OBS])
        if SampleBatch.SEQ_LENS not in batch:
            raise ValueError(
                f"{type(self).__name__} is recurrent: its loss batch needs "
                f"{SampleBatch.SEQ_LENS!r} (SampleBatch.chop_into_sequences)"
            )
        obs = batch[SampleBatch.OBS]
        lens = batch[SampleBatch.SEQ_LENS].to(device=obs.device, dtype=torch.long)
        starts = torch.cumsum(lens, 0) - lens
        steps = torch.arange(int(lens.max()), device=obs.device)
        mask = steps[None, :] < lens[:, None]
        # Padded positions repeat the sequence's first row; the LSTM is causal, so they
        # cannot change the outputs of real steps, and they are dropped below.
        index = torch.where(mask, starts[:, None] + steps[None, :], starts[:, None])
        state = [s[starts] for s in self._state_in_columns(batch)]
        dist_inputs, values, _ = model(obs[index], state)
        return dist_inputs[mask], values[mask]

    @torch.no_grad()
    def compute_log_likelihoods(self, batch: SampleBatch) -> np.ndarray:
        """``log pi(a|s)`` of each row's logged ACTIONS under this policy (off-policy
        estimation); a recurrent batch needs its ``seq_lens``."""
        columns = [SampleBatch.OBS, SampleBatch.ACTIONS, SampleBatch.SEQ_LENS]
        columns += [k for k in batch if k.startswith(SampleBatch.STATE_IN)]
        tensors = self.to_tensors(SampleBatch({k: batch[k] for k in columns if k in batch}))
        dist_inputs, _ = self.model_outputs(tensors)
        logp = self.dist_class(dist_inputs).logp(tensors[SampleBatch.ACTIONS])
        return logp.cpu().numpy().astype(np.float64)

    # -- loss --------------------------------------------------------------------------
    @abc.abstractmethod
    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return ``(scalar loss, stats)`` for a batch of tensors keyed by column name."""

    def to_tensors(self, batch: SampleBatch | LazyRows) -> TensorBatch:
        """Convert a SampleBatch to tensors on this policy's device (a ``LazyRows``
        from ``device_rows`` is tensors there already and is returned as it is).

        Zero-copy on CPU for writable arrays; read-only ones (fetched from Ray's object
        store) are copied, since a tensor sharing read-only memory is unsafe to use.
        """
        if isinstance(batch, LazyRows):
            return batch  # type: ignore[return-value]  # a read-only TensorBatch
        batch.decompress_if_needed()
        out = {
            k: torch.from_numpy(writable_array(v))  # ~1.3 us a column; as_tensor takes ~3.8
            for k, v in batch.items()
            if k != SampleBatch.SEQ_LENS or v is not None
        }
        if self.device.type != "cpu":
            out = {k: v if k in self.host_columns else v.to(self.device) for k, v in out.items()}
        return out

    def device_rows(self, batch: SampleBatch) -> LazyRows | None:
        """On an accelerator, ``batch`` moved to the device once: minibatch SGD then takes
        each minibatch there (an index gather of the columns the loss reads) instead of
        shuffling every column in host memory and copying each minibatch over.  None on
        the CPU (minibatches are zero-copy views of the host arrays) and for sequence
        batches (split between whole sequences)."""
        if self.device.type == "cpu" or self.is_recurrent or SampleBatch.SEQ_LENS in batch:
            return None
        return LazyRows(self.to_tensors(batch), device=self.device)

    def _backward(self, batch: SampleBatch, clip: bool = True) -> dict[str, Any]:
        """Loss and gradients of ``batch`` (clipped unless ``clip=False``); the loss
        stats, ``total_loss`` and ``grad_gnorm`` as tensors, not yet read."""
        if self.is_recurrent and SampleBatch.SEQ_LENS not in batch:
            batch = SampleBatch(batch).chop_into_sequences(self.max_seq_len)
        loss, stats = self.loss(self.to_tensors(batch))
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        values = {**stats, "total_loss": loss.detach()}
        norm = self._clip_grad_norm() if clip else None
        if norm is not None:
            values["grad_gnorm"] = norm
        return values

    def _clip_grad_norm(self) -> torch.Tensor | None:
        """Clip the gradients' global norm to ``config.grad_clip``; the norm before
        clipping (a tensor on the device), or None when the config does not clip."""
        clip = getattr(self.config, "grad_clip", None)
        return clip_grad_norm(self._params, clip) if clip else None

    def _clipped_norm(self) -> dict[str, torch.Tensor]:
        norm = self._clip_grad_norm()
        return {} if norm is None else {"grad_gnorm": norm}

    def step_if_finite(
        self, values: Mapping[str, Any], batch: Mapping[str, Any] | None = None
    ) -> dict[str, float]:
        """This policy's optimizer step on the gradients in place, unless the loss or a
        gradient is not finite (``step_if_finite``); an applied step then calls
        ``after_update`` with its stats.  Returns the stats."""
        owner, norm = type(self).__name__, values.get("grad_gnorm")
        norm = norm if torch.is_tensor(norm) else None  # clipped here: its norm checks
        stats = step_if_finite(self.optimizer, self._params, values, owner, batch, norm)
        if not stats[NONFINITE_GRADS_SKIPPED]:
            self.after_update(stats)
        return stats

    def after_update(self, stats: Mapping[str, float]) -> None:
        """Called after each applied update of ``learn_on_batch`` (and ``multi_gpu``'s,
        with the stats averaged over its towers), never after a refused one.  A loss
        with running state commits it here, from the stats its ``loss`` reported
        (MARWIL's ``c^2``), so a refused update leaves that state alone and every tower's
        rows count.  Default: nothing."""

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """Compute the loss on ``batch``, clip gradients and take one optimizer step
        (refused, and reported, if the loss or a gradient is not finite)."""
        return self.step_if_finite(self._backward(batch), batch)

    def compute_gradients(
        self, batch: SampleBatch, clip: bool = True
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Gradients of the loss (clipped unless ``clip=False``) as numpy arrays.

        They are in ``gradient_names()`` order; a parameter the loss does not reach (e.g.
        the value head of a loss without a baseline) has a zero gradient.  A non-finite
        loss or gradient is returned as it is, with the stat
        ``NONFINITE_GRADS_SKIPPED`` 1 (0 otherwise):
        ``apply_gradients`` refuses such gradients.
        """
        values = self._backward(batch, clip=clip)
        values[NONFINITE_GRADS_SKIPPED] = ~grads_finite(self._params)
        stats = host_floats(values)
        if not math.isfinite(stats["total_loss"]):
            stats[NONFINITE_GRADS_SKIPPED] = 1.0
        grads = [
            torch.zeros_like(p, device="cpu").numpy()
            if p.grad is None
            else p.grad.detach().cpu().numpy().copy()
            for p in self.model.parameters()
        ]
        return grads, stats

    def apply_gradients(self, gradients: list[np.ndarray], clip: bool = False) -> dict[str, float]:
        """Load ``gradients`` into the parameters' ``.grad`` and take one optimizer step
        (refused, and reported, if one of them is not finite after clipping).

        ``clip=True`` clips their global norm to ``config.grad_clip`` first.
        """
        params = list(self.model.parameters())
        if len(gradients) != len(params):
            raise ValueError(f"got {len(gradients)} gradients for {len(params)} parameters")
        for p, g in zip(params, gradients, strict=True):
            # A copy: gradients from the object store are read-only, clipping writes.
            p.grad = torch.tensor(g, dtype=p.dtype, device=self.device).reshape(p.shape)
        values = self._clipped_norm() if clip else {}
        norm = values.get("grad_gnorm")
        return step_if_finite(self.optimizer, self._params, values, type(self).__name__, None, norm)

    def gradient_names(self) -> list[str]:
        """Weight names of the trainable parameters, in ``compute_gradients`` order."""
        return list(self._param_names)

    # -- weights and state -------------------------------------------------------------
    def get_weights(self) -> Weights:
        """Model ``state_dict`` as numpy arrays (copies)."""
        return module_weights(self.model)

    def set_weights(self, weights: Weights) -> None:
        """Load weights; a missing name or a shape mismatch raises ValueError naming it."""
        load_module_weights(self.model, weights, type(self).__name__)

    def get_state(self) -> dict[str, Any]:
        """Weights, optimizer moments and the global timestep."""
        state = super().get_state()
        state["optimizer"] = optimizer_state(self.optimizer)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore weights, optimizer moments and the global timestep."""
        super().set_state(state)
        if "optimizer" in state:
            load_optimizer_state(self.optimizer, state["optimizer"], self.device)

    def learning_rate(self, timestep: int) -> float:
        """``config.lr_schedule`` at ``timestep`` if one is set, else ``config.lr``."""
        schedule = getattr(self.config, "lr_schedule", None)
        return piecewise_linear(schedule, timestep) if schedule else float(self.config.lr)

    def on_global_var_update(self, global_vars: GlobalVars) -> None:
        """Track the timestep and follow ``config.lr_schedule`` if one is set."""
        super().on_global_var_update(global_vars)
        if getattr(self.config, "lr_schedule", None):
            lr = self.learning_rate(self.global_timestep)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
