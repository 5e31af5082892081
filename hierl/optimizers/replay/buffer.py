"""Experience replay: the uniform ``ReplayBuffer`` and its ring storage of rows.

Uniform replay as in DQN (Mnih et al. 2015, "Human-level control through deep
reinforcement learning"): every stored row is sampled with equal probability, with
replacement.  Proportional prioritized replay (Schaul et al. 2016) subclasses this buffer
in ``hierl.optimizers.replay.prioritized``, which also holds the factory
``make_replay_buffer`` that picks one of the two.

Rows live in preallocated column arrays used as a ring (bounded memory, newest
``capacity`` rows kept); sampling returns a ``SampleBatch`` with the importance weights
in ``PRIO_WEIGHTS`` and the row indexes in ``BATCH_INDEXES`` (for priority updates).
Stacked image observations (``obs`` and ``new_obs`` of Atari's ``(4, 84, 84)`` uint8)
are stored one frame each instead (``frame_storage``, ``hierl.optimizers.replay.frames``);
should their frames not fit the frame ring, the oldest rows are dropped early and the
buffer holds fewer than ``capacity`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.optimizers.replay.frames import (
    STACKED_COLUMNS,
    FrameStacks,
    check_frame_storage,
    uses_frames,
)
from hierl.sample_batch import SampleBatch


class ReplayBuffer:
    """Uniform replay over the newest ``capacity`` rows.

    Args:
        capacity: rows kept (>= 1); older rows are overwritten first.
        seed: seeds sampling (None: fresh entropy).
        frame_storage: ``auto`` stores ``obs`` and ``new_obs`` one frame each when the
            first batch holds stacked uint8 images (``is_frame_stack``), ``frames``
            always, ``rows`` never.
        frame_capacity: a fixed frame ring of this many frames (None: one that starts
            at ``capacity * 17/16`` frames and grows as needed up to 1.5x, ``FrameStacks``).
    """

    def __init__(
        self,
        capacity: int,
        seed: int | None = None,
        frame_storage: str = "auto",
        frame_capacity: int | None = None,
    ):
        if int(capacity) < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        check_frame_storage(frame_storage)
        self.capacity = int(capacity)
        self.num_added = 0
        self.num_sampled = 0
        self.frame_storage = frame_storage
        self._frame_capacity = frame_capacity
        self._columns: dict[str, np.ndarray] = {}
        self._frames: FrameStacks | None = None
        self._next = 0
        self._size = 0
        self._live_start = 0  # number of the oldest row whose frames are all stored
        self._forgotten = 0  # rows before it had their ring positions forgotten
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
        if not self._columns and self._frames is None:
            self._allocate(batch)
        self._check_columns(batch)
        n = batch.count
        rows = slice(max(0, n - self.capacity), n)
        # Row j goes where a row-by-row ring would put it: (next + j) % capacity.
        idx = (self._next + np.arange(rows.start, n)) % self.capacity
        for k, col in self._columns.items():
            col[idx] = batch[k][rows]
        first = self.num_added + rows.start
        if self._frames is not None:
            obs, new_obs = (batch[c][rows] for c in STACKED_COLUMNS)
            live_start = self._frames.write(idx, first, obs, new_obs)
            self._live_start = max(self._live_start, live_start)
        self.num_added += n
        self._next = (self._next + n) % self.capacity
        self._size = self.num_added - self._live_from
        self._forget_dropped()
        return idx[max(0, self._live_from - first) :]

    def _allocate(self, batch: SampleBatch) -> None:
        stacked: tuple[str, ...] = ()
        if uses_frames(batch, self.frame_storage):
            obs = batch[SampleBatch.OBS]
            self._frames = FrameStacks(
                self.capacity, obs.shape[1:], obs.dtype, self._frame_capacity
            )
            stacked = STACKED_COLUMNS
        self._columns = self._empty_columns({k: v for k, v in batch.items() if k not in stacked})

    def _empty_columns(self, columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Ring storage for rows like those of ``columns`` (no object dtypes)."""
        objects = sorted(k for k, v in columns.items() if v.dtype.hasobject)
        if objects:
            raise ValueError(f"replay buffers cannot store object-dtype columns {objects}")
        return {k: np.empty((self.capacity, *v.shape[1:]), v.dtype) for k, v in columns.items()}

    def _column_specs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Per stored column: its per-row shape and dtype."""
        specs = {k: (col.shape[1:], col.dtype) for k, col in self._columns.items()}
        if self._frames is not None:
            for k in STACKED_COLUMNS:
                specs[k] = (self._frames.stack_shape, self._frames.frames.dtype)
        return specs

    def _check_columns(self, batch: SampleBatch) -> None:
        specs = self._column_specs()
        missing = sorted(set(specs) - set(batch))
        extra = sorted(set(batch) - set(specs))
        if missing or extra:
            raise ValueError(
                f"batch columns do not match the replay buffer's: missing {missing}, "
                f"unexpected {extra}"
            )
        for k, (shape, dtype) in specs.items():
            v = batch[k]
            if v.shape[1:] != shape or not np.can_cast(v.dtype, dtype, "same_kind"):
                raise ValueError(
                    f"column '{k}' has rows of shape {v.shape[1:]} and dtype {v.dtype}; the "
                    f"replay buffer stores shape {shape} and dtype {dtype}"
                )

    # -- sampling ----------------------------------------------------------------------
    def sample(self, num_items: int, beta: float = 0.0) -> SampleBatch:
        """``num_items`` rows drawn uniformly with replacement.

        Adds ``PRIO_WEIGHTS`` (float32, all 1) and ``BATCH_INDEXES`` (int64).  ``beta``
        only matters for prioritized buffers.
        """
        self._check_sample_args(num_items, beta)
        idx = self._rng.integers(0, self._size, size=num_items)
        if self._size < self.capacity:  # the stored rows start at _live_from
            idx = (self._live_from + idx) % self.capacity
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
        if self._frames is not None:
            out.update(self._frames.gather(idx))
        out[SampleBatch.PRIO_WEIGHTS] = weights
        out[SampleBatch.BATCH_INDEXES] = idx.astype(np.int64, copy=False)
        return out

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities for replayed rows; the uniform buffer ignores them."""

    # -- introspection and state -------------------------------------------------------
    @property
    def stores_frames(self) -> bool:
        """Whether ``obs`` and ``new_obs`` are stored one frame each."""
        return self._frames is not None

    @property
    def _filled(self) -> int:
        """Ring positions ever written (live or not)."""
        return min(self.capacity, self.num_added)

    @property
    def _live_from(self) -> int:
        """Number (over all rows ever added) of the oldest stored row."""
        return max(self._live_start, self.num_added - self.capacity, 0)

    def _is_live(self, positions: np.ndarray) -> np.ndarray:
        """Whether the rows at ring ``positions`` are stored (not dropped early)."""
        newest = self.num_added - 1 - (self.num_added - 1 - positions) % self.capacity
        return newest >= self._live_from

    def _forget(self, positions: np.ndarray) -> None:
        """Rows at ``positions`` were dropped early (their frames were overwritten)."""

    def _forget_dropped(self) -> None:
        start = max(self._forgotten, self.num_added - self.capacity)
        if start < self._live_from:
            self._forget(np.arange(start, self._live_from) % self.capacity)
        self._forgotten = max(self._forgotten, self._live_from)

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated row (and frame) storage, fixed once the first batch
        arrived."""
        frames = self._frames.nbytes if self._frames is not None else 0
        return frames + sum(col.nbytes for col in self._columns.values())

    def stats(self) -> dict[str, float]:
        """``size``, ``num_added`` and ``num_sampled`` (rows); with frame storage also
        ``frames_written`` and ``frame_capacity``."""
        out = {"size": self._size, "num_added": self.num_added, "num_sampled": self.num_sampled}
        if self._frames is not None:
            out.update(self._frames.stats())
        return out

    def get_state(self) -> dict[str, Any]:
        """The stored rows, counters and sampling RNG (numpy arrays and JSON scalars);
        with frame storage, the frames and each row's frame positions."""
        filled = self._filled
        out = {
            "capacity": self.capacity,
            "next_index": self._next,
            "num_added": self.num_added,
            "num_sampled": self.num_sampled,
            "columns": {k: col[:filled].copy() for k, col in self._columns.items()},
            "rng": self._rng.bit_generator.state,
        }
        if self._frames is not None:
            out["frames"] = self._frames.get_state(filled)
            out["live_start"] = self._live_start
        return out

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from ``get_state`` of a buffer with the same capacity."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"replay buffer state has capacity {state['capacity']}, this buffer {self.capacity}"
            )
        columns = {k: np.asarray(v) for k, v in state["columns"].items()}
        frames = state.get("frames")
        self._frames = None if frames is None else FrameStacks.from_state(self.capacity, frames)
        size = len(next(iter(columns.values()))) if columns else 0
        if self._frames is not None:
            size = len(np.asarray(frames["positions"]))
        self._columns = self._empty_columns(columns)
        for k, v in columns.items():
            self._columns[k][:size] = v
        self._next = int(state["next_index"])
        self.num_added = int(state["num_added"])
        self.num_sampled = int(state["num_sampled"])
        self._live_start = int(state.get("live_start", 0))
        self._forgotten = self._live_from
        self._size = min(size, self.num_added - self._live_from)
        self._rng.bit_generator.state = state["rng"]
