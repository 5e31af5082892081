"""Sum and min segment trees over numpy arrays, the index of prioritized experience replay.

Schaul et al. 2016, "Prioritized Experience Replay" (https://arxiv.org/abs/1511.05952),
Appendix B.2.1: proportional prioritization samples row ``i`` with probability
``p_i / sum_k p_k`` through a sum tree (O(log N) updates and prefix-sum descents); the
min tree gives the smallest priority, which normalises the importance weights.

The trees are flat arrays of ``2 * size`` nodes (``size`` = capacity rounded up to a
power of two, leaves at ``[size, 2 * size)``, root at 1).  Writes and prefix-sum
descents are vectorised: one numpy operation per tree level, never a Python loop over
items.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def last_write_wins(indexes: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicate ``indexes``, keeping for each the value of its LAST occurrence.

    numpy does not define which write wins in ``a[idx] = v`` when ``idx`` repeats; this
    makes "the last one" explicit, like a Python loop of single writes would.  Returns
    ``(unique_indexes, values)`` (indexes sorted), ``values`` broadcast to ``indexes``.
    """
    idx = np.asarray(indexes, dtype=np.int64).reshape(-1)
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    if vals.size not in (1, idx.size):
        raise ValueError(f"got {vals.size} values for {idx.size} indexes")
    vals = np.broadcast_to(vals, idx.shape)
    unique, first_in_reversed = np.unique(idx[::-1], return_index=True)
    return unique, vals[len(idx) - 1 - first_in_reversed]


class SegmentTree:
    """A complete binary tree reducing its leaves with ``operation`` (a numpy ufunc).

    Args:
        capacity: number of leaves addressable as ``0..capacity-1`` (>= 1).
        operation: an associative, commutative binary ufunc (``np.add``, ``np.minimum``).
        neutral: the operation's neutral element (the initial value of every leaf).
    """

    def __init__(self, capacity: int, operation: np.ufunc, neutral: float):
        if int(capacity) < 1:
            raise ValueError(f"segment tree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._depth = (self.capacity - 1).bit_length()
        self._size = 1 << self._depth
        self._operation = operation
        self._neutral = float(neutral)
        self._tree = np.full(2 * self._size, self._neutral, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's array (fixed by ``capacity``)."""
        return self._tree.nbytes

    def _leaf_indexes(self, indexes: Any) -> np.ndarray:
        idx = np.asarray(indexes)
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"segment tree indexes must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            bad = idx[(idx < 0) | (idx >= self.capacity)]
            raise IndexError(
                f"segment tree indexes {bad[:5].tolist()} out of range [0, {self.capacity})"
            )
        return idx

    def __setitem__(self, indexes: Any, values: Any) -> None:
        """Set leaves ``indexes`` (int or int array) to ``values`` (scalar or array).

        Repeated indexes in one call: the last occurrence wins (see ``last_write_wins``).
        The ancestors are then recomputed bottom-up, one numpy operation per level.
        """
        idx, vals = last_write_wins(self._leaf_indexes(indexes), values)
        if not idx.size:
            return
        nodes = idx + self._size
        self._tree[nodes] = vals
        # Parents shared by several written leaves are recomputed more than once, always
        # to the same value: cheaper than deduplicating every level.
        for _ in range(self._depth):
            nodes >>= 1
            self._tree[nodes] = self._operation(self._tree[2 * nodes], self._tree[2 * nodes + 1])

    def __getitem__(self, indexes: Any) -> Any:
        """Leaf value(s): a float for an int index, an array for an index array."""
        idx = self._leaf_indexes(indexes)
        out = self._tree[idx + self._size]
        return float(out) if np.ndim(out) == 0 else out

    def reduce(self, start: int = 0, end: int | None = None) -> float:
        """``operation`` over leaves ``[start, end)`` (``end=None``: capacity).

        An empty range gives the neutral element.
        """
        end = self.capacity if end is None else int(end)
        start = int(start)
        if not 0 <= start <= end <= self.capacity:
            raise ValueError(
                f"range [{start}, {end}) is not within [0, {self.capacity}] (need start <= end)"
            )
        if start == 0 and end == self.capacity:
            return float(self._tree[1])
        result = self._neutral
        lo, hi = start + self._size, end + self._size
        while lo < hi:
            if lo & 1:
                result = self._operation(result, self._tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                result = self._operation(result, self._tree[hi])
            lo >>= 1
            hi >>= 1
        return float(result)


class SumSegmentTree(SegmentTree):
    """Segment tree of sums (leaves start at 0) with vectorised prefix-sum search."""

    def __init__(self, capacity: int):
        super().__init__(capacity, np.add, 0.0)

    def sum(self, start: int = 0, end: int | None = None) -> float:
        """Sum of leaves ``[start, end)``."""
        return self.reduce(start, end)

    def find_prefixsum_idx(self, prefixsums: Any) -> np.ndarray:
        """For each ``p``: the highest index ``i`` in ``[0, capacity)`` with ``sum(0, i) <= p``.

        For ``p < sum()`` that is the leaf whose cumulative interval holds ``p`` (so
        zero-valued leaves are never returned); for ``p >= sum()`` it is ``capacity - 1``.
        Equivalent to ``np.searchsorted(np.cumsum(leaves), p, side="right")`` clipped to
        ``capacity - 1``.  Prefix sums must be finite and >= 0.
        """
        p = np.asarray(prefixsums, dtype=np.float64)
        bad = ~np.isfinite(p) | (p < 0)
        if bad.any():
            raise ValueError(f"prefix sums must be finite and >= 0, got {p[bad][:5].tolist()}")
        node = np.ones(p.shape, dtype=np.int64)
        # CRUCIAL: compare p with the accumulated left sums instead of subtracting them
        # from p, so rounding cannot move a prefix sum across a leaf boundary.
        base = np.zeros(p.shape, dtype=np.float64)
        for _ in range(self._depth):
            left = 2 * node
            left_sum = base + self._tree[left]
            go_right = p >= left_sum
            base = np.where(go_right, left_sum, base)
            node = left + go_right
        return np.minimum(node - self._size, self.capacity - 1)


class MinSegmentTree(SegmentTree):
    """Segment tree of minima (leaves start at +inf)."""

    def __init__(self, capacity: int):
        super().__init__(capacity, np.minimum, np.inf)

    def min(self, start: int = 0, end: int | None = None) -> float:
        """Minimum of leaves ``[start, end)`` (+inf for an empty range)."""
        return self.reduce(start, end)
