"""Reading logged experience: shuffled training batches and whole logged episodes.

``ParquetInput`` streams the Parquet files of an ``input`` (a directory, a glob or
a list of files) in bounded memory: each epoch visits the files in a seeded random
order, reads them ``shuffle_window`` rows at a time (only those row groups), shuffles
each window with a generator seeded by ``(seed, epoch, window)`` and hands out batches of
``batch_size`` rows.  Its position (epoch, rows handed out in it) is all a checkpoint
needs: restoring recomputes the same window and skips to the same row, so a resumed run
neither re-reads nor skips data.

Evaluator ``i`` of ``n`` reads the files ``i-1, i-1+n, ...`` of the sorted list, so on a
cluster each evaluator reads its own share on its own node.
"""

from __future__ import annotations

import atexit
import bisect
import glob
import logging
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hierl.evaluators.offline.schema import (
    METADATA_KEY,
    OfflineDataError,
    read_metadata,
    table_to_batch,
)
from hierl.evaluators.offline.writer import PART_MARK
from hierl.sample_batch import SampleBatch

logger = logging.getLogger(__name__)

Postprocess = Callable[[SampleBatch], SampleBatch]
"""Applied to each window of rows (whole row groups, each in file order) before it is
shuffled."""


def list_files(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The Parquet files of an input: a directory (searched recursively), a glob pattern,
    a file, or a list of those; sorted, without the parts of a file already finished
    (``hierl.evaluators.offline.writer``) and without temporary files.

    Raises:
        OfflineDataError: a path that does not exist or matches nothing, or no files.
    """
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    files: list[Path] = []
    for src in sources:
        path = Path(src).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.parquet") if not p.name.startswith("."))
            if not found:
                raise OfflineDataError(f"input directory '{path}' holds no .parquet files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif glob.has_magic(str(src)):
            matched = sorted(Path(p) for p in glob.glob(str(path), recursive=True))
            if not matched:
                raise OfflineDataError(f"input pattern '{src}' matches no files")
            files.extend(p for p in matched if p.is_file())
        else:
            raise OfflineDataError(
                f"input '{src}' does not exist (expected a directory of .parquet files, a "
                "glob pattern, a file, or a list of those)"
            )
    finished = {str(p)[: -len(".parquet")] for p in files if PART_MARK not in p.name}
    files = [p for p in dict.fromkeys(files) if not _part_of_finished(p, finished)]
    if not files:
        raise OfflineDataError(f"input {source!r} holds no data files")
    return files


def _part_of_finished(path: Path, finished: set[str]) -> bool:
    text = str(path)
    return PART_MARK in path.name and text[: text.rindex(PART_MARK)] in finished


@dataclass
class _File:
    path: Path
    meta: dict[str, Any]
    group_rows: list[int]
    """Rows of each row group."""

    @property
    def num_rows(self) -> int:
        return sum(self.group_rows)


def open_file(path: Path) -> _File:
    """A file's row counts and hierl metadata (its footer only), or OfflineDataError."""
    try:
        md = pq.ParquetFile(path).metadata
    except (OSError, pa.ArrowException) as e:
        raise OfflineDataError(f"input file '{path}' is not a readable Parquet file: {e}") from e
    meta = read_metadata(md.schema.to_arrow_schema(), f"input file '{path}'")
    return _File(path, meta, [md.row_group(i).num_rows for i in range(md.num_row_groups)])


def read_file(file: _File) -> SampleBatch:
    """All rows of ``file``."""
    try:
        table = pq.read_table(file.path)
    except (OSError, pa.ArrowException) as e:
        raise OfflineDataError(f"input file '{file.path}' is corrupt: {e}") from e
    return table_to_batch(table, file.meta)


@dataclass(frozen=True)
class _Chunk:
    """One row group of one file: the unit of reading and of the epoch's shuffle."""

    file: _File
    group: int

    @property
    def num_rows(self) -> int:
        return self.file.group_rows[self.group]


class ParquetInput:
    """Shuffled batches of ``batch_size`` rows from Parquet files, forever (epochs).

    Each epoch orders the files' row groups (*chunks*; hierl writes groups of at most
    ``ROW_GROUP_ROWS`` rows) at random, cuts that sequence into windows of at least
    ``shuffle_window`` rows, and reads one window at a time, shuffled: so rows of
    different files mix, and memory holds one window.

    Args:
        files: the data files (``list_files``), already this evaluator's share.
        batch_size: rows per ``next()``.
        shuffle_window: rows read and shuffled together (at least ``batch_size``); 0
            reads in file order without shuffling.
        seed: seeds the chunk order and the shuffles.
        skip_bad_files: a file that cannot be read is logged and skipped instead of
            raising.
        check: called with each file's metadata and name (e.g. to check the observation
            shape); it raises OfflineDataError for a file that does not fit.
        postprocess: applied to each window in chunk order (before shuffling rows).
    """

    def __init__(
        self,
        files: Sequence[Path],
        batch_size: int,
        *,
        shuffle_window: int = 10_000,
        seed: int | None = None,
        skip_bad_files: bool = False,
        check: Callable[[dict[str, Any], str], None] | None = None,
        postprocess: Postprocess | None = None,
    ):
        self.batch_size = batch_size
        self.shuffle = shuffle_window > 0
        self.window = max(shuffle_window, batch_size)
        self.seed = 0 if seed is None else seed
        self.skip_bad_files = skip_bad_files
        self.postprocess = postprocess
        self.skipped: list[str] = []
        self.files: list[_File] = []
        for path in files:
            try:
                f = open_file(path)
                if check is not None:
                    check(f.meta, f"input file '{path}'")
            except OfflineDataError as e:
                self._skip_or_raise(e)
                continue
            if f.num_rows:
                self.files.append(f)
        if not self.files:
            raise OfflineDataError(
                f"the input holds no rows ({len(files)} file(s), {len(self.skipped)} skipped)"
            )
        self.epoch = 0
        self.row = 0  # rows handed out in this epoch
        self._windows: list[list[_Chunk]] = []
        self._starts: list[int] = []
        self._cache: tuple[tuple[int, int], SampleBatch] | None = None
        self._begin_epoch()

    def _skip_or_raise(self, error: OfflineDataError) -> None:
        if not self.skip_bad_files:
            raise OfflineDataError(f"{error} (set input_skip_bad_files to skip it)") from error
        logger.warning("skipping bad input file: %s", error)
        self.skipped.append(str(error))

    @property
    def num_rows(self) -> int:
        """Rows in one epoch."""
        return sum(f.num_rows for f in self.files)

    def _begin_epoch(self) -> None:
        chunks = [_Chunk(f, g) for f in self.files for g in range(len(f.group_rows))]
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(chunks))
            chunks = [chunks[i] for i in order]
        self._windows, self._starts = [], [0]
        current: list[_Chunk] = []
        rows = 0
        for chunk in chunks:
            current.append(chunk)
            rows += chunk.num_rows
            if rows >= self.window:
                self._windows.append(current)
                self._starts.append(self._starts[-1] + rows)
                current, rows = [], 0
        if current:
            self._windows.append(current)
            self._starts.append(self._starts[-1] + rows)
        self._cache = None

    def _read_chunk(self, chunk: _Chunk, opened: dict[Path, pq.ParquetFile]) -> SampleBatch:
        """One row group, through ``opened`` (each file's footer is parsed once)."""
        try:
            handle = opened.get(chunk.file.path)
            if handle is None:
                handle = opened[chunk.file.path] = pq.ParquetFile(chunk.file.path)
            table = handle.read_row_group(chunk.group)
        except (OSError, pa.ArrowException) as e:
            error = OfflineDataError(f"input file '{chunk.file.path}' is corrupt: {e}")
            self._skip_or_raise(error)
            self.files.remove(chunk.file)
            if not self.files:
                raise OfflineDataError("every input file was bad") from e
            self._begin_epoch()
            self.row = min(self.row, self._starts[-1])
            raise _Restart from None
        return table_to_batch(table, chunk.file.meta)

    def _window_rows(self, k: int) -> SampleBatch:
        """Window ``k`` of this epoch, postprocessed and shuffled (cached)."""
        key = (self.epoch, k)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        opened: dict[Path, pq.ParquetFile] = {}
        rows = SampleBatch.concat_samples([self._read_chunk(c, opened) for c in self._windows[k]])
        if self.postprocess is not None:
            rows = self.postprocess(rows)
        if self.shuffle:
            perm = np.random.default_rng([self.seed, self.epoch, k]).permutation(rows.count)
            rows = SampleBatch({c: v[perm] for c, v in rows.items()})
        self._cache = (key, rows)
        return rows

    def next(self) -> SampleBatch:
        """The next ``batch_size`` rows (crossing windows and epochs as needed)."""
        while True:
            try:
                return self._next()
            except _Restart:
                continue

    def _next(self) -> SampleBatch:
        pieces, need = [], self.batch_size
        row = self.row
        while need:
            if row >= self._starts[-1]:
                self.epoch += 1
                row = self.row = 0
                self._begin_epoch()
            k = bisect.bisect_right(self._starts, row) - 1
            rows = self._window_rows(k)
            lo = row - self._starts[k]
            take = min(need, rows.count - lo)
            pieces.append(rows.slice(lo, lo + take))
            row += take
            need -= take
        self.row = row  # only once the whole batch was read
        return pieces[0] if len(pieces) == 1 else SampleBatch.concat_samples(pieces)

    def get_state(self) -> dict[str, Any]:
        """The reading position (JSON scalars)."""
        return {"epoch": self.epoch, "row": self.row, "files": [str(f.path) for f in self.files]}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a ``get_state`` position (same files, seed and window)."""
        files = [str(f.path) for f in self.files]
        if list(state.get("files", files)) != files:
            raise OfflineDataError(
                "the checkpoint's reader position is for other input files "
                f"({len(state['files'])} files, first {state['files'][:1]}) than this input "
                f"({len(files)} files, first {files[:1]}); resume with the same input"
            )
        self.epoch = int(state["epoch"])
        self.row = int(state["row"])
        self._begin_epoch()


class _Restart(Exception):
    """A bad file was skipped mid-read: the epoch starts again without it."""


def iter_episodes(files: Sequence[Path], *, skip_bad_files: bool = False) -> Iterator[SampleBatch]:
    """The whole logged episodes of ``files`` in file order: runs of rows of one episode
    that start at ``t == 0`` and end terminated or truncated (pieces cut by a fragment
    boundary are skipped)."""
    from hierl.postprocessing import trajectory_ends

    for path in files:
        try:
            f = open_file(path)
            rows = read_file(f) if f.num_rows else None
        except OfflineDataError:
            if not skip_bad_files:
                raise
            logger.warning("skipping bad input file '%s'", path)
            continue
        if rows is None:
            continue
        ends = np.flatnonzero(trajectory_ends(rows[SampleBatch.EPS_ID], rows[SampleBatch.T]))
        start = 0
        for end in ends:
            run = rows.slice(start, end + 1)
            start = end + 1
            done = run[SampleBatch.TERMINATEDS][-1] or run[SampleBatch.TRUNCATEDS][-1]
            if run[SampleBatch.T][0] == 0 and done:
                yield run


class RayDataInput:
    """Shuffled batches of ``batch_size`` rows from a ``ray.data.Dataset``, forever.

    Ray Data streams the dataset (blocks are read as they are consumed, so it may be
    larger than memory) and shuffles rows in a local buffer of ``shuffle_window`` rows.
    Each evaluator iterates the whole dataset with its own seed.  The position saved in a
    checkpoint is (epoch, rows handed out); on restore the epoch is iterated again and
    that many rows are skipped (Ray Data's local shuffle is not reproducible, so which
    rows those are may differ).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        *,
        shuffle_window: int = 10_000,
        seed: int | None = None,
        postprocess: Postprocess | None = None,
    ):
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle_window = shuffle_window
        self.seed = seed
        self.postprocess = postprocess
        self.epoch = 0
        self.row = 0
        self._it: Iterator[dict[str, np.ndarray]] | None = None
        self._left: SampleBatch | None = None  # rows of the last block not handed out
        self.columns = _hierl_columns(dataset)
        """The dtypes and row shapes of a dataset of hierl's files (else empty)."""
        self._close_at_exit = False

    def close(self) -> None:
        """End the current pass over the dataset (while Ray is up: Ray Data reports the
        end of an iteration to Ray).  Reading again starts a new pass."""
        it, self._it = self._it, None
        close = getattr(it, "close", None)
        if close is not None:
            close()

    def _epoch_iterator(self) -> Iterator[dict[str, np.ndarray]]:
        if not self._close_at_exit:
            # CRUCIAL: registered after ray.init, so it runs before Ray's own exit hook
            # (atexit is last in, first out): an iterator ended after Ray shut down
            # prints Ray Data's "Ray is not initialized" traceback.
            atexit.register(_close_reader, weakref.ref(self))
            self._close_at_exit = True
        self.close()
        return iter(
            self.dataset.iter_batches(
                batch_size=self.batch_size,
                batch_format="numpy",
                drop_last=False,
                local_shuffle_buffer_size=self.shuffle_window or None,
                local_shuffle_seed=None if self.seed is None else self.seed + self.epoch,
            )
        )

    def next(self) -> SampleBatch:
        """The next ``batch_size`` rows."""
        pieces, need = [], self.batch_size
        restarted = False
        while need:
            if self._left is None:
                if self._it is None:
                    self._it = self._epoch_iterator()
                try:
                    self._left = SampleBatch(_numpy_columns(next(self._it), self.columns))
                except StopIteration:
                    if restarted:
                        raise OfflineDataError("the input Ray dataset holds no rows") from None
                    restarted, self._it = True, None
                    self.epoch, self.row = self.epoch + 1, 0
                    continue
                restarted = False
                if self.postprocess is not None:
                    self._left = self.postprocess(self._left)
            rows, take = self._left, min(need, self._left.count)
            pieces.append(rows.slice(0, take))
            self._left = rows.slice(take, rows.count) if take < rows.count else None
            self.row += take
            need -= take
        return pieces[0] if len(pieces) == 1 else SampleBatch.concat_samples(pieces)

    def get_state(self) -> dict[str, Any]:
        """The reading position."""
        return {"epoch": self.epoch, "row": self.row}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue at ``state``'s epoch after skipping its row count."""
        self.epoch = int(state["epoch"])
        self._it = self._epoch_iterator()
        self._left = None
        self.row = 0
        skip = int(state["row"])
        while self.row < skip:
            block = next(self._it, None)
            if block is None:
                break
            rows = SampleBatch(_numpy_columns(block, self.columns))
            take = min(rows.count, skip - self.row)
            self.row += take
            if take < rows.count:
                self._left = rows.slice(take, rows.count)
                if self.postprocess is not None:
                    self._left = self.postprocess(self._left)


