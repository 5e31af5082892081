"""Experience replay: the uniform ``ReplayBuffer`` and its ring storage of rows.

Uniform replay as in DQN (Mnih et al. 2015, "Human-level control through deep
reinforcement learning"): every stored row is sampled with equal probability, with
replacement.  Proportional prioritized replay (Schaul et al. 2016) subclasses this buffer
in :mod:`hierl.optimizers.replay.prioritized`, which also holds the factory
``make_replay_buffer`` that picks one of the two.

Rows live in preallocated column arrays used as a ring (bounded memory, newest
``capacity`` rows kept); sampling returns a ``SampleBatch`` with the importance weights
in ``PRIO_WEIGHTS`` and the row indexes in ``BATCH_INDEXES`` (for priority updates).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.sample_batch import SampleBatch


class ReplayBuffer:
    """Uniform replay over the newest ``capacity`` rows.

    Args:
        capacity: rows kept (>= 1); older rows are overwritten first.
        seed: seeds sampling (None: fresh entropy).
    """

    def __init__(self, capacity: int, seed: int | None = None):
        if int(capacity) < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.num_added = 0
        self.num_sampled = 0
        self._columns: dict[str, np.ndarray] = {}
        self._next = 0
        self._size = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        """Rows stored (at most ``capacity``)."""
        return self._size

    # -- adding ------------------------------------------------------------------------
    def add(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> None:
        """Store the rows of ``batch`` (compressed columns are decompressed).

        The first batch fixes the columns, their dtypes and per-row shapes; a later batch
        with other columns, or values that do not fit, raises ValueError naming them.
        ``priorities`` are ignored by the uniform buffer.
        """
        self._write(batch)

    def _write(self, batch: SampleBatch) -> np.ndarray:
        """Store ``batch``'s rows; return the buffer indexes of its newest ``len`` rows.

        A batch longer than the buffer keeps only its last ``capacity`` rows; the returned
        indexes belong to those (the last ``len(indexes)`` rows of the batch).
        """
        if not isinstance(batch, SampleBatch):
            raise TypeError(f"replay buffers store SampleBatch rows, got {type(batch).__name__}")
        if SampleBatch.SEQ_LENS in batch:
            raise ValueError("replay of recurrent batches (with 'seq_lens') is not supported")
        # A shallow copy, so decompressing does not modify the caller's batch.
        batch = SampleBatch(batch).decompress_if_needed()
        if not self._columns:
            self._allocate(batch)
        self._check_columns(batch)
        n = batch.count
        rows = slice(max(0, n - self.capacity), n)
        # Row j goes where a row-by-row ring would put it: (next + j) % capacity.
        idx = (self._next + np.arange(rows.start, n)) % self.capacity
        for k, col in self._columns.items():
            col[idx] = batch[k][rows]
        self.num_added += n
        self._next = (self._next + n) % self.capacity
        self._size = min(self.capacity, self._size + n)
        return idx

    def _allocate(self, batch: SampleBatch) -> None:
        objects = sorted(k for k, v in batch.items() if v.dtype.hasobject)
        if objects:
            raise ValueError(f"replay buffers cannot store object-dtype columns {objects}")
        self._columns = {
            k: np.empty((self.capacity, *v.shape[1:]), dtype=v.dtype) for k, v in batch.items()
        }

    def _check_columns(self, batch: SampleBatch) -> None:
        missing = sorted(set(self._columns) - set(batch))
        extra = sorted(set(batch) - set(self._columns))
        if missing or extra:
            raise ValueError(
                f"batch columns do not match the replay buffer's: missing {missing}, "
                f"unexpected {extra}"
            )
        for k, col in self._columns.items():
            v = batch[k]
            if v.shape[1:] != col.shape[1:] or not np.can_cast(v.dtype, col.dtype, "same_kind"):
                raise ValueError(
                    f"column '{k}' has rows of shape {v.shape[1:]} and dtype {v.dtype}; the "
                    f"replay buffer stores shape {col.shape[1:]} and dtype {col.dtype}"
                )

    # -- sampling ----------------------------------------------------------------------
    def sample(self, num_items: int, beta: float = 0.0) -> SampleBatch:
        """``num_items`` rows drawn uniformly with replacement.

        Adds ``PRIO_WEIGHTS`` (float32, all 1) and ``BATCH_INDEXES`` (int64).  ``beta``
        only matters for prioritized buffers.
        """
        self._check_sample_args(num_items, beta)
        idx = self._rng.integers(0, self._size, size=num_items)
        return self._gather(idx, np.ones(num_items, dtype=np.float32))

    def _check_sample_args(self, num_items: int, beta: float) -> None:
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if int(num_items) < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")

    def _gather(self, idx: np.ndarray, weights: np.ndarray) -> SampleBatch:
        self.num_sampled += len(idx)
        out = SampleBatch({k: col[idx] for k, col in self._columns.items()})
        out[SampleBatch.PRIO_WEIGHTS] = weights
        out[SampleBatch.BATCH_INDEXES] = idx.astype(np.int64, copy=False)
        return out

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities for replayed rows; the uniform buffer ignores them."""

    # -- introspection and state -------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated row storage (fixed once the first batch arrived)."""
        return sum(col.nbytes for col in self._columns.values())

    def stats(self) -> dict[str, float]:
        """``size``, ``num_added`` and ``num_sampled`` (rows)."""
        return {"size": self._size, "num_added": self.num_added, "num_sampled": self.num_sampled}

    def get_state(self) -> dict[str, Any]:
        """The stored rows, counters and sampling RNG (numpy arrays and JSON scalars)."""
        return {
            "capacity": self.capacity,
            "next_index": self._next,
            "num_added": self.num_added,
            "num_sampled": self.num_sampled,
            "columns": {k: col[: self._size].copy() for k, col in self._columns.items()},
            "rng": self._rng.bit_generator.state,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from ``get_state`` of a buffer with the same capacity."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"replay buffer state has capacity {state['capacity']}, this buffer {self.capacity}"
            )
        columns = {k: np.asarray(v) for k, v in state["columns"].items()}
        size = len(next(iter(columns.values()))) if columns else 0
        self._columns = {}
        if columns:
            self._allocate(SampleBatch(columns))
            for k, v in columns.items():
                self._columns[k][:size] = v
        self._size = size
        self._next = int(state["next_index"])
        self.num_added = int(state["num_added"])
        self.num_sampled = int(state["num_sampled"])
        self._rng.bit_generator.state = state["rng"]
