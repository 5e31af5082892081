"""Device towers of ``MultiDeviceLearner``.

A tower is one copy of the policy's model on one device, evaluated on its own shard of
the loaded train batch.  This module holds what a single tower is and how the towers
are kept in step, independent of how the learner schedules epochs and minibatches:

* ``resolve_devices`` chooses one device per tower (tower 0 is the policy's own);
* ``tower_view`` is a shallow copy of the policy that evaluates the loss on a
  tower's model (its minibatch is a ``LazyRows`` of its
  shard);
* ``tower_backward`` is one tower's forward and backward pass;
* ``average_grads`` averages the towers' gradients into the master model, and
  ``sync_towers`` copies the master's parameters and buffers back out to them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from hierl.torch_policy_graph import TorchPolicyGraph


def resolve_devices(
    master: torch.device, devices: Sequence[torch.device | str] | None, num_towers: int
) -> list[torch.device]:
    """One device per tower; ``devices[0]`` (the result's) is always ``master``.

    With ``devices`` given, it is checked against ``num_towers`` (0 = any length) and
    ``master``.  Otherwise CPU policies get ``max(1, num_towers)`` towers on ``master``
    and CUDA policies the visible GPUs round-robin starting with ``master``'s (one per
    visible GPU when ``num_towers`` is 0).
    """
    if devices is not None:
        out = [torch.device(d) for d in devices]
        if not out or (num_towers and num_towers != len(out)):
            raise ValueError(
                f"devices {[str(d) for d in out]} do not match num_towers={num_towers}"
            )
        if out[0] != master:
            raise ValueError(
                f"devices[0] = {out[0]} must be the policy's device ({master}): "
                "tower 0 is the policy's own model"
            )
        return out
    if master.type != "cuda":
        return [master] * max(1, num_towers)
    visible = torch.cuda.device_count()
    first = master.index or 0
    count = num_towers or visible
    return [torch.device("cuda", (first + i) % visible) for i in range(count)]


def tower_view(policy: TorchPolicyGraph, model: nn.Module, device: torch.device) -> Any:
    """A shallow copy of ``policy`` whose ``model`` and ``device`` are a tower's.

    ``policy.loss`` reads ``self.model``; evaluating it on a view (rather than swapping
    ``policy.model`` back and forth) lets towers run concurrently in threads.  Views are
    rebuilt for each update so they see current non-weight attributes (e.g. PPO's
    adaptive ``kl_coeff``, MARWIL's ``c^2``); the loss must therefore not mutate the
    policy: running state moves in ``after_update``, on the policy itself.
    """
    view = copy.copy(policy)
    view.model = model
    view.device = device
    return view


def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The parameters then the buffers of ``model``: what a tower copies from the master."""
    return [*model.parameters(), *model.buffers()]


def tower_backward(
    view: Any, batch: Mapping[str, torch.Tensor], zero_grad: Callable[..., None]
) -> tuple[torch.Tensor, dict]:
    """Forward and backward of one tower on its slice: ``(detached loss, loss stats)``."""
    zero_grad(set_to_none=False)
    loss, stats = view.loss(batch)
    loss.backward()
    return loss.detach(), stats


def average_grads(master: nn.Module, towers: Sequence[nn.Module]) -> None:
    """Master ``.grad`` = mean of its own and the other ``towers``' gradients.

    The towers evaluate equal slice sizes, so the plain mean is the gradient of the
    loss on their union; ``towers`` excludes the master itself.
    """
    params = list(master.parameters())
    dst: list[torch.Tensor] = []
    src: list[torch.Tensor] = []
    for tower in towers:
        for p, q in zip(params, tower.parameters(), strict=True):
            if q.grad is None:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dst.append(p.grad)
            src.append(q.grad.to(p.device, non_blocking=True))
    if dst:
        torch._foreach_add_(dst, src)
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, 1.0 / (len(towers) + 1))


@torch.no_grad()
def sync_towers(
    master: nn.Module,
    master_device: torch.device,
    towers: Sequence[nn.Module],
    devices: Sequence[torch.device],
) -> None:
    """Copy the master's parameters and buffers into every other tower.

    ``towers`` (excluding the master) live on ``devices``; towers on ``master_device``
    are copied in one fused call, the others tensor by tensor (non-blocking).
    """
    source = state_tensors(master)
    for tower, device in zip(towers, devices, strict=True):
        if device == master_device:
            torch._foreach_copy_(state_tensors(tower), source)
        else:
            for t, m in zip(state_tensors(tower), source, strict=True):
                t.copy_(m, non_blocking=True)