def _close_reader(ref: weakref.ref[RayDataInput]) -> None:
    reader = ref()
    if reader is not None:
        reader.close()


def _hierl_columns(dataset: Any) -> dict[str, Any]:
    """The ``columns`` of the hierl schema metadata of a dataset read from hierl's
    Parquet files (``ray.data.read_parquet`` keeps it), else ``{}``."""
    try:
        schema = dataset.schema().base_schema
    except AttributeError:  # not an Arrow-backed schema: no hierl metadata
        return {}
    if schema is None or METADATA_KEY not in (schema.metadata or {}):
        return {}
    return read_metadata(schema, "the input Ray dataset")["columns"]


def _numpy_columns(
    batch: dict[str, Any], columns: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """Ray Data's numpy batch: hierl's shaped columns (rows of bytes, or flat lists in
    version 1 files) given their dtype and shape, other object columns stacked."""
    out = {}
    for name, value in batch.items():
        value = np.asarray(value)
        info = (columns or {}).get(name)
        if info is not None and info["shape"] and value.dtype == object:
            dtype, shape = np.dtype(info["dtype"]), tuple(info["shape"])
            rows = [np.frombuffer(v, dtype) if isinstance(v, bytes) else v for v in value]
            value = np.stack(rows).astype(dtype, copy=False).reshape((len(rows), *shape))
        elif value.dtype == object:
            value = np.stack(value)
        out[name] = value
    return out
