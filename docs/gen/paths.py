"""Where the pages' sources are in the repository."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``docs/gen/`` is two levels below it)."""


CURVES = ROOT / "benchmarks" / "curves"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
RECORDS = ROOT / "benchmarks" / "records"
TUNED = ROOT / "examples" / "tuned"
