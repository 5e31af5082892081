"""Exact splitting of a list of parameter arrays into K flat, contiguous shards.

The sharded parameter server of RLlib (ICML 2018, Fig. 4(d)), after Li et al. 2014
("Scaling Distributed Machine Learning with the Parameter Server", OSDI), keeps the
weights split over K server actors: every gradient is ``split`` into K pieces that go to
the K servers, and the weights are reassembled with ``concat`` from the K pieces the
servers send back.  Both directions must be exact for every parameter shape, so the
layout is deliberately simple:

    spec = ShardSpec.from_arrays(names, arrays, num_shards=3)
    shards = spec.split(arrays)          # 3 flat vectors, sizes differ by at most 1
    assert all((a == b).all() for a, b in zip(spec.concat(shards), arrays))

All arrays are raveled (C order) and concatenated into one flat vector, which is cut
into ``num_shards`` contiguous pieces of nearly equal size (the first ``total %
num_shards`` pieces are one element longer); a parameter may span several shards.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class ShardSpec:
    """The layout of named parameters in ``num_shards`` flat shards.

    Args:
        names: parameter names, in flattening order (unique; used in error messages).
        shapes: the shape of each parameter (``()`` for a scalar; zero-size allowed).
        dtypes: the floating dtype of each parameter.  The shards use the widest one
            (``np.result_type``), so the round trip is exact: every float dtype widens
            losslessly and is cast back on ``concat``.
        num_shards: how many shards, between 1 and the total number of elements.
            More shards than elements is an error rather than a silent clamp: a shard
            server holding nothing is almost certainly a configuration mistake.
    """

    def __init__(
        self,
        names: Sequence[str],
        shapes: Sequence[Sequence[int]],
        dtypes: Sequence[Any],
        num_shards: int,
    ):
        if not len(names) == len(shapes) == len(dtypes):
            raise ValueError(
                f"got {len(names)} names, {len(shapes)} shapes and {len(dtypes)} dtypes; "
                "need one of each per parameter"
            )
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if list(names).count(n) > 1})
            raise ValueError(f"parameter names must be unique; repeated: {dup}")
        self.names = [str(n) for n in names]
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.dtypes = [np.dtype(d) for d in dtypes]
        for name, dtype in zip(self.names, self.dtypes, strict=True):
            if not np.issubdtype(dtype, np.floating):
                raise ValueError(
                    f"parameter '{name}' has dtype {dtype}; only floating dtypes can be sharded"
                )
        self.dtype = np.result_type(*self.dtypes) if self.dtypes else np.dtype(np.float32)
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes, dtype=np.int64))).tolist()
        self.total_size = int(self.offsets[-1])
        if isinstance(num_shards, bool) or not 1 <= num_shards <= self.total_size:
            raise ValueError(
                f"num_shards={num_shards!r} is invalid: must be between 1 and the total "
                f"number of elements ({self.total_size})"
            )
        self.num_shards = int(num_shards)
        base, extra = divmod(self.total_size, self.num_shards)
        self.shard_sizes = [base + (k < extra) for k in range(self.num_shards)]
        self.bounds = np.concatenate(([0], np.cumsum(self.shard_sizes, dtype=np.int64))).tolist()
        """Shard ``k`` holds flat elements ``bounds[k]:bounds[k + 1]``."""

    @classmethod
    def from_arrays(
        cls, names: Sequence[str], arrays: Sequence[np.ndarray], num_shards: int
    ) -> ShardSpec:
        """The layout of ``arrays`` (their shapes and dtypes) in ``num_shards`` shards."""
        if len(names) != len(arrays):
            raise ValueError(f"got {len(names)} names for {len(arrays)} arrays")
        arrays = [np.asarray(a) for a in arrays]
        return cls(names, [a.shape for a in arrays], [a.dtype for a in arrays], num_shards)

    def __repr__(self) -> str:
        return (
            f"ShardSpec({len(self.names)} parameters, {self.total_size} {self.dtype} elements "
            f"in shards of {self.shard_sizes})"
        )

    def _ordered(self, arrays: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[Any]:
        if isinstance(arrays, Mapping):
            missing = [n for n in self.names if n not in arrays]
            if missing:
                raise ValueError(f"no array for parameter(s) {missing}")
            return [arrays[n] for n in self.names]
        if len(arrays) != len(self.names):
            raise ValueError(f"got {len(arrays)} arrays for {len(self.names)} parameters")
        return list(arrays)

    def split(self, arrays: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """``num_shards`` flat shards of ``arrays`` (a list in ``names`` order, or by name).

        Each array must have its parameter's shape; a mismatch raises ValueError naming
        the parameter.  The shards are views of one fresh buffer (never of the inputs).
        """
        flat = np.empty(self.total_size, dtype=self.dtype)
        for i, value in enumerate(self._ordered(arrays)):
            value = np.asarray(value)
            if value.shape != self.shapes[i]:
                raise ValueError(
                    f"parameter '{self.names[i]}' has shape {value.shape}, "
                    f"expected {self.shapes[i]}"
                )
            flat[self.offsets[i] : self.offsets[i + 1]] = value.ravel()
        return [flat[self.bounds[k] : self.bounds[k + 1]] for k in range(self.num_shards)]

    def concat(self, shards: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The parameters (original shapes and dtypes, in ``names`` order) from the shards.

        Exact inverse of ``split``.  A wrong number of shards or a shard of the wrong
        size raises ValueError naming the shard and the parameters it holds.
        """
        if len(shards) != self.num_shards:
            raise ValueError(f"got {len(shards)} shards, expected {self.num_shards}")
        for k, shard in enumerate(shards):
            if np.ndim(shard) != 1 or np.size(shard) != self.shard_sizes[k]:
                raise ValueError(
                    f"shard {k} (parameters {self.shard_params(k)}) has shape "
                    f"{np.shape(shard)}, expected ({self.shard_sizes[k]},)"
                )
        flat = np.concatenate([np.asarray(s, dtype=self.dtype) for s in shards])
        return [
            flat[self.offsets[i] : self.offsets[i + 1]].reshape(shape).astype(dtype, copy=True)
            for i, (shape, dtype) in enumerate(zip(self.shapes, self.dtypes, strict=True))
        ]

    def shard_params(self, k: int) -> list[str]:
        """Names of the parameters with at least one element in shard ``k``."""
        lo, hi = self.bounds[k], self.bounds[k + 1]
        spans = itertools.pairwise(self.offsets)
        return [
            n for n, (a, b) in zip(self.names, spans, strict=True) if lo < b and a < hi and a < b
        ]
