"""Moving data between host memory and the device a policy learns on.

On a GPU, two habits keep the device busy while the host queues work: small host arrays
go over through pinned memory without blocking (``to_device``), and values come back
in one read per update rather than one per number (``host_floats``).  On the CPU
both are plain conversions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host array (an index, a mask) as a tensor on ``device``.  To a GPU it goes
    through pinned memory without blocking: a copy from pageable memory would first wait
    for every kernel queued on the stream, stalling a loss midway."""
    tensor = torch.as_tensor(array)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def host_floats(values: Mapping[str, Any]) -> dict[str, float]:
    """``float`` of each value, in order; the tensors among them are read from each device
    in one transfer.  On a GPU each ``float(tensor)`` waits for the kernels queued before
    it, idling the device while the host queues the next ones: one read per update, not
    one per statistic."""
    out = {k: float(v) for k, v in values.items() if not torch.is_tensor(v)}
    by_device: dict[torch.device, list[str]] = {}
    for k, v in values.items():
        if torch.is_tensor(v):
            by_device.setdefault(v.device, []).append(k)
    for keys in by_device.values():
        stacked = torch.stack([values[k].detach().reshape(()).to(torch.float64) for k in keys])
        out.update(zip(keys, stacked.tolist(), strict=True))
    return {k: out[k] for k in values}
