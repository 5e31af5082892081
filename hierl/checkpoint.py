"""Safe, versioned, atomically written checkpoints.

A checkpoint is a directory holding two files:

* ``checkpoint.json`` — format version, algorithm name, config and the state tree with
  every array replaced by a reference ``{"__array__": "<key>"}``;
* ``arrays.npz`` — the arrays (``numpy.savez``; loaded with ``allow_pickle=False``).

Loading never unpickles and never imports or runs code named in the file.  (A trainer
rebuilt from a checkpoint's config imports a module that config names, such as
``callbacks: "module:Class"`` or ``model.custom_model: "module:function"``, only when
the user allows it: see :mod:`hierl.algorithms.checkpoint_imports`.)

Writing goes to a temporary sibling directory, fsyncs both files, then renames it into
place, so a crash mid-write leaves any previous checkpoint at that path untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1
META_FILE = "checkpoint.json"
ARRAYS_FILE = "arrays.npz"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, of an unknown version or incompatible."""


def _flatten(tree: Any, arrays: dict[str, np.ndarray], path: str) -> Any:
    if isinstance(tree, np.ndarray):
        if tree.dtype == object:
            raise CheckpointError(f"state entry '{path}' is an object array; not checkpointable")
        key = f"a{len(arrays)}"
        arrays[key] = tree
        return {"__array__": key}
    if isinstance(tree, np.generic):
        return tree.item()
    if isinstance(tree, dict):
        return {str(k): _flatten(v, arrays, f"{path}/{k}") for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_flatten(v, arrays, f"{path}/{i}") for i, v in enumerate(tree)]
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    raise CheckpointError(
        f"state entry '{path}' has type {type(tree).__name__}; only arrays, dicts, lists "
        "and JSON scalars can be checkpointed"
    )


def _unflatten(tree: Any, arrays: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {"__array__"}:
            return arrays[tree["__array__"]]
        return {k: _unflatten(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unflatten(v, arrays) for v in tree]
    return tree


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def save_checkpoint(path: str | os.PathLike, meta: dict[str, Any], state: Any) -> Path:
    """Write ``state`` (and JSON ``meta``: algorithm, config...) atomically to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    doc = {"format_version": FORMAT_VERSION, **meta, "state": _flatten(state, arrays, "")}
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        with open(tmp / ARRAYS_FILE, "wb") as f:
            np.savez(f, **arrays)
        (tmp / META_FILE).write_text(json.dumps(doc, allow_nan=True))
        for name in (ARRAYS_FILE, META_FILE):
            _fsync_file(tmp / name)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any], Any]:
    """Read a checkpoint; returns ``(meta, state)``.  Errors name the bad file."""
    path = Path(path)
    meta_path, arrays_path = path / META_FILE, path / ARRAYS_FILE
    if not path.is_dir():
        raise CheckpointError(f"checkpoint '{path}' does not exist or is not a directory")
    try:
        doc = json.loads(meta_path.read_text())
    except FileNotFoundError as e:
        raise CheckpointError(f"checkpoint file '{meta_path}' is missing") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint file '{meta_path}' is corrupt: {e}") from e
    if not isinstance(doc, dict) or "state" not in doc:
        raise CheckpointError(f"checkpoint file '{meta_path}' has no state")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{meta_path}' has format_version {version!r}; this hierl reads "
            f"version {FORMAT_VERSION}"
        )
    try:
        with np.load(arrays_path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except FileNotFoundError as e:
        raise CheckpointError(f"checkpoint file '{arrays_path}' is missing") from e
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint file '{arrays_path}' is corrupt: {e}") from e
    try:
        state = _unflatten(doc.pop("state"), arrays)
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint '{meta_path}' refers to a missing array: {e}") from e
    return doc, state


def latest_complete_checkpoint(
    root: str | os.PathLike,
) -> tuple[Path, dict[str, Any], list[tuple[Path, str]]]:
    """The newest checkpoint under ``root`` that loads completely.

    Checkpoints are the subdirectories of ``root`` named by their iteration (``000042``,
    as ``hierl train`` writes them), newest = highest number; temporary directories of an
    interrupted write are ignored.  Returns ``(path, meta, skipped)``, ``skipped`` being
    the newer checkpoints that failed to load, each with the reason.

    Raises:
        CheckpointError: ``root`` holds no checkpoint, or none that loads (the message
            names the newest and why it failed).
    """
    root = Path(root)
    found = (
        sorted(
            (p for p in root.iterdir() if p.is_dir() and p.name.isdigit()),
            key=lambda p: int(p.name),
            reverse=True,
        )
        if root.is_dir()
        else []
    )
    if not found:
        raise CheckpointError(f"no checkpoint in '{root}'")
    skipped: list[tuple[Path, str]] = []
    for path in found:
        try:
            meta, _ = load_checkpoint(path)
        except CheckpointError as e:
            skipped.append((path, str(e)))
            continue
        return path, meta, skipped
    newest, why = skipped[0]
    raise CheckpointError(
        f"no complete checkpoint in '{root}': all {len(skipped)} failed to load; the newest, "
        f"'{newest.name}': {why}"
    )
