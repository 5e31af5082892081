"""Atomic file writes (standard library only: the CLI imports it before any heavy module)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """``write(tmp)`` to a temporary sibling of ``path``, then rename it into place: a
    reader sees the old file or the new one, never half of one (the temporary file is
    removed if ``write`` fails).  Returns ``path``."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
