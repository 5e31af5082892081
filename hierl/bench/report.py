"""Benchmark records: which commit, machine and config produced a set of figures.

``write_record(directory, name, config, figures)`` writes ``<directory>/<name>.json``
holding the command line, the git commit (and whether the working tree was dirty), the
date, the machine (CPU model and count, platform, library versions), the load averages
before and after the run, the config and the figures; it is the one place that decides a
record's fields.  ``bar_png`` draws a bar chart with matplotlib's Agg backend.  Used by
``hierl bench`` and ``benchmarks/``.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_averages() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


LOAD_AT_START = load_averages()
"""The load averages when this module was first imported, i.e. as a benchmark started:
``write_record``'s default for the load before the run."""


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


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info() -> dict[str, Any]:
    """CPU model and count, platform and the versions of the libraries the benchmarks
    depend on."""
    return {
        "cpu_model": cpu_model(),
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


def command_line(argv: Sequence[str] | None = None) -> str:
    """``argv`` (default ``sys.argv``) as a shell command run from the repository root:
    a script path relative to it, prefixed with ``python``."""
    args = list(sys.argv if argv is None else argv)
    if not args:
        return ""
    program = Path(args[0])
    if program.is_absolute() and program.is_relative_to(REPO_ROOT):
        program = program.relative_to(REPO_ROOT)
    head = ["python", program.as_posix()] if program.suffix == ".py" else [program.name]
    return shlex.join([*head, *args[1:]])


def write_record(
    directory: str | os.PathLike,
    name: str,
    config: Mapping[str, Any],
    figures: Mapping[str, Any],
    *,
    argv: Sequence[str] | None = None,
    load_before: Sequence[float] | None = None,
) -> Path:
    """Write ``<directory>/<name>.json`` atomically: the command line (``argv``, default
    ``sys.argv``), git commit and dirty flag, date, machine, load averages ``before``
    (default: ``LOAD_AT_START``) and ``after`` the run (now), config and figures."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    before = LOAD_AT_START if load_before is None else [float(x) for x in load_before]
    data = {
        "benchmark": name,
        "command": command_line(argv),
        "git": git_info(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "load_averages": {"before": before, "after": load_averages()},
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
