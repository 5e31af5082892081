"""OutputWriter: every batch an evaluator samples, written to Parquet before it is used.

Files are named ``<dir>/[policy_id/]output-<run>-w<worker>-<n>.parquet`` (one series per
evaluator and run; multi-agent batches go to one sub-directory per policy).  A batch is
durable before ``write`` returns: it is written at once as a *part*
``output-<run>-w<worker>-<n>.part-<k>.parquet`` (temporary name, fsync, rename).  When a
file's parts reach ``max_file_size`` bytes (uncompressed), or on ``close()``, they are
written again as one file under the final name (atomically) and the parts are deleted.
A crash therefore never leaves a partial file under a final name and never loses a
written batch; readers (``hierl.evaluators.offline.reader.list_files``) ignore the
parts of a stem whose final file exists, so a crash between the two steps does not
duplicate rows either.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Literal

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq

from hierl.evaluators.offline.schema import OfflineDataError, batch_to_table
from hierl.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

Compression = Literal["zstd", "snappy", "gzip", "lz4", "none"]
DEFAULT_MAX_FILE_SIZE = 64 * 2**20
PART_MARK = ".part-"
ROW_GROUP_ROWS = 1024
ROW_GROUP_BYTES = 8 * 2**20
"""Row groups hold at most this many rows and bytes (at least one row): readers shuffle
whole groups, so small groups mix rows of different files well."""


def write_table_atomically(table: pa.Table, path: Path, compression: Compression) -> None:
    """Write ``table`` to ``path`` through a temporary sibling, fsynced, then renamed."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        row_bytes = max(1, table.nbytes // max(1, table.num_rows))
        pq.write_table(
            table,
            tmp,
            compression=None if compression == "none" else compression,
            row_group_size=max(1, min(ROW_GROUP_ROWS, ROW_GROUP_BYTES // row_bytes)),
        )
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class _Series:
    """The files of one policy written by one evaluator: the current stem's parts."""

    def __init__(self, directory: Path, prefix: str):
        self.directory = directory
        self.prefix = prefix
        self.index = 0
        self.parts: list[Path] = []
        self.tables: list[pa.Table] = []
        self.nbytes = 0

    def stem(self) -> str:
        return f"{self.prefix}-{self.index:05d}"

    def add(self, table: pa.Table, max_file_size: int, compression: Compression) -> None:
        if not self.parts and table.nbytes >= max_file_size:
            write_table_atomically(table, self.directory / f"{self.stem()}.parquet", compression)
            self.index += 1
            return
        part = self.directory / f"{self.stem()}{PART_MARK}{len(self.parts):05d}.parquet"
        write_table_atomically(table, part, compression)
        self.parts.append(part)
        self.tables.append(table)
        self.nbytes += table.nbytes
        if self.nbytes >= max_file_size:
            self.roll(compression)

    def roll(self, compression: Compression) -> None:
        """The parts as one file under the final name; then the parts are deleted."""
        if not self.parts:
            return
        table = pa.concat_tables(self.tables)
        write_table_atomically(table, self.directory / f"{self.stem()}.parquet", compression)
        for part in self.parts:
            part.unlink(missing_ok=True)
        self.parts, self.tables, self.nbytes = [], [], 0
        self.index += 1


class OutputWriter:
    """Writes sample batches of one evaluator as Parquet files under ``path``.

    Args:
        path: the output directory (created if missing).
        spaces: policy id -> ``(observation_space, action_space)`` stored with the data.
        worker_index: the evaluator's index (in the file names).
        max_file_size: roll over to a new file at this many (uncompressed) bytes.
        compression: Parquet compression codec.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        spaces: dict[str, tuple[gym.Space, gym.Space]],
        *,
        worker_index: int = 0,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        compression: Compression = "zstd",
    ):
        self.path = Path(path)
        self.spaces = spaces
        self.max_file_size = max_file_size
        self.compression = compression
        run = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.prefix = f"output-{run}-w{worker_index:03d}"
        self._series: dict[str, _Series] = {}
        self.rows_written = 0

    def write(self, batch: SampleBatch | MultiAgentBatch) -> None:
        """Write ``batch`` (durably, before returning); a MultiAgentBatch by policy."""
        if isinstance(batch, MultiAgentBatch):
            for pid, b in batch.policy_batches.items():
                self.write_policy_batch(pid, b, subdir=True)
        else:
            self.write_policy_batch(DEFAULT_POLICY_ID, batch, subdir=False)

    def write_policy_batch(self, policy_id: str, batch: SampleBatch, subdir: bool) -> None:
        """Write one policy's rows (into ``<path>/<policy_id>/`` when ``subdir``)."""
        if not batch.count:
            return
        obs_space, action_space = self.spaces[policy_id]
        table = batch_to_table(batch, obs_space, action_space, policy_id)
        series = self._series.get(policy_id)
        if series is None:
            directory = self.path / policy_id if subdir else self.path
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # e.g. the path is a file: the user's setting is wrong
                raise OfflineDataError(
                    f"output '{directory}' cannot be used as a directory of Parquet files: {e}"
                ) from e
            series = self._series[policy_id] = _Series(directory, self.prefix)
        series.add(table, self.max_file_size, self.compression)
        self.rows_written += batch.count

    def close(self) -> None:
        """Merge every pending file's parts into its final file."""
        for series in self._series.values():
            series.roll(self.compression)
