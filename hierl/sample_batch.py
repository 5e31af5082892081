"""Columnar batches of experience.

A ``SampleBatch`` maps column names (``"obs"``, ``"actions"``, ...) to numpy arrays that all
share the same leading length, the batch's ``SampleBatch.count`` (number of rows / timesteps).
It supports row slicing, concatenation, shuffling, minibatch iteration, splitting into episodes
and in-place LZ4 compression of large columns (typically image observations) so that batches are
cheap to ship between processes.

A ``MultiAgentBatch`` groups one ``SampleBatch`` per policy id together with the number
of environment steps the data was collected over.

Only numpy and ``lz4.frame`` are used.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import lz4.frame
import numpy as np

__all__ = [
    "DEFAULT_POLICY_ID",
    "CompressedColumn",
    "MultiAgentBatch",
    "SampleBatch",
    "concat_samples",
    "minibatch_bounds",
    "tail_is_merged",
]

#: Policy id used when a single-agent ``SampleBatch`` is wrapped into a
#: ``MultiAgentBatch``.
DEFAULT_POLICY_ID = "default_policy"


def tail_is_merged(tail_rows: int, size: int) -> bool:
    """The minibatch tail rule: whether a last minibatch of ``tail_rows`` rows (after at
    least one full one) joins the previous minibatch instead of being its own.

    A tail smaller than half a minibatch (``2 * tail_rows < size``) is merged; one of at
    least half is its own minibatch.  So every row is used once per epoch and no update
    runs on fewer than ``size / 2`` rows (unless the whole batch is smaller): a lone
    remainder (1 row of 1025 at size 256) would otherwise get a full Adam step with
    noisy per-minibatch statistics (advantage normalisation of one row).  Every place
    that cuts minibatches uses this: ``SampleBatch.minibatches`` (``local``,
    ``allreduce``) and ``minibatch_bounds`` (also ``MultiDeviceLearner``, ``multi_gpu``).
    """
    return tail_rows > 0 and 2 * tail_rows < size


def minibatch_bounds(count: int, size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` row ranges of the minibatches of ``count`` rows at ``size`` rows.

    Consecutive ranges of ``size`` rows; the remainder ``count % size`` follows
    ``tail_is_merged``: a remainder under ``size / 2`` extends the last range (which then
    has fewer than ``1.5 * size`` rows), a larger one is a range of its own.  Fewer than
    ``size`` rows in all give one range.  ``count == 0`` gives none.

    >>> minibatch_bounds(1025, 256)
    [(0, 256), (256, 512), (512, 768), (768, 1025)]
    >>> minibatch_bounds(1150, 256)[-1]  # a 126-row remainder joins the last range
    (768, 1150)
    >>> minibatch_bounds(1152, 256)[-1]  # a 128-row one is a range of its own
    (1024, 1152)
    """
    count, size = operator.index(count), operator.index(size)
    if size <= 0:
        raise ValueError(f"minibatch size must be positive, got size={size}")
    bounds = [(start, min(start + size, count)) for start in range(0, count, size)]
    # CRUCIAL: no tiny last minibatch (a full optimizer step on a few rows).
    if len(bounds) > 1 and tail_is_merged(count % size, size):
        bounds[-2:] = [(bounds[-2][0], count)]
    return bounds


