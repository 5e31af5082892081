"""Shared helpers for the benchmark scripts: result records, bar charts, CPU accounting.

``record(name, config, figures)`` writes ``benchmarks/results/<name>.json`` with
``hierl.bench.report.write_record`` (command, git commit, date, machine, load averages,
config, figures); ``publish`` (a script's ``--record``) copies such a record into
``benchmarks/records/``, which is committed and which the docs' benchmark page renders.
``bar_png`` is re-exported from there.
``CpuMeter`` tells how many CPU cores given processes, and the rest of the machine, used
during a span: on a small shared machine the background load explains noisy figures.
``ImageEnv`` is an Atari-shaped env (pickled by value, so Ray actors can build it).
``benchmarks/results/`` is gitignored.
"""

from __future__ import annotations

import csv
import os
import shutil
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import psutil

from hierl.bench.report import bar_png, write_record
from hierl.sample_batch import SampleBatch

__all__ = [
    "BENCH_DIR",
    "RECORDS_DIR",
    "RECORD_HELP",
    "REPO_ROOT",
    "RESULTS_DIR",
    "RESULTS_MD",
    "CpuMeter",
    "ImageEnv",
    "bar_png",
    "machine_busy_seconds",
    "process_tree",
    "publish",
    "read_curve",
    "record",
    "replace_results_block",
    "steal_seconds",
    "wait_for_quiet",
]

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
RECORDS_DIR = BENCH_DIR / "records"
"""The committed benchmark records (``--record``), rendered by ``docs/gen_pages.py``."""
REPO_ROOT = BENCH_DIR.parent

RECORD_HELP = f"also copy the JSON record to {RECORDS_DIR.relative_to(REPO_ROOT)}/ (committed)"
"""The help of the scripts' ``--record`` flag."""


def record(
    name: str, config: Mapping[str, Any], figures: Mapping[str, Any], *, commit: bool = False
) -> Path:
    """Write ``benchmarks/results/<name>.json`` (command, git, date, machine, load
    averages, config, figures); with ``commit``, copy it into ``benchmarks/records/``."""
    path = write_record(RESULTS_DIR, name, config, figures)
    if commit:
        publish(path)
    return path


def publish(path: Path, records_dir: Path | None = None) -> Path:
    """Copy the record at ``path`` into ``records_dir`` (default ``RECORDS_DIR``, the
    committed ``benchmarks/records/``) under the same name, atomically."""
    records_dir = RECORDS_DIR if records_dir is None else records_dir
    records_dir.mkdir(parents=True, exist_ok=True)
    target = records_dir / path.name
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(path, tmp)
    os.replace(tmp, target)
    print(f"recorded {target}", flush=True)
    return target


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


class ImageEnv(gym.Env):
    """Atari-shaped: random ``(84, 84, 4)`` uint8 frames, 6 actions, 400-step episodes."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def __init__(self, config: Any = None):
        self.rng = np.random.default_rng(0)
        self.frames = self.rng.integers(0, 256, (16, 84, 84, 4), dtype=np.uint8)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0], {}

    def step(self, action: int):
        self.t += 1
        reward = float(action == self.t % 6)
        return self.frames[self.t % 16], reward, False, self.t >= 400, {}


# Ray's actors lack this path, so the module travels to them by value.  A GPU machine
# without Ray runs only the learner figures (``--num-gpus``) and skips this.
try:
    import ray.cloudpickle
except ImportError:
    pass
else:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def cartpole_batch(rows: int, seed: int = 0) -> SampleBatch:
    """A CartPole-shaped sample batch of ``rows`` transitions."""
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.standard_normal((rows, 4)).astype(np.float32),
            SampleBatch.NEW_OBS: rng.standard_normal((rows, 4)).astype(np.float32),
            SampleBatch.ACTIONS: rng.integers(0, 2, rows),
            SampleBatch.REWARDS: np.ones(rows, np.float32),
            SampleBatch.TERMINATEDS: np.zeros(rows, bool),
            SampleBatch.TRUNCATEDS: np.zeros(rows, bool),
            SampleBatch.EPS_ID: np.zeros(rows, np.int64),
        }
    )


def measure_routing(optimizer: Any, seconds: float, rows: int) -> dict[str, float]:
    """One warm-up ``step()`` (actors started, pipelines full), then one of ``seconds``
    under a :class:`CpuMeter`: batches of ``rows`` env steps routed per second by the
    driver (``batches_per_s``, ``frames_per_s``) and the cores the driver and the
    machine used.  ``optimizer`` runs its event loop for ``config.min_step_time_s``."""
    optimizer.config.min_step_time_s = 1.0
    optimizer.step()
    optimizer.config.min_step_time_s = seconds
    steps0 = optimizer.num_steps_sampled
    with CpuMeter({"driver": [os.getpid()]}) as meter:
        optimizer.step()
    wall = meter.cores["wall_s"]
    batches = (optimizer.num_steps_sampled - steps0) / rows
    return {
        "batches_per_s": batches / wall,
        "frames_per_s": batches * rows / wall,
        "driver_cores": meter.cores["driver"],
        "machine_cores": meter.cores["machine"],
    }


def read_curve(path: Path) -> list[dict[str, float]]:
    """The rows of a learning.py curve CSV (none if it does not exist); blanks are NaN."""
    if not path.exists():
        return []
    with path.open() as f:
        return [
            {k: float(v) if v else float("nan") for k, v in r.items()} for r in csv.DictReader(f)
        ]


RESULTS_MD = BENCH_DIR / "RESULTS.md"
"""The published learning results: one ``<!-- begin NAME -->`` ... ``<!-- end NAME -->``
block per experiment."""


def replace_results_block(name: str, block: str, results_md: Path = RESULTS_MD) -> None:
    """Put ``block`` (which starts and ends with experiment ``name``'s markers) in place
    of that experiment's block in ``results_md``, or at its end if it has none;
    written atomically."""
    text = results_md.read_text() if results_md.exists() else "# Learning results\n"
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    if begin in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = results_md.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(results_md)
