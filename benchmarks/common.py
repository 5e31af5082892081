"""Shared helpers for the benchmark scripts: result records and bar charts.

``record(name, config, figures)`` writes ``benchmarks/results/<name>.json`` holding the git
commit (and whether the working tree was dirty), the date, a description of the machine
(CPU count, platform, library versions) and the benchmark's config and measured figures.
``bar_png(...)`` draws a simple bar chart with matplotlib's Agg backend (no display needed).
``CpuMeter`` tells how many CPU cores given processes, and the rest of the machine, used
during a span: on a small shared machine the background load explains noisy figures.
``benchmarks/results/`` is gitignored.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
REPO_ROOT = BENCH_DIR.parent


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


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return repr(value)


def record(name: str, config: Mapping[str, Any], figures: Mapping[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json`` (git, date, machine, config, figures)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": name,
        "git": git_info(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": _jsonable(config),
        "figures": _jsonable(figures),
    }
    path = RESULTS_DIR / f"{name}.json"
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


# -- CPU accounting ----------------------------------------------------------------------
def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent running code (all cores, since boot)."""
    t = psutil.cpu_times()
    fields = ("user", "nice", "system", "irq", "softirq")  # guest time is inside user
    return sum(getattr(t, f, 0.0) for f in fields)


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave to other guests while this VM wanted to run."""
    return getattr(psutil.cpu_times(), "steal", 0.0)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process (children excluded); None if it is gone."""
    try:
        c = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return c.user + c.system


def process_tree(pid: int | None = None) -> list[int]:
    """``pid`` (default: this process) and all its descendants."""
    root = psutil.Process(pid or os.getpid())
    return [root.pid, *(c.pid for c in root.children(recursive=True))]


class CpuMeter:
    """Cores used during a ``with`` block by named process groups and by everything else.

    ``groups`` maps a name to pids (fixed for the span).  ``cores`` then holds, per group,
    CPU seconds / wall seconds, plus ``machine`` (all busy cores), ``outside`` (machine
    minus the groups: other users' processes, i.e. background load) and ``steal`` (cores
    the hypervisor withheld).
    """

    def __init__(self, groups: Mapping[str, Iterable[int]] | None = None):
        self.groups = {k: list(v) for k, v in (groups or {"ours": process_tree()}).items()}
        self.cores: dict[str, float] = {}

    def _snapshot(self) -> tuple[dict[int, float | None], float, float]:
        pids = {p: process_cpu_seconds(p) for g in self.groups.values() for p in g}
        return pids, machine_busy_seconds(), steal_seconds()

    def __enter__(self) -> CpuMeter:
        self._t0 = time.perf_counter()
        self._start = self._snapshot()
        return self

    def __exit__(self, *exc: Any) -> None:
        (pids1, busy1, steal1), wall = self._snapshot(), time.perf_counter() - self._t0
        pids0, busy0, steal0 = self._start

        def delta(pid: int) -> float:  # a process gone by the end counts 0 (unknown)
            a, b = pids0.get(pid), pids1.get(pid)
            return b - a if a is not None and b is not None else 0.0

        self.cores = {k: sum(delta(p) for p in g) / wall for k, g in self.groups.items()}
        self.cores["machine"] = (busy1 - busy0) / wall
        self.cores["steal"] = (steal1 - steal0) / wall
        ours = sum(v for k, v in self.cores.items() if k not in ("machine", "steal"))
        self.cores["outside"] = max(0.0, self.cores["machine"] - ours)
        self.cores["wall_s"] = wall

    def describe(self) -> str:
        """One line: cores per group, and the background load."""
        parts = [f"{k} {v:.2f}" for k, v in self.cores.items() if k not in ("wall_s",)]
        return "CPU cores used: " + ", ".join(parts)


def wait_for_quiet(max_wait_s: float, threshold: float = 0.25, window_s: float = 2.0) -> float:
    """Wait (up to ``max_wait_s``) until other processes use <= ``threshold`` cores.

    Returns the background load of the last ``window_s`` window.  A shared machine gives
    meaningless multi-process figures while someone else keeps its cores busy.
    """
    deadline = time.monotonic() + max_wait_s
    announced = False
    while True:
        with CpuMeter({"ours": process_tree()}) as meter:
            time.sleep(window_s)
        outside = meter.cores["outside"]
        if outside <= threshold or time.monotonic() >= deadline:
            if announced:
                print(f"  background load now {outside:.2f} cores", flush=True)
            return outside
        if not announced:
            print(
                f"  waiting up to {max_wait_s:.0f} s for background load ({outside:.2f} cores) "
                f"to drop below {threshold} cores...",
                flush=True,
            )
            announced = True
