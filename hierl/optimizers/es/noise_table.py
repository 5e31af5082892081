"""The shared noise table of Evolution Strategies.

Salimans et al. 2017 §2.1 ("Scaling and parallelizing ES"): every worker holds the same
large block of Gaussian noise, so a perturbation travels as one integer (its offset
``i``: ``ε = table[i : i + dim]``) instead of ``dim`` floats.  Here the table is created
once from a seed on the driver and placed once in the Ray object store; evaluators
receive its object ref as a task argument, which Ray resolves to a read-only numpy array
backed by the node's shared memory (no copy per worker or per task).
"""

from __future__ import annotations

from typing import Any

import numpy as np

DEFAULT_NOISE_SIZE = 2**24
"""Entries of the default table (64 MiB of float32; the paper's 250M would need 1 GB)."""


class SharedNoiseTable:
    """A float32 block of standard normal noise, addressed by offsets.

    Args:
        size: number of entries; must exceed the number of policy parameters.
        seed: seed of the generator that fills it (same seed → same table).
    """

    def __init__(self, size: int = DEFAULT_NOISE_SIZE, seed: int = 123):
        self.noise: np.ndarray = np.random.default_rng(seed).standard_normal(
            int(size), dtype=np.float32
        )
        self.ref: Any = None

    @property
    def size(self) -> int:
        """Number of entries."""
        return int(self.noise.size)

    def put(self) -> Any:
        """Place the table in the Ray object store (once) and return its object ref.

        Afterwards ``noise`` is the store's zero-copy view, so the driver does not keep a
        second private copy.
        """
        if self.ref is None:
            import ray

            self.ref = ray.put(self.noise)
            self.noise = ray.get(self.ref)
        return self.ref

    def check_dim(self, dim: int) -> None:
        """ValueError unless perturbations of ``dim`` entries fit in the table."""
        if not 0 < dim <= self.size:
            raise ValueError(
                f"the noise table has {self.size} entries, fewer than the policy's {dim} "
                "parameters; raise noise_size"
            )

    def sample_indices(self, rng: np.random.Generator, dim: int, count: int) -> np.ndarray:
        """``count`` uniformly drawn offsets of ``dim``-long slices."""
        return rng.integers(0, self.size - dim + 1, size=count, dtype=np.int64)

    def rows(self, indices: np.ndarray, dim: int) -> np.ndarray:
        """The perturbations at ``indices`` as a ``(len(indices), dim)`` float32 array."""
        return noise_rows(self.noise, indices, dim)


def noise_slice(noise: np.ndarray, index: int, dim: int) -> np.ndarray:
    """``ε = noise[index : index + dim]`` (a view: no copy of a shared table)."""
    return noise[int(index) : int(index) + dim]


def noise_rows(noise: np.ndarray, indices: np.ndarray, dim: int) -> np.ndarray:
    """Stack the slices at ``indices`` into ``(len(indices), dim)`` (one copy, no index array)."""
    windows = np.lib.stride_tricks.sliding_window_view(noise, dim)
    return windows[np.asarray(indices, dtype=np.int64)]