class CompressedColumn:
    """An LZ4-compressed numpy array that remembers its dtype and shape.

    Attributes:
        data: ``lz4.frame`` compressed bytes of the C-ordered array buffer.
        shape: Shape of the original array.
        dtype: Dtype of the original array.
    """

    __slots__ = ("data", "dtype", "shape")

    def __init__(self, data: bytes, shape: tuple[int, ...], dtype: np.dtype | str | type) -> None:
        """Wrap already-compressed bytes; use ``from_array`` to compress an array."""
        self.data: bytes = bytes(data)
        self.shape: tuple[int, ...] = tuple(int(d) for d in shape)
        self.dtype: np.dtype = np.dtype(dtype)

    @classmethod
    def from_array(cls, array: Any) -> CompressedColumn:
        """Compress ``array`` (made C-contiguous first) into a new ``CompressedColumn``.

        Raises:
            ValueError: If the array has object dtype (its buffer holds pointers, not data).
        """
        arr = np.asarray(array)
        if arr.dtype.hasobject:
            raise ValueError(f"cannot compress an array of object dtype {arr.dtype}")
        # View the contiguous buffer as raw bytes so lz4 reads it without an extra copy.
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        return cls(lz4.frame.compress(raw), arr.shape, arr.dtype)

    def decompress(self) -> np.ndarray:
        """Return a new, writable array equal (bytes, dtype and shape) to the original."""
        raw = lz4.frame.decompress(self.data, return_bytearray=True)
        return np.frombuffer(raw, dtype=self.dtype).reshape(self.shape)

    @property
    def nbytes(self) -> int:
        """Size of the compressed payload in bytes."""
        return len(self.data)

    def __len__(self) -> int:
        """Length of the original array along axis 0."""
        if not self.shape:
            raise TypeError("len() of a compressed 0-d array")
        return self.shape[0]

    def __getstate__(self) -> tuple[bytes, tuple[int, ...], np.dtype]:
        """Pickle support (the class uses ``__slots__``)."""
        return (self.data, self.shape, self.dtype)

    def __setstate__(self, state: tuple[bytes, tuple[int, ...], np.dtype]) -> None:
        """Restore from ``__getstate__``."""
        self.data, self.shape, self.dtype = state

    def __repr__(self) -> str:
        """Short description with shape, dtype and compressed size."""
        return (
            f"CompressedColumn(shape={self.shape}, dtype={self.dtype}, "
            f"compressed_bytes={len(self.data)})"
        )


def _is_row_compressed(value: Any) -> bool:
    """True for a 1-D object array of per-row ``CompressedColumn`` (``bulk=False``)."""
    return (
        isinstance(value, np.ndarray)
        and value.dtype.hasobject  # an attribute read: ``dtype == object`` builds a dtype
        and value.ndim == 1
        and value.size > 0
        and isinstance(value[0], CompressedColumn)
    )


def _is_compressed_value(value: Any) -> bool:
    """True if a stored column value is compressed (bulk or per row)."""
    return isinstance(value, CompressedColumn) or _is_row_compressed(value)


def _stack_rows(rows: np.ndarray, template: CompressedColumn) -> np.ndarray:
    """Decompress and stack per-row compressed entries; ``template`` gives shape/dtype if empty."""
    if len(rows) == 0:
        return np.empty((0, *template.shape), dtype=template.dtype)
    return np.stack([row.decompress() for row in rows])


def _decompressed(value: Any) -> Any:
    """Return ``value`` decompressed into a new array, or ``value`` itself if not compressed."""
    if isinstance(value, CompressedColumn):
        return value.decompress()
    if _is_row_compressed(value):
        return _stack_rows(value, value[0])
    return value


def _value_nbytes(value: Any) -> int:
    """Bytes held by one stored column value (compressed payload size if compressed)."""
    if isinstance(value, CompressedColumn):
        return len(value.data)
    if _is_row_compressed(value):
        return int(sum(len(row.data) for row in value))
    return int(value.nbytes)


