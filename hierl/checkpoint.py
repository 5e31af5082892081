"""Safe, versioned, atomically written checkpoints.

A checkpoint is a directory holding two files:

* ``checkpoint.json`` — format version, algorithm name, config and the state tree with
  every array replaced by a reference ``{"__array__": "<key>", "shape": [...], "dtype":
  "<f4"}`` (the manifest, the dtype as the ``.npy`` header describes it; references
  without shape and dtype, as older hierl wrote them, still load);
* ``arrays.npz`` — the arrays (``numpy.savez``, uncompressed; loaded with
  ``allow_pickle=False``).

Loading reads only the referenced arrays, each only after its ``.npy`` header matched
the manifest's shape and dtype and claimed no more bytes than its zip entry stores (hierl
never compresses them), and never past that size: a crafted file cannot make loading
use more memory than the file's own size (no compression bomb).  JSON nested deeper than
``MAX_DEPTH`` is refused.

Loading never unpickles and never imports or runs code named in the file.  (A trainer
rebuilt from a checkpoint's config imports a module that config names, such as
``callbacks: "module:Class"`` or ``model.custom_model: "module:function"``, only when
the user allows it: see ``hierl.algorithms.checkpoint_imports``.)

Writing goes to a temporary sibling directory, fsyncs both files, then renames it into
place, so a crash mid-write leaves any previous checkpoint at that path untouched.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1
META_FILE = "checkpoint.json"
ARRAYS_FILE = "arrays.npz"
MAX_DEPTH = 100
"""Deepest nesting of lists and dicts ``checkpoint.json`` may have (hierl writes < 20)."""


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, of an unknown version or incompatible."""


def _flatten(tree: Any, arrays: dict[str, np.ndarray], path: str) -> Any:
    if isinstance(tree, np.ndarray):
        if tree.dtype == object:
            raise CheckpointError(f"state entry '{path}' is an object array; not checkpointable")
        key = f"a{len(arrays)}"
        arrays[key] = tree
        descr = np.lib.format.dtype_to_descr(tree.dtype)  # as the .npy header has it
        return {"__array__": key, "shape": list(tree.shape), "dtype": descr}
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


def _is_ref(tree: Any) -> bool:
    return isinstance(tree, dict) and "__array__" in tree and set(tree) <= _REF_KEYS


_REF_KEYS = frozenset({"__array__", "shape", "dtype"})


