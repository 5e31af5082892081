"""Small helpers shared across hierl: seeding the global RNGs, piecewise-linear schedules,
content hashes of arrays.

This module imports nothing from hierl (only the standard library and numpy; torch is
imported inside ``seed_everything``), so any layer can use it and
``piecewise_linear`` works without torch.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def seed_everything(seed: int | None) -> None:
    """Seed Python, numpy and torch global RNGs (torch samples actions)."""
    if seed is None:
        return
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def round_seed(seed: int | None, index: int) -> int | None:
    """The seed of round ``index`` of something seeded by ``seed`` (an evaluation's env
    resets): ``seed`` itself for round 0, a ``SeedSequence`` draw from both after, so
    rounds differ from each other and from nearby seeds; None stays None (unseeded)."""
    if seed is None or index == 0:
        return seed
    return int(np.random.SeedSequence([seed % 2**64, index]).generate_state(1)[0])


def piecewise_linear(schedule: Sequence[Sequence[float]], t: float) -> float:
    """Interpolate ``[[t0, v0], [t1, v1], ...]`` at ``t`` (clamped at both ends)."""
    points = sorted((float(a), float(b)) for a, b in schedule)
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t < t1:
            return v0 + (t - t0) / (t1 - t0) * (v1 - v0)
    return points[-1][1]


def array_digest(tree: Mapping[str, Any]) -> str:
    """SHA-256 (hex) over a nested mapping of arrays: each leaf's key path, dtype, shape
    and bytes, keys in sorted order, so equal contents give equal digests in any process
    and whatever the order of the dicts (weights, filter statistics)."""
    h = hashlib.sha256()

    def feed(path: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key in sorted(value, key=str):
                feed(f"{path}/{key}", value[key])
            return
        array = np.ascontiguousarray(value)
        h.update(f"{path}:{array.dtype.str}:{array.shape};".encode())
        h.update(array.tobytes())

    feed("", tree)
    return h.hexdigest()
