"""Frame-once storage of stacked observations for the replay buffers.

An Atari row holds two ``(4, 84, 84)`` uint8 stacks (``obs`` and ``new_obs``) that share
seven of their eight frames with each other and with the neighbouring rows: stored as
rows, 1M transitions take 56 GB; stored once per distinct frame, about 7 GB.  The
references learned from are Dopamine's circular replay buffer and DQN Zoo's
(one frame per row, stacks rebuilt from the previous rows, episode starts padded) and
Stable-Baselines3's ``optimize_memory_usage`` (``next_obs`` read from the next row).

Unlike them, ``FrameStacks`` does not rebuild a stack from an assumed layout of
the rows.  Each row keeps, for each slot of each of its two stacks, the ring position
of the frame that fills it; a stack is gathered back through those positions.  The
frames are found by comparing bytes when rows are stored:

1. structural candidates, compared for a whole batch at once: ``new_obs[i]`` shifted
   one frame from ``obs[i]``, ``obs[i]`` equal to ``new_obs[i-1]`` or shifted from
   ``obs[i-1]``, a reset stack repeating its first frame, n-step ``new_obs`` shifted
   from or equal to ``new_obs[i-1]``;
2. every frame left over (about one per row) is hashed and looked up among the
   frames stored in this batch and the ``reuse_window`` newest ones (so a fragment
   continues its evaluator's previous fragment across other evaluators' batches), again
   confirmed by comparing bytes; a frame found nowhere is written to the ring.

So what is sampled is exactly what was stored, byte for byte, whatever the episode
boundaries (reset padding, terminated or truncated last steps), the n-step windows
computed upstream or the ring's wrap-around: the layout only decides how many frames
are written (about one per row plus one per episode for the DeepMind pipeline).

The frame ring starts at ``rows + rows // 16`` frames plus a few rows' worth, enough
for one new frame per row.  Where rows need more (Ape-X's shards get every other
fragment of an evaluator, so each fragment's first stack is new to them: about
``1 + 3/16`` frames a row for 16-step fragments), the ring grows when its writer comes
back to its start and finds frames there that stored rows still use, up to
``1.5 rows`` frames.  When a frame still used by a stored row has to be overwritten all
the same, that row and every older one are dropped (``write`` returns the first row
kept): the buffer then holds fewer than ``capacity`` rows (random frames, stacks that
are not frame stacks).  Reuse is limited to the newest ``reuse_window`` frames (half
the starting ring's slack), so that reusing an old frame never drops the rows between.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

import numpy as np

from hierl.sample_batch import SampleBatch

FrameStorage = Literal["auto", "frames", "rows"]
FRAME_STORAGES: tuple[str, ...] = get_args(FrameStorage)
"""``frame_storage`` values: ``auto`` (frames for stacked image observations), ``frames``
(always store each frame once), ``rows`` (store every row's stacks whole)."""

STACKED_COLUMNS = (SampleBatch.OBS, SampleBatch.NEW_OBS)
"""The two columns stored as frames, in slot order."""

MAX_CHUNK_ROWS = 1024
"""Rows compared at once (bounds the temporaries of one ``write``)."""


def is_frame_stack(batch: SampleBatch) -> bool:
    """Whether ``batch`` holds stacked uint8 images: ``obs`` and ``new_obs`` of one
    per-row shape ``(K, *frame)``, 2 <= K, the frame at least 2-D and each of its sides
    longer than K (``(4, 84, 84)`` is; ``(84, 84, 3)`` and ``(4,)`` are not)."""
    if not all(c in batch for c in STACKED_COLUMNS):
        return False
    obs, new_obs = (np.asarray(batch[c]) for c in STACKED_COLUMNS)
    shape = obs.shape[1:]
    return (
        obs.dtype == np.uint8
        and new_obs.dtype == np.uint8
        and new_obs.shape[1:] == shape
        and len(shape) >= 3
        and shape[0] >= 2
        and all(side > shape[0] for side in shape[1:])
    )


def check_frame_storage(storage: str) -> None:
    """ValueError naming ``storage`` unless it is one of ``FRAME_STORAGES``."""
    if storage not in FRAME_STORAGES:
        raise ValueError(f"frame_storage must be one of {FRAME_STORAGES}, got {storage!r}")


def uses_frames(batch: SampleBatch, storage: str) -> bool:
    """Whether a buffer with ``frame_storage=storage`` stores ``batch`` as frames.

    ``auto``: when ``is_frame_stack``; ``rows``: never; ``frames``: always, and a
    ValueError when ``obs`` and ``new_obs`` are not stacks of one shape.
    """
    check_frame_storage(storage)
    if storage == "rows":
        return False
    if storage == "auto":
        return is_frame_stack(batch)
    shapes = {c: np.shape(batch[c])[1:] if c in batch else None for c in STACKED_COLUMNS}
    if None in shapes.values() or len(set(shapes.values())) != 1 or not shapes["obs"]:
        raise ValueError(
            f"frame_storage='frames' needs 'obs' and 'new_obs' columns of one per-row "
            f"shape (stack, *frame), got {shapes}; use frame_storage='rows' or 'auto'"
        )
    return True


def frames_equal(a: np.ndarray, b: np.ndarray, frame_ndim: int) -> np.ndarray:
    """Per-frame equality of two arrays of frames (the last ``frame_ndim`` axes)."""
    lead = a.shape[: a.ndim - frame_ndim]
    a = a.reshape(*lead, -1).view(np.uint8)  # one frame's axes merge without a copy
    b = b.reshape(*lead, -1).view(np.uint8)
    if a.shape[-1] % 8 == 0:
        a, b = a.view(np.uint64), b.view(np.uint64)
    return (a == b).all(axis=-1)


class FrameStacks:
    """The ``obs`` and ``new_obs`` stacks of ``rows`` replay rows, each frame stored once.

    Args:
        rows: the buffer's capacity in rows (ring positions ``0..rows-1``).
        stack_shape: per-row shape ``(K, *frame)`` of both stacks.
        dtype: the frames' dtype.
        frame_capacity: a fixed frame ring of this many frames; None: a ring of
            ``rows + rows // 16 + 8K`` frames that grows when its writer comes back to
            the start and finds frames there that stored rows still use, by
            ``rows // 16`` (at least ``8K``) at a time up to ``1.5 rows + 16K`` frames.

    ``write`` stores a run of rows and returns the row number (counted over all rows
    ever stored) before which rows lost a frame; ``gather`` rebuilds the stacks.  The
    ring's array is allocated at its largest size up front, but pages the ring never
    reaches are never touched, so they take no resident memory.
    """

    def __init__(
        self,
        rows: int,
        stack_shape: tuple[int, ...],
        dtype: Any,
        frame_capacity: int | None = None,
    ):
        self.rows = int(rows)
        self.stack = int(stack_shape[0])
        self.slots = 2 * self.stack
        if frame_capacity is None:
            capacity = self.rows + self.rows // 16 + 4 * self.slots
            self.frame_limit = self.rows + self.rows // 2 + 8 * self.slots
            """The most frames the ring may grow to."""
        else:
            capacity = self.frame_limit = int(frame_capacity)
        if capacity < self.slots:
            raise ValueError(
                f"frame_capacity must hold one row's {self.slots} frames, got {frame_capacity}"
            )
        self.frame_capacity = capacity
        """Frames in the ring now (its writer wraps around here)."""
        self.grow_step = max(4 * self.slots, self.rows // 16)
        self.frame_shape = tuple(int(d) for d in stack_shape[1:])
        self.frames = np.empty((self.frame_limit, *self.frame_shape), dtype=dtype)
        index = np.int32 if self.frame_limit < 2**31 else np.int64
        self.positions = np.zeros((self.rows, self.slots), dtype=index)
        """Per row: the ring positions of its ``obs`` frames, then its ``new_obs`` frames."""
        self.last_use = np.full(self.frame_limit, -1, dtype=np.int64)
        """Per ring position: the newest row (number) that uses its frame."""
        self.frame_ids = np.full(self.frame_limit, -1, dtype=np.int64)
        """Per ring position: the number of the frame there (frames counted as written)."""
        self.frames_written = 0
        self.cursor = 0
        """The ring position the next new frame goes to."""
        self.reuse_window = max(self.slots, (capacity - self.rows) // 2)
        """A frame written this many frames ago or less may be reused by a new row."""
        self._recent: dict[int, tuple[int, int]] = {}  # hash -> (frame number, position)
        words = -(-int(np.prod(self.frame_shape, dtype=np.int64)) * self.frames.itemsize // 8)
        coeffs = np.random.default_rng(0x5EED).integers(0, 2**63, size=words, dtype=np.uint64)
        self._coeffs = coeffs * np.uint64(2) + np.uint64(1)  # odd: a multiplicative hash

    @property
    def stack_shape(self) -> tuple[int, ...]:
        """Per-row shape of each stack."""
        return (self.stack, *self.frame_shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the frame ring as far as it reaches, the per-row positions and the
        per-frame bookkeeping."""
        frame_bytes = self.frames.nbytes // max(1, len(self.frames))
        books = self.last_use.nbytes + self.frame_ids.nbytes
        return self.frame_capacity * frame_bytes + self.positions.nbytes + books

    # -- storing -----------------------------------------------------------------------
    def write(
        self, ring_rows: np.ndarray, first_row: int, obs: np.ndarray, new_obs: np.ndarray
    ) -> int:
        """Store the stacks of rows numbered ``first_row, first_row + 1, ...`` at
        ``ring_rows``; returns the number of the oldest row whose frames are all still
        stored (rows before it lost a frame to the ring and must be dropped)."""
        evicted_before = 0
        chunk = max(1, min(MAX_CHUNK_ROWS, self.frame_capacity // (2 * self.slots)))
        for start in range(0, len(ring_rows), chunk):
            stop = min(start + chunk, len(ring_rows))
            # Compared in the dtype they are stored in (a copy only if it differs).
            pair = tuple(
                np.asarray(a[start:stop]).astype(self.frames.dtype, copy=False)
                for a in (obs, new_obs)
            )
            bound = self._write_chunk(ring_rows[start:stop], first_row + start, pair)
            evicted_before = max(evicted_before, bound)
        return evicted_before

    def _write_chunk(
        self, ring_rows: np.ndarray, first_row: int, stacks: tuple[np.ndarray, np.ndarray]
    ) -> int:
        """Slot ``s`` of row ``i`` (``i * slots + s`` in ``source``) is ``obs[i, s]``
        for ``s < K``, else ``new_obs[i, s - K]``; ``stacks`` is ``(obs, new_obs)``."""
        n, slots, k = len(stacks[0]), self.slots, self.stack
        source = np.arange(n * slots).reshape(n, slots)
        # Precedence order: the first candidate that matches a slot's bytes wins.
        self._link(stacks, source, 0, range(k, 2 * k - 1), range(1, k))  # new = obs shifted
        self._link(stacks, source, 1, range(0, k), range(k, 2 * k))  # obs = previous new
        self._link(stacks, source, 1, range(0, k - 1), range(1, k))  # obs = previous obs shifted
        self._link(stacks, source, 0, range(0, k - 1), range(1, k))  # reset: repeated frame
        self._link(stacks, source, 1, range(k, 2 * k - 1), range(k + 1, 2 * k))  # n-step
        self._link(stacks, source, 1, range(k, 2 * k), range(k, 2 * k))  # same new_obs
        source = source.reshape(-1)
        roots = np.flatnonzero(source == np.arange(n * slots))
        root_frames = self._slot_frames(stacks, roots)
        ring = np.empty(n * slots, dtype=np.int64)
        # A recent frame may be reused only if this chunk's writes cannot overwrite it.
        reuse_from = max(
            self.frames_written + len(roots) - self.frame_capacity,
            self.frames_written - self.reuse_window,
        )
        keep_from = first_row + n - self.rows  # rows the row ring keeps after this chunk
        written: list[int] = []  # ring positions of new frames
        fresh: list[int] = []  # and which of the roots they are
        pending: dict[int, int] = {}  # number -> root, of new frames not copied yet
        keys = self._hashes(root_frames).tolist()
        for i, (root, key) in enumerate(zip(roots.tolist(), keys, strict=True)):
            number, pos = self._recent.get(key, (-1, -1))
            if number >= reuse_from and self.frame_ids[pos] == number:
                j = pending.get(number)
                known = self.frames[pos] if j is None else root_frames[j]
                if np.array_equal(known, root_frames[i]):
                    ring[root] = pos
                    continue
            pos = self._next_position(keep_from, len(roots) - i)
            self.frame_ids[pos] = self.frames_written
            self._recent[key] = (self.frames_written, pos)
            pending[self.frames_written] = i
            self.frames_written += 1
            written.append(pos)
            fresh.append(i)
            ring[root] = pos
        self.frames[written] = root_frames[fresh]
        self._prune_recent()
        # CRUCIAL: follow every slot's chain of equal frames to the frame that was stored.
        while True:
            step = source[source]
            if np.array_equal(step, source):
                break
            source = step
        ring = ring[source].reshape(n, slots)
        overwritten = np.array(written, dtype=np.int64)
        evicted_before = int(self.last_use[overwritten].max(initial=-1)) + 1
        self.last_use[overwritten] = -1
        row_numbers = np.repeat(np.arange(first_row, first_row + n), slots)
        np.maximum.at(self.last_use, ring.reshape(-1), row_numbers)
        self.positions[ring_rows] = ring
        return evicted_before

    def _next_position(self, keep_from: int, upcoming: int) -> int:
        """The ring position for a new frame; at the ring's end, the ring grows if the
        ``upcoming`` frames of this chunk (at most) would overwrite frames at its start
        that rows numbered ``keep_from`` or later use (and it may grow), else wraps."""
        if self.cursor == self.frame_capacity:
            # Only the positions this chunk may reach (and a few more) are checked: they
            # lie well inside the slack of a ring that fits, which therefore never grows.
            start = self.last_use[: min(upcoming + 2 * self.slots, self.frame_capacity)]
            if self.frame_capacity < self.frame_limit and start.max() >= max(keep_from, 0):
                self.frame_capacity = min(self.frame_limit, self.frame_capacity + self.grow_step)
            else:
                self.cursor = 0
        pos = self.cursor
        self.cursor += 1
        return pos

    def _slot_frames(self, stacks: tuple[np.ndarray, np.ndarray], slots: np.ndarray) -> Any:
        """The frames in flat ``slots`` (``row * slots + slot``) of ``(obs, new_obs)``."""
        rows, slot = np.divmod(slots, self.slots)
        out = np.empty((len(slots), *self.frame_shape), dtype=self.frames.dtype)
        is_obs = slot < self.stack
        out[is_obs] = stacks[0][rows[is_obs], slot[is_obs]]
        out[~is_obs] = stacks[1][rows[~is_obs], slot[~is_obs] - self.stack]
        return out

    def _slot_range(self, stacks: tuple[np.ndarray, np.ndarray], rows: Any, slots: range) -> Any:
        """``rows`` (a slice or indexes) of slots ``slots``, all of ``obs`` or of ``new_obs``."""
        if slots.start >= self.stack:
            return stacks[1][rows, slots.start - self.stack : slots.stop - self.stack]
        return stacks[0][rows, slots.start : slots.stop]

    def _link(
        self,
        stacks: tuple[np.ndarray, np.ndarray],
        source: np.ndarray,
        back: int,
        targets: range,
        sources: range,
    ) -> None:
        """Point the still unmatched ``targets`` slots of each row ``i`` at the
        ``sources`` slots of row ``i - back`` where their frames are equal."""
        if not len(targets):
            return
        n, slots = source.shape
        rows = np.arange(back, n)
        t = np.asarray(targets)
        unmatched = source[back:, targets.start : targets.stop] == rows[:, None] * slots + t
        need = unmatched.any(axis=1)
        if not need.any():
            return
        if need.all():
            a = self._slot_range(stacks, slice(back, n), targets)
            b = self._slot_range(stacks, slice(0, n - back), sources)
        else:
            rows, unmatched = rows[need], unmatched[need]
            a = self._slot_range(stacks, rows, targets)
            b = self._slot_range(stacks, rows - back, sources)
        hit = unmatched & frames_equal(a, b, len(self.frame_shape))
        r, j = np.nonzero(hit)
        source[rows[r], t[j]] = (rows[r] - back) * slots + np.asarray(sources)[j]

    def _hashes(self, frames: np.ndarray) -> np.ndarray:
        """A 64-bit multiplicative hash of each frame's bytes (matches are re-compared)."""
        raw = np.ascontiguousarray(frames).reshape(len(frames), -1).view(np.uint8)
        pad = (-raw.shape[1]) % 8
        if pad:
            raw = np.concatenate([raw, np.zeros((len(raw), pad), np.uint8)], axis=1)
        return (raw.view(np.uint64) * self._coeffs).sum(axis=1, dtype=np.uint64)

    def _prune_recent(self) -> None:
        if len(self._recent) > 2 * self.reuse_window:
            oldest = self.frames_written - self.reuse_window
            self._recent = {h: v for h, v in self._recent.items() if v[0] >= oldest}

    # -- reading -----------------------------------------------------------------------
    def gather(self, ring_rows: np.ndarray) -> dict[str, np.ndarray]:
        """The ``obs`` and ``new_obs`` stacks of the rows at ``ring_rows``."""
        positions = self.positions[ring_rows]
        return {
            SampleBatch.OBS: self.frames[positions[:, : self.stack]],
            SampleBatch.NEW_OBS: self.frames[positions[:, self.stack :]],
        }

    def stats(self) -> dict[str, float]:
        """``frames_written`` (over all time) and ``frame_capacity`` (the ring now)."""
        return {"frames_written": self.frames_written, "frame_capacity": self.frame_capacity}

    # -- state ---------------------------------------------------------------------------
    def get_state(self, filled: int) -> dict[str, Any]:
        """The ring (frames, their numbers and users) and the positions of the first
        ``filled`` ring rows."""
        reached = self.frame_capacity
        return {
            "frame_capacity": self.frame_capacity,
            "frame_limit": self.frame_limit,
            "frames_written": self.frames_written,
            "cursor": self.cursor,
            "reuse_window": self.reuse_window,
            "frames": self.frames[:reached].copy(),
            "frame_ids": self.frame_ids[:reached].copy(),
            "last_use": self.last_use[:reached].copy(),
            "positions": self.positions[:filled].copy(),
        }

    @classmethod
    def from_state(cls, rows: int, state: Mapping[str, Any]) -> FrameStacks:
        """A store of ``rows`` ring rows holding ``state`` (from ``get_state``)."""
        frames = np.asarray(state["frames"])
        positions = np.asarray(state["positions"])
        stack_shape = (positions.shape[1] // 2, *frames.shape[1:])
        out = cls(rows, stack_shape, frames.dtype, int(state["frame_limit"]))
        reached = len(frames)
        out.frame_capacity = int(state["frame_capacity"])
        out.reuse_window = int(state["reuse_window"])
        out.frames[:reached] = frames
        out.frame_ids[:reached] = np.asarray(state["frame_ids"])
        out.last_use[:reached] = np.asarray(state["last_use"])
        out.positions[: len(positions)] = positions
        out.frames_written = int(state["frames_written"])
        out.cursor = int(state["cursor"])
        # The recent-frame index: exactly the frames a lookup may still reuse.
        ids = out.frame_ids[:reached]
        recent = np.flatnonzero(ids >= out.frames_written - out.reuse_window)
        recent = recent[np.argsort(ids[recent], kind="stable")]
        keys = out._hashes(out.frames[recent]).tolist() if len(recent) else []
        for pos, key in zip(recent.tolist(), keys, strict=True):
            out._recent[key] = (int(ids[pos]), pos)
        return out
