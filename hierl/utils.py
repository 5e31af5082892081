"""Small helpers shared across hierl: seeding the global RNGs, piecewise-linear schedules.

This module imports nothing from hierl (only the standard library and numpy; torch is
imported inside :func:`seed_everything`), so any layer can use it and
:func:`piecewise_linear` works without torch.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np


def seed_everything(seed: int | None) -> None:
    """Seed Python, numpy and torch global RNGs (torch samples actions)."""
    if seed is None:
        return
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def piecewise_linear(schedule: Sequence[Sequence[float]], t: float) -> float:
    """Interpolate ``[[t0, v0], [t1, v1], ...]`` at ``t`` (clamped at both ends)."""
    points = sorted((float(a), float(b)) for a, b in schedule)
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t < t1:
            return v0 + (t - t0) / (t1 - t0) * (v1 - v0)
    return points[-1][1]
