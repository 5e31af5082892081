"""Result logs that users already read: ``result.jsonl``, ``progress.csv``, TensorBoard.

``ResultLogger`` writes each ``train()`` result of a run to one directory, in the
files and with the metric names of Ray Tune's default loggers, so that ``tensorboard
--logdir`` and CSV tools treat a ``hierl train`` run like a Tune trial:

    with ResultLogger("runs/ppo_cartpole") as log:
        for _ in range(100):
            log.log(trainer.train())

* ``result.jsonl`` — one JSON object per iteration (every key, as returned).
* ``progress.csv`` — nested dicts flattened with ``/`` (Tune's ``CSVLoggerCallback``).
  The header is every key seen so far, in the order first seen.  Tune keeps its first
  header and silently drops keys that appear later; here a key that first appears later
  (e.g. evaluation metrics every ``evaluation_interval`` iterations) rewrites the file
  once, atomically, with the wider header, earlier rows getting empty cells: every row
  of the file has the same columns and no metric is lost.
* ``events.out.tfevents.*`` — TensorBoard scalars (and histograms of numeric lists)
  under ``ray/tune/<key>`` at step ``timesteps_total`` (``training_iteration`` while
  that is 0), without ``config``, ``pid``, ``timestamp``, ``time_total_s`` and
  ``training_iteration``; NaN values are skipped (Tune's ``TBXLoggerCallback``).

All three are flushed after every iteration.  A logger always appends: to continue a
run from a checkpoint, first ``truncate_logs`` to the checkpoint's iteration so that
the logs match the restored state.  ``tensorboardX`` and numpy are imported only when
first needed (the CLI imports this module for its file names).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hierl.files import atomic_write

RESULTS_FILE = "result.jsonl"
"""One JSON result per line."""
PROGRESS_FILE = "progress.csv"
"""Flattened results as CSV (Tune's file name)."""
EVENTS_GLOB = "events.out.tfevents.*"
"""TensorBoard event files (tensorboardX's naming)."""
TB_PREFIX = "ray/tune/"
"""Prefix of every TensorBoard tag, as Tune writes them."""
TB_SKIPPED_KEYS = ("config", "pid", "timestamp", "time_total_s", "training_iteration")
"""Result keys Tune leaves out of TensorBoard."""

logger = logging.getLogger(__name__)


def flatten_result(result: Mapping[str, Any], delimiter: str = "/") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` (Tune's ``flatten_dict``)."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, Mapping) and value:
            for sub, v in flatten_result(value, delimiter).items():
                out[f"{key}{delimiter}{sub}"] = v
        else:
            out[str(key)] = value
    return out


def tensorboard_step(result: Mapping[str, Any]) -> int:
    """The TensorBoard step of a result: ``timesteps_total``, else ``training_iteration``."""
    return int(result.get("timesteps_total") or result.get("training_iteration") or 0)


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


class _CSVWriter:
    """``progress.csv`` with a header that only grows (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = path
        self.fields: list[str] = []
        if path.exists() and path.stat().st_size > 0:
            with open(path, newline="") as f:
                self.fields = next(csv.reader(f), [])
        self._file = open(path, "a", newline="")  # noqa: SIM115 (closed in close())

    def write(self, row: Mapping[str, Any]) -> None:
        new = [k for k in row if k not in self.fields]
        if new or not self.fields:
            self._widen(self.fields + new)
        csv.DictWriter(self._file, self.fields).writerow(row)
        self._file.flush()

    def _widen(self, fields: list[str]) -> None:
        """Rewrite the file with header ``fields`` (old rows keep their values)."""
        self._file.close()
        rows: list[dict[str, str]] = []
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, newline="") as f:
                rows = list(csv.DictReader(f))
        _write_csv(self.path, fields, rows)
        self.fields = fields
        self._file = open(self.path, "a", newline="")  # noqa: SIM115

    def close(self) -> None:
        self._file.close()


def _write_csv(path: Path, fields: list[str], rows: list[Mapping[str, Any]]) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


class _TBXWriter:
    """TensorBoard scalars and histograms, named as Tune's ``TBXLoggerCallback``."""

    def __init__(self, logdir: Path):
        from tensorboardX import SummaryWriter

        # A new file per writer; the suffix keeps a resumed run from reusing (and
        # truncating) the name of one written in the same second.
        existing = len(list(logdir.glob(EVENTS_GLOB)))
        suffix = f".{existing}" if existing else ""
        self._writer = SummaryWriter(str(logdir), flush_secs=30, filename_suffix=suffix)

    def write(self, result: Mapping[str, Any]) -> None:
        import numpy as np

        step = tensorboard_step(result)
        flat = flatten_result({k: v for k, v in result.items() if k not in TB_SKIPPED_KEYS})
        for key, value in flat.items():
            tag = TB_PREFIX + key
            if isinstance(value, (int, float, np.integer, np.floating)):
                if not math.isnan(value):
                    self._writer.add_scalar(tag, value, global_step=step)
            elif isinstance(value, (list, tuple, np.ndarray)) and len(value) > 0:
                # not numeric: left out here, result.jsonl still has it
                with contextlib.suppress(ValueError, TypeError):
                    self._writer.add_histogram(tag, np.asarray(value), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class ResultLogger:
    """Appends every result to ``result.jsonl``, ``progress.csv`` and TensorBoard event
    files in ``logdir`` (created if needed), flushing each file every iteration.

    Args:
        logdir: the run's directory.
        json: write ``result.jsonl``.
        csv: write ``progress.csv``.
        tensorboard: write TensorBoard event files (needs ``tensorboardX``, installed
            with ``ray[tune]``).
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        *,
        json: bool = True,
        csv: bool = True,
        tensorboard: bool = True,
    ):
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._json = open(self.logdir / RESULTS_FILE, "a") if json else None  # noqa: SIM115
        self._csv = _CSVWriter(self.logdir / PROGRESS_FILE) if csv else None
        self._tbx = _TBXWriter(self.logdir) if tensorboard else None

    def log(self, result: Mapping[str, Any]) -> None:
        """Append one ``train()`` result to every enabled file and flush them."""
        if self._json is not None:
            self._json.write(json.dumps(dict(result), default=_json_default) + "\n")
            self._json.flush()
        if self._csv is not None:
            row = flatten_result({k: v for k, v in result.items() if k != "config"})
            self._csv.write(row)
        if self._tbx is not None:
            self._tbx.write(result)

    def close(self) -> None:
        """Flush and close every file."""
        for part in (self._json, self._csv, self._tbx):
            if part is not None:
                part.close()
        self._json = self._csv = self._tbx = None

    def __enter__(self) -> ResultLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- reading and truncating (resume) -----------------------------------------------------
def read_results(logdir: str | os.PathLike) -> list[dict[str, Any]]:
    """The complete results in ``logdir/result.jsonl`` (a line cut short by a crash is
    skipped)."""
    path = Path(logdir) / RESULTS_FILE
    if not path.exists():
        return []
    results = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            results.append(row)
    return results


def _iteration(row: Mapping[str, Any]) -> float:
    try:
        return float(row.get("training_iteration") or 0)
    except (TypeError, ValueError):
        return math.inf


def truncate_logs(logdir: str | os.PathLike, iteration: int) -> list[dict[str, Any]]:
    """Drop every row logged after ``training_iteration`` = ``iteration`` from the logs
    in ``logdir`` (JSON lines, CSV rows and TensorBoard events), atomically per file, so
    that a run continued from that iteration's checkpoint appends to logs that match the
    restored state.  Rows cut short by a crash are dropped too.  Returns the kept results.
    """
    logdir = Path(logdir)
    kept = [r for r in read_results(logdir) if _iteration(r) <= iteration]
    path = logdir / RESULTS_FILE
    if path.exists():
        _atomic_write_text(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in kept))
    progress = logdir / PROGRESS_FILE
    if progress.exists() and progress.stat().st_size > 0:
        with open(progress, newline="") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            rows = [r for r in reader if None not in r and _iteration(r) <= iteration]
        _write_csv(progress, fields, rows)
    last_step = tensorboard_step(kept[-1]) if kept else 0
    for events in sorted(logdir.glob(EVENTS_GLOB)):
        _truncate_events(events, last_step)
    return kept


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def iter_event_records(path: str | os.PathLike) -> Iterator[tuple[bytes, bytes]]:
    """``(record, event)`` for each record of a TensorBoard event file: the record's bytes
    as framed on disk (TFRecord: length, its CRC, data, the data's CRC) and the
    serialized ``Event`` proto it holds; stops at a record cut short by a crash."""
    with open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = f.read(length)
            trailer = f.read(4)
            if len(data) < length or len(trailer) < 4:
                return
            yield header + data + trailer, data


def read_scalars(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Tag -> ``[(step, value), ...]`` of the scalars in one TensorBoard event file."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[tuple[int, float]]] = {}
    for _, data in iter_event_records(path):
        event = Event.FromString(data)
        for value in event.summary.value:
            if value.WhichOneof("value") == "simple_value":
                out.setdefault(value.tag, []).append((int(event.step), float(value.simple_value)))
    return out


def _truncate_events(path: Path, last_step: int) -> None:
    """Keep the events of ``path`` up to step ``last_step`` (and those without a
    summary, such as the file-version header), copying their records verbatim."""
    from tensorboardX.proto.event_pb2 import Event

    kept = []
    for record, data in iter_event_records(path):
        event = Event.FromString(data)
        if not event.HasField("summary") or event.step <= last_step:
            kept.append(record)
    atomic_write(path, lambda tmp: tmp.write_bytes(b"".join(kept)))
