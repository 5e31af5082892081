"""Proportional prioritized replay, and ``make_replay_buffer`` choosing it or uniform replay.

Prioritized replay as in Schaul et al. 2016, "Prioritized Experience Replay"
(https://arxiv.org/abs/1511.05952), proportional variant (§3.3): row ``i`` is sampled
with probability ``P(i) = p_i^alpha / sum_k p_k^alpha`` and its loss weighted by
``w_i = (N * P(i))^-beta / max_j w_j`` (§3.4), the maximum taken over the whole buffer,
i.e. at the smallest priority.  New rows enter at the largest priority seen so far
(Algorithm 1, line 6), so every row is replayed at least once with high probability;
only a caller that passes initial priorities to ``add`` (Ape-X's evaluators, or the
``replay`` optimizer's ``worker_side_prioritization``) overrides that.

The rows themselves are stored by the uniform ``ReplayBuffer`` this buffer extends
(``hierl.optimizers.replay.buffer``); the priorities live in a sum and a min segment
tree (``hierl.optimizers.replay.segment_tree``) over the same ring indexes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.optimizers.replay.buffer import ReplayBuffer
from hierl.optimizers.replay.segment_tree import MinSegmentTree, SumSegmentTree, last_write_wins
from hierl.sample_batch import SampleBatch


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, §3.3-3.4).

    Args:
        capacity: rows kept (>= 1).
        alpha: prioritization exponent; 0 is uniform, 1 fully proportional.
        seed: seeds sampling.

    ``sum_tree`` and ``min_tree`` hold ``priority ** alpha`` per row.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        seed: int | None = None,
        frame_storage: str = "auto",
        frame_capacity: int | None = None,
    ):
        super().__init__(capacity, seed, frame_storage, frame_capacity)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = float(alpha)
        self.max_priority = 1.0
        self.sum_tree = SumSegmentTree(self.capacity)
        self.min_tree = MinSegmentTree(self.capacity)
        self._priorities = np.zeros(self.capacity, dtype=np.float64)

    def add(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> None:
        """Store the rows at ``priorities`` (finite, > 0, one per row) or the max priority."""
        if priorities is not None:
            priorities = self._checked_priorities(priorities, batch.count)
        idx = self._write(batch)
        if priorities is None:
            self._set_priorities(idx, np.full(len(idx), self.max_priority))
        else:
            self._set_priorities(idx, priorities[len(priorities) - len(idx) :])

    def sample(self, num_items: int, beta: float = 0.0) -> SampleBatch:
        """``num_items`` rows with ``P(i) ∝ p_i^alpha`` and importance weights for ``beta``.

        Stratified: the total priority mass is split into ``num_items`` equal segments
        and one row is drawn from each.  ``PRIO_WEIGHTS = (N P(i))^-beta / max weight``.
        """
        self._check_sample_args(num_items, beta)
        filled = self._filled
        total = self.sum_tree.sum(0, filled)
        prefix = (np.arange(num_items) + self._rng.random(num_items)) * (total / num_items)
        # Rounding can put a prefix sum at or past the end: stay on stored rows.
        idx = np.minimum(self.sum_tree.find_prefixsum_idx(prefix), filled - 1)
        if self._size < filled:  # rows dropped early have no mass but can end a search
            idx = np.where(self._is_live(idx), idx, (self.num_added - 1) % self.capacity)
        p_min = self.min_tree.min(0, filled) / total
        weights = (self.sum_tree[idx] / total / p_min) ** -beta  # (N P(i))^-b / (N P_min)^-b
        return self._gather(idx, weights.astype(np.float32))

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities (finite, > 0) of stored rows; repeated indexes: last wins.

        Rows dropped early since they were sampled (frame storage) are skipped."""
        idx = np.asarray(indexes)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise ValueError(f"indexes must be a 1-D integer array, got {idx.dtype} {idx.shape}")
        priorities = self._checked_priorities(priorities, len(idx))
        filled = self._filled
        if idx.size and (idx.min() < 0 or idx.max() >= filled):
            raise ValueError(
                f"indexes {idx[(idx < 0) | (idx >= filled)][:5].tolist()} are not stored "
                f"rows [0, {filled})"
            )
        if self._size < filled:
            live = self._is_live(idx)
            idx, priorities = idx[live], priorities[live]
        self._set_priorities(idx, priorities)

    def _checked_priorities(self, priorities: Any, count: int) -> np.ndarray:
        p = np.asarray(priorities, dtype=np.float64)
        if p.shape != (count,):
            raise ValueError(f"need {count} priorities (one per row), got shape {p.shape}")
        bad = ~(np.isfinite(p) & (p > 0))
        if bad.any():
            raise ValueError(f"priorities must be finite and > 0, got {p[bad][:5].tolist()}")
        return p

    def _set_priorities(self, idx: np.ndarray, priorities: np.ndarray) -> None:
        idx, priorities = last_write_wins(idx, priorities)
        self._priorities[idx] = priorities
        scaled = priorities**self.alpha
        self.sum_tree[idx] = scaled
        self.min_tree[idx] = scaled
        if priorities.size:
            self.max_priority = max(self.max_priority, float(priorities.max()))

    def _forget(self, positions: np.ndarray) -> None:
        """Rows dropped early get no sampling mass (and +inf in the min tree)."""
        self._priorities[positions] = 0.0
        self.sum_tree[positions] = np.zeros(len(positions))
        self.min_tree[positions] = np.full(len(positions), np.inf)

    @property
    def nbytes(self) -> int:
        """Row storage plus the priority array and both segment trees."""
        trees = (self.sum_tree, self.min_tree)
        return super().nbytes + self._priorities.nbytes + sum(t.nbytes for t in trees)

    def stats(self) -> dict[str, float]:
        """Adds ``max_priority`` and the ``mean_priority`` of the stored rows."""
        stored = self._priorities[: self._filled]
        mean = float(stored[stored > 0].mean()) if self._size else 0.0
        return {**super().stats(), "max_priority": self.max_priority, "mean_priority": mean}

    def get_state(self) -> dict[str, Any]:
        """Adds the stored rows' priorities and the running maximum."""
        return {
            **super().get_state(),
            "priorities": self._priorities[: self._filled].copy(),
            "max_priority": self.max_priority,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore rows, priorities (trees rebuilt with this buffer's alpha) and counters."""
        super().set_state(state)
        self.sum_tree = SumSegmentTree(self.capacity)
        self.min_tree = MinSegmentTree(self.capacity)
        self._priorities[:] = 0.0
        positions = np.arange(self._filled)
        self._set_priorities(positions, np.asarray(state["priorities"]))
        self._forget(positions[~self._is_live(positions)])
        self.max_priority = float(state["max_priority"])


def make_replay_buffer(
    capacity: int,
    prioritized: bool,
    alpha: float = 0.6,
    seed: int | None = None,
    frame_storage: str = "auto",
) -> ReplayBuffer:
    """A ``PrioritizedReplayBuffer`` if ``prioritized`` else a uniform ``ReplayBuffer``;
    ``frame_storage`` as in ``ReplayBuffer``."""
    if prioritized:
        return PrioritizedReplayBuffer(
            capacity, alpha=alpha, seed=seed, frame_storage=frame_storage
        )
    return ReplayBuffer(capacity, seed=seed, frame_storage=frame_storage)
