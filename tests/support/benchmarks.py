"""``benchmarks/`` scripts as modules, for the tests of the benchmarks."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
"""The repository's ``benchmarks/`` directory."""


def import_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name``; ``benchmarks/`` is on
    ``sys.path`` only while it imports (the scripts import their siblings, ``common``
    and ``update_timing``, by that path)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
