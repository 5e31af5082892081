"""Benchmark records: which commit, machine and config produced a set of figures.

``write_record(directory, name, config, figures)`` writes ``<directory>/<name>.json``
holding the git commit (and whether the working tree was dirty), the date, the machine
(CPU count, platform, library versions), the config and the figures; ``bar_png`` draws
a bar chart with matplotlib's Agg backend.  Used by ``hierl bench`` and ``benchmarks/``.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info() -> dict[str, Any]:
    """The HEAD commit, whether tracked files differ from it, and the untracked paths."""
    tracked = _git("status", "--porcelain", "--untracked-files=no")
    untracked = _git("ls-files", "--others", "--exclude-standard", "--directory")
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": None if tracked is None else bool(tracked),
        "untracked": None if untracked is None else untracked.split(),
    }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """CPU count, platform and the versions of the libraries the benchmarks depend on."""
    return {
        "nproc": os.cpu_count(),
        "sched_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "versions": {
            d: _version(d) for d in ("hierl", "torch", "ray", "gymnasium", "numpy", "psutil")
        },
    }


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and unknown objects as their repr."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return repr(value)


def write_record(
    directory: str | os.PathLike,
    name: str,
    config: Mapping[str, Any],
    figures: Mapping[str, Any],
) -> Path:
    """Write ``<directory>/<name>.json`` (git, date, machine, config, figures) atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": name,
        "git": git_info(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": jsonable(config),
        "figures": jsonable(figures),
    }
    path = directory / f"{name}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def bar_png(
    path: str | os.PathLike,
    labels: Sequence[str],
    values: Sequence[float],
    title: str,
    ylabel: str,
) -> Path:
    """Save a bar chart of ``values`` (one bar per label, value printed above) as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.3 * len(labels)), 4.5), dpi=100)
    ax = fig.add_subplot()
    bars = ax.bar(range(len(values)), values, color="tab:blue")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    for bar, v in zip(bars, values, strict=True):
        ax.annotate(
            f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