def _unflatten(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, dict):
        if _is_ref(tree):
            return arrays[tree["__array__"]]
        return {k: _unflatten(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unflatten(v, arrays) for v in tree]
    return tree


def _depth(tree: Any) -> int:
    """How deeply lists and dicts nest in ``tree`` (iteratively: no recursion limit)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                break
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _manifest(tree: Any, meta_path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype] | None]:
    """Every array key the state refers to → its manifest ``(shape, dtype)`` (None: an
    older reference without them)."""
    refs: dict[str, tuple[tuple[int, ...], np.dtype] | None] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict) and not _is_ref(node):
            stack.extend(node.values())
        elif isinstance(node, dict):
            key, expected = node["__array__"], None
            if not isinstance(key, str):
                raise CheckpointError(f"checkpoint '{meta_path}' has an array key {key!r}")
            if "shape" in node or "dtype" in node:
                expected = _expected(node, meta_path)
            if key in refs and refs[key] != expected:
                raise CheckpointError(
                    f"checkpoint '{meta_path}' gives array '{key}' two shapes or dtypes"
                )
            refs[key] = expected
    return refs


def _expected(ref: dict[str, Any], meta_path: Path) -> tuple[tuple[int, ...], np.dtype]:
    shape, dtype = ref.get("shape"), ref.get("dtype")
    bad = f"checkpoint '{meta_path}' has a malformed reference to array {ref['__array__']!r}"
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise CheckpointError(f"{bad}: shape {shape!r} is not a list of sizes >= 0")
    if not isinstance(dtype, (str, list)):
        raise CheckpointError(f"{bad}: dtype {dtype!r} is not a .npy dtype description")
    try:
        parsed = np.lib.format.descr_to_dtype(dtype)
    except (TypeError, ValueError, KeyError, IndexError) as e:
        raise CheckpointError(f"{bad}: dtype {dtype!r} is not a dtype ({e})") from e
    if parsed.hasobject:
        raise CheckpointError(f"{bad}: dtype {dtype!r} holds Python objects")
    return tuple(shape), parsed


def _read_arrays(
    arrays_path: Path, refs: dict[str, tuple[tuple[int, ...], np.dtype] | None]
) -> dict[str, np.ndarray]:
    """The referenced arrays of ``arrays_path``, each read only after its ``.npy`` header
    matched the manifest and claimed no more bytes than its zip entry stores."""
    from numpy.lib import format as npy

    arrays: dict[str, np.ndarray] = {}
    left = arrays_path.stat().st_size  # what all arrays together may take
    with zipfile.ZipFile(arrays_path) as zf:
        for key, expected in refs.items():
            try:
                info = zf.getinfo(f"{key}.npy")
            except KeyError:
                raise CheckpointError(
                    f"checkpoint file '{arrays_path}' is corrupt: it has no array '{key}' (the "
                    "state refers to it)"
                ) from None
            where = f"checkpoint file '{arrays_path}': array '{key}'"
            if info.compress_type != zipfile.ZIP_STORED:
                raise CheckpointError(
                    f"{where} is compressed; refused (hierl stores arrays uncompressed: a "
                    "compressed entry could expand without bound)"
                )
            with zf.open(info) as f:
                version = npy.read_magic(f)
                if version not in ((1, 0), (2, 0)):
                    raise CheckpointError(f"{where} has .npy format {version}; it is corrupt")
                read_header = (
                    npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
                )
                shape, _, dtype = read_header(f)
                header_size = f.tell()
            if dtype.hasobject:
                raise CheckpointError(f"{where} holds Python objects; it is corrupt")
            if expected is not None and (shape, dtype) != expected:
                raise CheckpointError(
                    f"{where} has shape {shape} and dtype {dtype}, but the manifest says "
                    f"{expected[0]} and {expected[1]}; it is corrupt"
                )
            size = math.prod(shape) * dtype.itemsize
            if size + header_size > min(info.compress_size, left):
                raise CheckpointError(
                    f"{where} claims {size} bytes, more than the file stores for it; it is corrupt"
                )
            left -= size
            with zf.open(info) as f:  # reads exactly ``size`` bytes after the header
                arrays[key] = npy.read_array(f, allow_pickle=False)
    return arrays


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


def load_checkpoint(
    path: str | os.PathLike, keys: Collection[str] | None = None
) -> tuple[dict[str, Any], Any]:
    """Read a checkpoint; returns ``(meta, state)``.  Errors name the bad file.

    ``keys``: read only these top-level entries of a dict state (the arrays of the others
    stay on disk; ``()`` reads the metadata alone); None reads everything.
    """
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
    except RecursionError:
        doc = None  # deeper than the interpreter's limit: refused below
    if doc is None or _depth(doc) > MAX_DEPTH:
        raise CheckpointError(
            f"checkpoint file '{meta_path}' is corrupt: its JSON nests deeper than "
            f"{MAX_DEPTH} levels"
        )
    if not isinstance(doc, dict) or "state" not in doc:
        raise CheckpointError(f"checkpoint file '{meta_path}' has no state")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{meta_path}' has format_version {version!r}; this hierl reads "
            f"version {FORMAT_VERSION}"
        )
    if keys is not None and isinstance(doc["state"], dict):
        doc["state"] = {k: v for k, v in doc["state"].items() if k in keys}
    refs = _manifest(doc["state"], meta_path)
    try:
        arrays = _read_arrays(arrays_path, refs)
    except CheckpointError:
        raise
    except FileNotFoundError as e:
        raise CheckpointError(f"checkpoint file '{arrays_path}' is missing") from e
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint file '{arrays_path}' is corrupt: {e}") from e
    return doc, _unflatten(doc.pop("state"), arrays)


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