class SampleBatch(dict):
    """A dict of column name -> numpy array; all columns have the same length along axis 0.

    Values are converted with ``np.asarray`` (dtypes are kept) when the batch is built or a column
    is assigned, and their leading length is checked against the other columns. ``len(batch)`` is
    the number of *columns* (plain dict semantics); the number of rows is ``count``.

    Indexing with a ``str`` returns the stored column; indexing with a ``slice`` returns a new
    batch holding those rows (numpy views where possible, see ``slice``).

    The ``seq_lens`` column (``SEQ_LENS``) holds one entry per sequence and is exempt from the
    length check: a recurrent batch's rows are consecutive sequences (runs of steps of one
    episode, see ``chop_into_sequences``) of those lengths, summing to ``count``. Row
    operations keep sequences whole: slices must start and end on sequence boundaries,
    ``shuffle`` permutes whole sequences and ``minibatches`` splits between them; each
    result carries its own ``seq_lens``. Recurrent state columns (``state_in_0``, ...) stay
    per row.

    Compressed columns (see ``compress``) are stored as ``CompressedColumn`` (bulk) or a
    1-D object array of per-row ``CompressedColumn`` (``bulk=False``). Row-selecting
    operations and concatenation decompress automatically; their results are uncompressed.
    """

    __slots__ = ()

    OBS = "obs"
    NEW_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    EPS_ID = "eps_id"
    ENV_ID = "env_id"
    AGENT_INDEX = "agent_index"
    T = "t"
    ACTION_LOGP = "action_logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    SEQ_LENS = "seq_lens"
    #: Importance-sampling weight of each replayed row (prioritized replay; all 1 for
    #: uniform replay).  Added when a replay buffer samples, never stored or checkpointed.
    PRIO_WEIGHTS = "prio_weights"
    #: Index of each replayed row in its replay buffer (for priority updates).
    BATCH_INDEXES = "batch_indexes"
    #: Prefix of recurrent state input columns: ``state_in_0``, ``state_in_1``, ...
    STATE_IN = "state_in_"
    #: Prefix of recurrent state output columns: ``state_out_0``, ``state_out_1``, ...
    STATE_OUT = "state_out_"

    def __init__(self, data: Mapping[str, Any] | None = None, /, **columns: Any) -> None:
        """Build a batch from a mapping and/or keyword columns (keywords win on clashes).

        Raises:
            ValueError: If columns differ in length along axis 0 (names the columns and lengths)
                or a value is 0-dimensional.
            TypeError: If a column name is not a ``str``.
        """
        super().__init__()
        if data is not None:
            self.update(data)
        if columns:
            self.update(columns)

    # ------------------------------------------------------------------ dict overrides

    def __setitem__(self, key: str, value: Any) -> None:
        """Convert ``value`` with ``np.asarray`` and check its length against the other columns.

        ``CompressedColumn`` values are stored as they are.

        Raises:
            TypeError: If ``key`` is not a ``str``.
            ValueError: If the value is 0-dimensional or its length differs from the batch's.
        """
        if not isinstance(key, str):
            raise TypeError(f"SampleBatch column names must be str, got {key!r}")
        if not isinstance(value, CompressedColumn):
            try:
                value = np.asarray(value)
            except ValueError as e:
                raise ValueError(f"column {key!r} cannot be converted to an array: {e}") from e
        shape = value.shape
        if len(shape) == 0:
            raise ValueError(f"column {key!r} must have at least one dimension, got a scalar")
        if key != self.SEQ_LENS:
            ref = self._reference_column(exclude=key)
            if ref is not None and ref[1] != shape[0]:
                raise ValueError(
                    f"column {key!r} has length {shape[0]}, but the batch has {ref[1]} rows "
                    f"(column {ref[0]!r} has length {ref[1]})"
                )
        super().__setitem__(key, value)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        """Like ``dict.update`` but every value goes through ``__setitem__``."""
        items: Iterable[tuple[Any, Any]]
        if isinstance(other, Mapping):
            items = other.items()
        elif hasattr(other, "keys"):
            items = ((k, other[k]) for k in other.keys())  # noqa: SIM118
        else:
            items = other
        for k, v in items:
            self[k] = v
        for k, v in kwargs.items():
            self[k] = v

    def setdefault(self, key: str, default: Any = None) -> Any:
        """Like ``dict.setdefault`` but a new value goes through ``__setitem__``."""
        if key not in self:
            self[key] = default
        return super().__getitem__(key)

    def __ior__(self, other: Any) -> SampleBatch:  # type: ignore[override,misc]
        """``batch |= other`` with conversion and length checks."""
        self.update(other)
        return self

    @overload
    def __getitem__(self, key: str) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> SampleBatch: ...

    def __getitem__(self, key: str | slice) -> Any:
        """Return a column by name, or a new batch of the rows selected by a ``slice``."""
        if isinstance(key, slice):
            return self._take(key)
        return super().__getitem__(key)

    def __repr__(self) -> str:
        """``SampleBatch(count=..., columns=[...])``."""
        return f"SampleBatch(count={self.count}, columns={list(self.keys())})"

    # ------------------------------------------------------------------ basic properties

    def _reference_column(self, exclude: str | None = None) -> tuple[str, int] | None:
        """Name and length of the first length-checked column other than ``exclude``."""
        for k, v in dict.items(self):
            if k != self.SEQ_LENS and k != exclude:
                return k, len(v)
        return None

    @property
    def count(self) -> int:
        """Number of rows (0 when the batch has no length-checked columns)."""
        ref = self._reference_column()
        return 0 if ref is None else ref[1]

    def size_bytes(self) -> int:
        """Total bytes held by the columns (compressed payload size for compressed columns)."""
        return sum(_value_nbytes(v) for v in self.values())

    def copy(self) -> SampleBatch:  # type: ignore[override]
        """Return a new batch with copies of every column's array (compressed columns stay so)."""
        out = SampleBatch()
        for k, v in self.items():
            if isinstance(v, CompressedColumn):
                v = CompressedColumn(v.data, v.shape, v.dtype)
            else:
                v = v.copy()
            dict.__setitem__(out, k, v)
        return out

    # ------------------------------------------------------------------ row selection

    def _take(self, index: slice | np.ndarray) -> SampleBatch:
        """New batch of the rows selected by ``index`` (a slice or integer index array).

        With ``seq_lens``, ``index`` must be a slice whose ends are sequence boundaries.
        """
        if self.SEQ_LENS not in self:
            return self._take_rows(index)
        if not isinstance(index, slice):
            raise ValueError(
                f"cannot select arbitrary rows of a SampleBatch that has a {self.SEQ_LENS!r} "
                "column: sequences must stay whole (slice on sequence boundaries)"
            )
        bounds = self._sequence_bounds()
        start, stop, step = index.indices(self.count)
        if step != 1:
            raise ValueError(f"cannot slice a sequence batch with step {step}")
        stop = max(start, stop)
        first, last = np.searchsorted(bounds, [start, stop])
        if bounds[first] != start or bounds[last] != stop:
            raise ValueError(
                f"cannot slice rows {start}:{stop} of a SampleBatch with {self.SEQ_LENS!r}: "
                f"both ends must be sequence boundaries (sequence starts are "
                f"{bounds[:-1].tolist()[:20]}{'...' if len(bounds) > 21 else ''})"
            )
        out = self._take_rows(slice(start, stop))
        lens = np.asarray(dict.__getitem__(self, self.SEQ_LENS))
        dict.__setitem__(out, self.SEQ_LENS, lens[first:last])
        return out

    def _take_rows(self, index: slice | np.ndarray) -> SampleBatch:
        """New batch of the rows ``index`` selects; ``seq_lens`` is not copied."""
        out = SampleBatch()
        for k, v in self.items():
            if k == self.SEQ_LENS:
                continue
            if isinstance(v, CompressedColumn):
                # Copy so the result does not keep the whole decompressed column alive.
                v = np.array(v.decompress()[index])
            elif _is_row_compressed(v):
                v = _stack_rows(v[index], v[0])
            else:
                v = v[index]
            dict.__setitem__(out, k, v)
        return out

    # ------------------------------------------------------------------ sequences

    def _sequence_bounds(self) -> np.ndarray:
        """Row offsets ``[0, end_0, end_1, ..., count]`` of the sequences in ``seq_lens``.

        Raises:
            ValueError: If ``seq_lens`` is not a 1-D array of positive integers summing to
                ``count``.
        """
        lens = np.asarray(dict.__getitem__(self, self.SEQ_LENS))
        if lens.ndim != 1 or not (lens.size == 0 or np.issubdtype(lens.dtype, np.integer)):
            raise ValueError(
                f"{self.SEQ_LENS!r} must be a 1-D integer array, got dtype {lens.dtype} and "
                f"shape {lens.shape}"
            )
        if (lens <= 0).any():
            raise ValueError(f"{self.SEQ_LENS!r} must be positive, got {lens.tolist()}")
        bounds = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum(lens, out=bounds[1:])
        if bounds[-1] != self.count:
            raise ValueError(
                f"{self.SEQ_LENS!r} sum to {int(bounds[-1])} but the batch has {self.count} rows"
            )
        return bounds

    def _take_sequences(
        self, seq_index: np.ndarray, bounds: np.ndarray | None = None
    ) -> SampleBatch:
        """New batch of whole sequences ``seq_index`` (in that order), with their ``seq_lens``.

        ``bounds`` is ``_sequence_bounds`` when the caller already has it.
        """
        if bounds is None:
            bounds = self._sequence_bounds()
        seq_index = np.asarray(seq_index, dtype=np.int64)
        lens = np.diff(bounds)[seq_index]
        starts = bounds[:-1][seq_index]
        offsets = np.cumsum(lens) - lens
        rows = np.arange(int(lens.sum())) + np.repeat(starts - offsets, lens)
        out = self._take_rows(rows)
        seq_lens = np.asarray(dict.__getitem__(self, self.SEQ_LENS))
        dict.__setitem__(out, self.SEQ_LENS, seq_lens[seq_index])
        return out

    def _segment_bounds(self) -> np.ndarray:
        """Row offsets of the runs of equal ``eps_id`` (and ``env_id``); ``[0, ..., count]``."""
        count = self.count
        if count == 0:
            return np.zeros(1, dtype=np.int64)
        change = np.zeros(count - 1, dtype=bool)
        for key in (self.EPS_ID, self.ENV_ID):
            if key in self:
                ids = np.asarray(_decompressed(super().__getitem__(key)))
                diff = ids[1:] != ids[:-1]
                if diff.ndim > 1:
                    diff = diff.reshape(count - 1, -1).any(axis=1)
                change |= diff
        return np.concatenate(([0], np.flatnonzero(change) + 1, [count])).astype(np.int64)

    def chop_into_sequences(self, max_seq_len: int) -> SampleBatch:
        """Set ``seq_lens``: cut every episode segment into sequences of ``max_seq_len`` steps.

        Segments are the runs of equal ``eps_id`` (and ``env_id`` when present) that
        ``split_by_episode`` returns; a batch with neither column is one segment. Each
        segment is cut from its first row into sequences of ``max_seq_len`` rows, the last
        one holding the remainder, so a sequence never crosses an episode boundary. Rows are
        not moved. Modifies the batch in place and returns it.

        Raises:
            ValueError: If ``max_seq_len`` is not positive.
        """
        max_seq_len = operator.index(max_seq_len)
        if max_seq_len <= 0:
            raise ValueError(f"max_seq_len must be positive, got {max_seq_len}")
        seg_lens = np.diff(self._segment_bounds())
        pieces = -(-seg_lens // max_seq_len)  # ceil
        lens = np.full(int(pieces.sum()), max_seq_len, dtype=np.int64)
        if lens.size:
            last_piece = np.cumsum(pieces) - 1
            lens[last_piece] = seg_lens - max_seq_len * (pieces - 1)
        dict.__setitem__(self, self.SEQ_LENS, lens)
        return self

    @property
    def num_sequences(self) -> int | None:
        """Number of sequences (length of ``seq_lens``), or None without that column."""
        if self.SEQ_LENS not in self:
            return None
        return len(dict.__getitem__(self, self.SEQ_LENS))

    # ------------------------------------------------------------------ row selection

    def _decompressed_view(self) -> SampleBatch:
        """Shallow batch sharing uncompressed arrays, with compressed columns decompressed.

        ``self`` is not modified.
        """
        if not self.is_compressed():
            return self
        out = SampleBatch()
        for k, v in self.items():
            dict.__setitem__(out, k, _decompressed(v))
        return out

    def slice(self, start: int | None = None, end: int | None = None) -> SampleBatch:
        """Rows ``start:end`` (Python slice semantics) as a new batch; same as ``batch[start:end]``.

        Uncompressed columns of the result are numpy views of this batch's arrays; compressed
        columns are decompressed into new arrays. A batch with ``seq_lens`` can only be
        sliced on sequence boundaries; the result holds the ``seq_lens`` of the sequences
        in the slice.

        Raises:
            ValueError: If the batch has ``seq_lens`` and an end falls inside a sequence.
        """
        return self._take(slice(start, end))

    def shuffle(self, rng: np.random.Generator | int | None = None) -> SampleBatch:
        """Return a new batch whose rows are permuted by one random permutation.

        The same permutation is applied to every column, so rows stay aligned. With
        ``seq_lens`` whole sequences are permuted (rows keep their order inside each
        sequence) and ``seq_lens`` follows. ``self`` is not modified.

        Args:
            rng: A numpy ``Generator``, a seed, or ``None`` for fresh entropy.
        """
        rng = np.random.default_rng(rng)
        if self.SEQ_LENS in self:
            return self._take_sequences(rng.permutation(self.num_sequences or 0))
        return self._take(rng.permutation(self.count))

    def minibatches(
        self,
        size: int,
        *,
        shuffle: bool = True,
        rng: np.random.Generator | int | None = None,
    ) -> Iterator[SampleBatch]:
        """Iterate over minibatches that together cover every row exactly once.

        All minibatches have ``size`` rows except possibly the last one, cut by
        ``minibatch_bounds``: a remainder ``count % size`` smaller than ``size / 2`` is
        merged into the last full minibatch, a larger one is a minibatch of its own (see
        ``tail_is_merged``).  A batch of fewer than ``size`` rows is one minibatch.
        An empty batch yields nothing. Arguments are validated eagerly (on the call, not
        the first ``next``).

        A batch with ``seq_lens`` is split into whole sequences instead (shuffled as whole
        sequences): each minibatch takes the next sequences until it has at least ``size``
        rows (so it may exceed ``size`` by less than one sequence), the last one takes what
        is left, merged into the previous one by the same tail rule, and each carries its
        own ``seq_lens``.

        Args:
            size: Rows per minibatch, must be positive.
            shuffle: Shuffle the rows (once) before splitting.
            rng: Generator or seed used for shuffling.

        Raises:
            ValueError: If ``size <= 0``, or ``seq_lens`` does not fit the rows.
        """
        size = operator.index(size)
        if size <= 0:
            raise ValueError(f"minibatch size must be positive, got size={size}")
        source = self._decompressed_view()
        if self.SEQ_LENS in self:
            bounds = self._sequence_bounds()
            lens = np.diff(bounds)
            order = (
                np.random.default_rng(rng).permutation(lens.size)
                if shuffle
                else np.arange(lens.size)
            )
            return self._sequence_minibatch_iter(source, bounds, order, size)
        if shuffle:
            source = source.shuffle(rng)
        return self._minibatch_iter(source, size)

    @staticmethod
    def _minibatch_iter(source: SampleBatch, size: int) -> Iterator[SampleBatch]:
        for start, stop in minibatch_bounds(source.count, size):
            yield source._take(slice(start, stop))

    @staticmethod
    def _sequence_minibatch_iter(
        source: SampleBatch, bounds: np.ndarray, order: np.ndarray, size: int
    ) -> Iterator[SampleBatch]:
        lens = np.diff(bounds)[order].tolist()
        groups: list[list[int]] = []  # [first, stop, rows] in ``order``
        first, rows = 0, 0
        for i, n in enumerate(lens):
            rows += n
            if rows >= size or i == len(lens) - 1:
                groups.append([first, i + 1, rows])
                first, rows = i + 1, 0
        if len(groups) > 1 and tail_is_merged(groups[-1][2], size):
            tail = groups.pop()
            groups[-1][1:] = [tail[1], groups[-1][2] + tail[2]]
        for first, stop, _ in groups:
            yield source._take_sequences(order[first:stop], bounds)

    def split_by_episode(self) -> list[SampleBatch]:
        """Split into contiguous runs of equal ``eps_id`` (and ``env_id`` if that column exists).

        A new run starts wherever ``eps_id`` changes, and also wherever ``env_id`` changes when
        the batch has an ``env_id`` column. Runs are returned in order; concatenating them gives
        back this batch. An empty batch gives an empty list. With ``seq_lens`` every run
        boundary must be a sequence boundary (as ``chop_into_sequences`` makes them).

        Raises:
            ValueError: If there is no ``eps_id`` column, or a run boundary cuts a sequence.
        """
        if self.EPS_ID not in self:
            raise ValueError(f"split_by_episode needs an {self.EPS_ID!r} column")
        if self.count == 0:
            return []
        bounds = self._segment_bounds()
        source = self._decompressed_view()
        return [source._take(slice(s, e)) for s, e in itertools.pairwise(bounds.tolist())]

    # ------------------------------------------------------------------ concatenation

    @staticmethod
    def concat_samples(batches: Sequence[SampleBatch]) -> SampleBatch:
        """Concatenate batches row-wise into a new batch.

        Batches without any column are skipped; all others must have identical column sets.
        Compressed columns are decompressed on copies (inputs are not modified); the result is
        uncompressed. An empty sequence gives an empty batch.

        Raises:
            TypeError: If an element is not a ``SampleBatch`` (use the module-level
                ``concat_samples`` for ``MultiAgentBatch``).
            ValueError: If column sets differ (names the missing/extra columns) or a column's
                trailing shapes are incompatible.
        """
        for b in batches:
            if not isinstance(b, SampleBatch):
                raise TypeError(
                    f"SampleBatch.concat_samples expects SampleBatch inputs, got {type(b).__name__}"
                )
        nonempty = [b for b in batches if len(b) > 0]
        if not nonempty:
            return SampleBatch()
        keys = list(nonempty[0].keys())
        key_set = set(keys)
        for i, b in enumerate(nonempty[1:], start=1):
            other = set(b.keys())
            if other != key_set:
                missing = sorted(key_set - other)
                extra = sorted(other - key_set)
                raise ValueError(
                    f"cannot concatenate SampleBatches with different columns: batch {i} is "
                    f"missing columns {missing} and has extra columns {extra} "
                    f"compared to the first batch"
                )
        out = SampleBatch()
        for k in keys:
            arrays = [_decompressed(dict.__getitem__(b, k)) for b in nonempty]
            try:
                col = np.concatenate(arrays, axis=0)
            except ValueError as e:
                raise ValueError(f"cannot concatenate column {k!r}: {e}") from e
            dict.__setitem__(out, k, col)
        return out

    def concat(self, other: SampleBatch) -> SampleBatch:
        """Return a new batch with ``other``'s rows appended to this batch's rows."""
        return SampleBatch.concat_samples([self, other])

    # ------------------------------------------------------------------ compression

    def compress(
        self, columns: str | Iterable[str] = (OBS, NEW_OBS), bulk: bool = True
    ) -> SampleBatch:
        """LZ4-compress the named columns that are present, in place; returns ``self``.

        Args:
            columns: Column name(s) to compress; absent or already compressed ones are skipped.
            bulk: Compress each column as one blob (``CompressedColumn``). With
                ``bulk=False`` every row is compressed separately and the column becomes a 1-D
                object array of ``CompressedColumn`` (a zero-row column is compressed in
                bulk since there is no row to compress).

        Raises:
            ValueError: If a named column has object dtype.
        """
        if isinstance(columns, str):
            columns = (columns,)
        for k in columns:
            if k not in self:
                continue
            v = super().__getitem__(k)
            if _is_compressed_value(v):
                continue
            if v.dtype.hasobject:
                raise ValueError(f"cannot compress column {k!r} of object dtype")
            if bulk or len(v) == 0:
                compressed: Any = CompressedColumn.from_array(v)
            else:
                compressed = np.empty(len(v), dtype=object)
                for i in range(len(v)):
                    compressed[i] = CompressedColumn.from_array(v[i])
            dict.__setitem__(self, k, compressed)
        return self

    def is_compressed(self, column: str | None = None) -> bool:
        """Whether ``column`` (or, if ``None``, any column) is compressed.

        Raises:
            KeyError: If ``column`` is given but not in the batch.
        """
        if column is None:
            return any(_is_compressed_value(v) for v in self.values())
        return _is_compressed_value(super().__getitem__(column))

    def decompress_if_needed(self, columns: str | Iterable[str] | None = None) -> SampleBatch:
        """Decompress compressed columns in place (all, or the named present ones); returns self.

        Columns that are not compressed are left untouched.
        """
        if columns is None:
            columns = list(self.keys())
        elif isinstance(columns, str):
            columns = (columns,)
        for k in columns:
            if k in self:
                v = super().__getitem__(k)
                if _is_compressed_value(v):
                    dict.__setitem__(self, k, _decompressed(v))
        return self

    # ------------------------------------------------------------------ multi-agent

    def as_multi_agent(self, policy_id: str = DEFAULT_POLICY_ID) -> MultiAgentBatch:
        """Wrap this batch (not a copy) as the only policy batch of a ``MultiAgentBatch``.

        ``env_steps`` of the result is this batch's ``count``.
        """
        return MultiAgentBatch({policy_id: self}, self.count)


class MultiAgentBatch:
    """One ``SampleBatch`` per policy id plus the number of environment steps they cover.

    Attributes:
        policy_batches: Policy id -> that policy's experience.
    """

    __slots__ = ("_env_steps", "policy_batches")

    def __init__(self, policy_batches: Mapping[str, SampleBatch], env_steps: int) -> None:
        """Create the batch; the mapping is copied, the policy batches are not.

        Raises:
            TypeError: If a value is not a ``SampleBatch``.
            ValueError: If ``env_steps`` is negative.
        """
        for pid, b in policy_batches.items():
            if not isinstance(b, SampleBatch):
                raise TypeError(
                    f"policy batch {pid!r} must be a SampleBatch, got {type(b).__name__}"
                )
        env_steps = operator.index(env_steps)
        if env_steps < 0:
            raise ValueError(f"env_steps must be non-negative, got {env_steps}")
        self.policy_batches: dict[str, SampleBatch] = dict(policy_batches)
        self._env_steps = env_steps

    @property
    def count(self) -> int:
        """Number of environment steps (the ``env_steps`` given at construction)."""
        return self._env_steps

    def env_steps(self) -> int:
        """Number of environment steps; same as ``count``."""
        return self._env_steps

    def agent_steps(self) -> int:
        """Total rows over all policy batches."""
        return sum(b.count for b in self.policy_batches.values())

    @staticmethod
    def concat_samples(batches: Sequence[MultiAgentBatch | SampleBatch]) -> MultiAgentBatch:
        """Concatenate per policy; ``env_steps`` are summed.

        ``SampleBatch`` inputs are treated as ``DEFAULT_POLICY_ID`` batches with
        ``env_steps`` equal to their count. A policy missing from some inputs is concatenated
        from the inputs that have it. Inputs are not modified.

        Raises:
            TypeError: If an element is neither batch type.
            ValueError: If a policy's batches have different column sets.
        """
        per_policy: dict[str, list[SampleBatch]] = {}
        env_steps = 0
        for b in batches:
            if isinstance(b, SampleBatch):
                b = b.as_multi_agent()
            elif not isinstance(b, MultiAgentBatch):
                raise TypeError(f"expected MultiAgentBatch or SampleBatch, got {type(b).__name__}")
            env_steps += b.count
            for pid, pb in b.policy_batches.items():
                per_policy.setdefault(pid, []).append(pb)
        return MultiAgentBatch(
            {pid: SampleBatch.concat_samples(pbs) for pid, pbs in per_policy.items()}, env_steps
        )

    def compress(
        self,
        columns: str | Iterable[str] = (SampleBatch.OBS, SampleBatch.NEW_OBS),
        bulk: bool = True,
    ) -> MultiAgentBatch:
        """Compress the named columns of every policy batch in place; returns ``self``."""
        if not isinstance(columns, str):
            columns = tuple(columns)
        for b in self.policy_batches.values():
            b.compress(columns, bulk=bulk)
        return self

    def decompress_if_needed(self, columns: str | Iterable[str] | None = None) -> MultiAgentBatch:
        """Decompress compressed columns of every policy batch in place; returns ``self``."""
        if columns is not None and not isinstance(columns, str):
            columns = tuple(columns)
        for b in self.policy_batches.values():
            b.decompress_if_needed(columns)
        return self

    def is_compressed(self) -> bool:
        """Whether any policy batch has a compressed column."""
        return any(b.is_compressed() for b in self.policy_batches.values())

    def size_bytes(self) -> int:
        """Sum of ``SampleBatch.size_bytes`` over the policy batches."""
        return sum(b.size_bytes() for b in self.policy_batches.values())

    def copy(self) -> MultiAgentBatch:
        """Copy with every policy batch copied (see ``SampleBatch.copy``)."""
        return MultiAgentBatch(
            {pid: b.copy() for pid, b in self.policy_batches.items()}, self._env_steps
        )

    def __repr__(self) -> str:
        """``MultiAgentBatch(env_steps=..., policy_batches={pid: count, ...})``."""
        counts = {pid: b.count for pid, b in self.policy_batches.items()}
        return f"MultiAgentBatch(env_steps={self._env_steps}, policy_batches={counts})"


def concat_samples(
    batches: Sequence[SampleBatch | MultiAgentBatch],
) -> SampleBatch | MultiAgentBatch:
    """Concatenate batches, returning a ``MultiAgentBatch`` if any input is one.

    Otherwise this is ``SampleBatch.concat_samples`` (an empty sequence gives an empty
    ``SampleBatch``).
    """
    if any(isinstance(b, MultiAgentBatch) for b in batches):
        return MultiAgentBatch.concat_samples(batches)
    return SampleBatch.concat_samples(batches)  # type: ignore[arg-type]
