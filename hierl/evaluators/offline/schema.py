"""The on-disk format of logged experience: SampleBatch <-> Arrow table, versioned.

One Parquet file holds rows of one policy's SampleBatches.  Every column keeps its
numpy dtype and per-row shape: a column of shape ``(N,)`` is a plain Arrow column, one
of shape ``(N, *shape)`` a fixed-size binary column whose values are the rows' bytes in
C order (uint8 images stay uint8; ``np.frombuffer(value, dtype).reshape(shape)`` reads
one).  Binary rows decode about 40x faster than Parquet's nested lists, which store a
repetition level per element (28,224 of them per Atari frame stack).  Version 1 files
(fixed-size lists) are still read.  The schema's metadata key ``hierl`` holds JSON
(never code):

    {"version": 2, "columns": {"obs": {"dtype": "uint8", "shape": [84, 84, 4]}, ...},
     "observation_space": {...}, "action_space": {...}, "policy_id": "default_policy"}

so a reader rebuilds the arrays exactly and checks the data against the policy it feeds.
"""

from __future__ import annotations

import json
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa

from hierl.evaluators.wire import describe_space, space_to_json
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch

SCHEMA_VERSION = 2
"""Written by this hierl; ``READABLE_VERSIONS`` are read."""
READABLE_VERSIONS = (1, 2)
METADATA_KEY = b"hierl"


class OfflineDataError(ValueError):
    """Logged data is missing, empty, corrupt or does not fit the policy; the message
    names the file (or path) and what was expected."""


# -- batches as tables -------------------------------------------------------------------
def batch_to_table(
    batch: SampleBatch,
    observation_space: gym.Space,
    action_space: gym.Space,
    policy_id: str = DEFAULT_POLICY_ID,
) -> pa.Table:
    """An Arrow table of ``batch``'s rows (decompressed) with the schema metadata."""
    batch = batch.decompress_if_needed()
    if SampleBatch.SEQ_LENS in batch:
        batch = SampleBatch({k: v for k, v in batch.items() if k != SampleBatch.SEQ_LENS})
    arrays, columns = [], {}
    for name, value in batch.items():
        value = np.ascontiguousarray(value)
        if value.dtype == object:
            raise OfflineDataError(
                f"column '{name}' holds Python objects ({value.dtype}); only numeric and "
                "boolean columns can be written"
            )
        columns[name] = {"dtype": value.dtype.str, "shape": list(value.shape[1:])}
        arrays.append(_to_arrow(value))
    meta = {
        "version": SCHEMA_VERSION,
        "columns": columns,
        "observation_space": space_to_json(observation_space),
        "action_space": space_to_json(action_space),
        "policy_id": policy_id,
    }
    return pa.Table.from_arrays(
        arrays, names=list(columns), metadata={METADATA_KEY: json.dumps(meta).encode()}
    )


def _to_arrow(value: np.ndarray) -> pa.Array:
    if value.ndim == 1:
        return pa.array(value)
    rows = np.ascontiguousarray(value)
    width = math.prod(rows.shape[1:]) * rows.dtype.itemsize
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(rows), [None, pa.py_buffer(rows)]
    )


def read_metadata(schema: pa.Schema, where: str) -> dict[str, Any]:
    """The ``hierl`` metadata of a table / file schema; OfflineDataError naming ``where``
    if it is missing or of another version."""
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise OfflineDataError(
            f"{where} has no hierl schema metadata: not written by hierl (or by a tool "
            "that dropped the metadata)"
        )
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise OfflineDataError(f"{where}: its hierl schema metadata is not JSON: {e}") from e
    if meta.get("version") not in READABLE_VERSIONS:
        raise OfflineDataError(
            f"{where} has schema version {meta.get('version')!r}; this hierl reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    return meta


def table_to_batch(table: pa.Table, meta: dict[str, Any]) -> SampleBatch:
    """The SampleBatch of ``table``'s rows, every column with its written dtype and shape."""
    out = SampleBatch()
    n = table.num_rows
    for name, info in meta["columns"].items():
        column = table.column(name).combine_chunks()
        dtype = np.dtype(info["dtype"])
        shape = tuple(info["shape"])
        if pa.types.is_fixed_size_binary(column.type):
            width = column.type.byte_width
            data = np.frombuffer(column.buffers()[1], np.uint8, n * width, column.offset * width)
            out[name] = data.view(dtype).reshape((n, *shape)).copy()  # owns, writable
            continue
        if shape:  # version 1: a fixed-size list
            column = column.flatten()
        values = column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        out[name] = values.reshape((n, *shape))
    return out


def check_obs_shape(
    meta: dict[str, Any], expected: tuple[int, ...], policy_space: gym.Space, where: str
) -> None:
    """OfflineDataError unless the logged observations have the per-row shape
    ``expected`` (what the policy's preprocessor makes of ``policy_space``), naming both."""
    logged = meta.get("columns", {}).get(SampleBatch.OBS)
    if logged is None:
        raise OfflineDataError(f"{where} has no '{SampleBatch.OBS}' column")
    got = tuple(logged["shape"])
    if got != tuple(expected):
        raise OfflineDataError(
            f"{where}: logged observations have shape {got} "
            f"({describe_space(meta['observation_space'])}), but the policy's observation "
            f"space {describe_space(policy_space)} gives rows of shape {tuple(expected)}"
        )
