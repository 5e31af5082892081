"""Collective communication among evaluator processes over ``torch.distributed``.

RLlib (ICML 2018) §2.1 and Fig. 4(a): the ``allreduce`` policy optimizer averages
gradients among the evaluators themselves instead of routing them through the driver.
This module holds the process-group plumbing it needs, kept free of any RL logic:

* ``init_group`` / ``destroy_group``: join or leave one group per process (gloo on CPU,
  NCCL on CUDA), rendezvous at ``tcp://<rank 0 host>:<port>``;
* ``allreduce_mean``: average a list of numpy arrays across the group in ONE collective
  call over one contiguous float32 buffer (``torch.from_numpy``, no copies on CPU);
* ``allreduce_min_int``: agree on a count (e.g. rows every rank can train on), so that
  all ranks issue the same number of collective calls (a mismatch would deadlock).

Without a group (or with a group of one) every function is the identity, so the same
code runs in a single process.
"""

from __future__ import annotations

import dataclasses
import datetime
import socket
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

DEFAULT_GROUP_TIMEOUT_S = 180.0
"""How long rendezvous and each collective call may block before raising."""


@dataclasses.dataclass(frozen=True)
class GroupInfo:
    """The process group this process joined through ``init_group``."""

    rank: int
    world_size: int
    address: str
    """``host:port`` of the rendezvous (rank 0's TCP store)."""
    backend: str
    """``gloo`` (CPU tensors) or ``nccl`` (CUDA tensors)."""


_GROUP: GroupInfo | None = None


def free_port() -> int:
    """A TCP port that is free on this host right now (for a rendezvous on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", 0))
        return int(s.getsockname()[1])


def init_group(
    rank: int,
    world_size: int,
    address: str,
    backend: str = "gloo",
    timeout_s: float = DEFAULT_GROUP_TIMEOUT_S,
) -> GroupInfo:
    """Join the group of ``world_size`` processes that rendezvous at ``address`` (``host:port``).

    Every rank must call this concurrently with the same ``address``, ``world_size`` and
    ``backend``; it blocks until all have joined (at most ``timeout_s``, which also bounds
    every later collective call).  Calling it again with the same arguments is a no-op;
    with different ones, the current group is left first.

    Raises:
        ValueError: for a bad rank, world size, address or backend.
        RuntimeError: if this process already has a ``torch.distributed`` group that it
            did not create through this function.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is invalid for world_size {world_size}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend {backend!r} is not supported; valid: 'gloo', 'nccl'")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {address!r} must be 'host:port'")
    global _GROUP
    info = GroupInfo(rank, world_size, address, backend)
    if info == _GROUP:
        return _GROUP
    if _GROUP is not None:
        destroy_group()
    elif dist.is_initialized():
        raise RuntimeError(
            "this process already has a torch.distributed process group that hierl did not "
            "create; leave it (torch.distributed.destroy_process_group()) before joining"
        )
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{address}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    _GROUP = info
    return info


def destroy_group() -> None:
    """Leave the group joined through ``init_group`` (no-op if there is none)."""
    global _GROUP
    if _GROUP is not None:
        _GROUP = None
        if dist.is_initialized():
            dist.destroy_process_group()


def current_group() -> GroupInfo | None:
    """The group joined through ``init_group``, or None."""
    return _GROUP


def world_size() -> int:
    """Size of the current group (1 without one)."""
    return _GROUP.world_size if _GROUP is not None else 1


def rank() -> int:
    """This process's rank in the current group (0 without one)."""
    return _GROUP.rank if _GROUP is not None else 0


def _device() -> torch.device:
    if _GROUP is not None and _GROUP.backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def allreduce_mean(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The element-wise mean of ``arrays`` over all ranks, in one collective call.

    Every rank passes arrays of the same shapes in the same order.  They are packed into
    one contiguous float32 buffer, summed with a single ``all_reduce`` and divided by the
    world size; the results are float32 views of that buffer with the input shapes.
    Every rank receives bit-identical results.  Without a group (or a group of one) the
    inputs are returned unchanged.
    """
    if world_size() == 1:
        return list(arrays)
    shapes = [np.shape(a) for a in arrays]
    sizes = [int(np.prod(s)) for s in shapes]
    flat = np.empty(sum(sizes), dtype=np.float32)
    offsets = np.cumsum([0, *sizes])
    for a, start, end in zip(arrays, offsets[:-1], offsets[1:], strict=True):
        flat[start:end] = np.ravel(a)
    device = _device()
    tensor = torch.from_numpy(flat)  # shares memory with ``flat``
    if device.type != "cpu":
        tensor = tensor.to(device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    tensor /= world_size()
    if device.type != "cpu":
        flat = tensor.cpu().numpy()
    return [
        flat[start:end].reshape(shape)
        for start, end, shape in zip(offsets[:-1], offsets[1:], shapes, strict=True)
    ]


def allreduce_min_int(x: int) -> int:
    """The minimum of ``x`` over all ranks (``x`` itself without a group)."""
    if world_size() == 1:
        return int(x)
    tensor = torch.tensor([int(x)], dtype=torch.int64, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())
