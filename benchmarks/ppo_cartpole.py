"""Time-to-solve: PPO with its default config on CartPole-v1, as a user runs it.

For each seed this runs, as a subprocess,

    .venv/bin/hierl train --algo PPO --env CartPole-v1 --stop episode_reward_mean=450 \\
        --seed S --quiet --output-dir <tmp>

and measures

* wall-clock time of the whole subprocess, from spawn to exit (interpreter start, imports,
  env and model construction, training, the final checkpoint and learning curve);
* the final timesteps_total, episode_reward_mean and iterations (last line of
  ``result.jsonl``), and env steps/s over the whole run and over training alone
  (``time_total_s`` as reported by the trainer);
* peak memory of the whole process tree: RSS of the process and all its descendants,
  summed, polled every ~50 ms (``--poll``), the maximum over the run;
* CPU cores used by the tree and by the rest of the machine meanwhile (background load
  from other users of this shared machine makes wall times noisy; it is reported so that a
  slow run can be told from a loaded machine).

If the ``hierl`` CLI does not exist or fails, the fallback is a ``python -c`` subprocess
that builds ``PPOTrainer({"env": "CartPole-v1", "seed": S})`` and calls ``train()`` until
episode_reward_mean >= 450, printing the last result as JSON.  Which mode ran is printed.

Targets (median over seeds): wall time < 20 s, peak memory < 1 GB.

Usage::

    .venv/bin/python benchmarks/ppo_cartpole.py                 # seeds 0 1 2
    .venv/bin/python benchmarks/ppo_cartpole.py --seeds 0 --mode python
    .venv/bin/python benchmarks/ppo_cartpole.py --set-env OMP_NUM_THREADS=1
    .venv/bin/python benchmarks/ppo_cartpole.py --ab-env OMP_NUM_THREADS=1 --name ppo_ab

``--ab-env`` runs every seed twice, with and without the given variables, interleaved,
and prints same-run ratios (e.g. the effect of torch's intra-op threads on a 2-core box).

Results: ``benchmarks/results/ppo_cartpole.json`` and ``ppo_cartpole_{wall,memory}.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

# benchmarks/ is sys.path[0] when run as a script; make `common` importable either way.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO_ROOT,
    RESULTS_DIR,
    bar_png,
    machine_busy_seconds,
    record,
    steal_seconds,
    wait_for_quiet,
)

TARGET_WALL_S = 20.0
TARGET_PEAK_BYTES = 1e9
LOADED_CORES = 0.25
"""Background load (cores used by other processes) above which a run is flagged."""
RESULT_KEYS = (
    "episode_reward_mean",
    "timesteps_total",
    "training_iteration",
    "time_total_s",
    "episodes_total",
)

FALLBACK_CODE = """
import json, math, sys
from hierl import PPOTrainer
seed, target, keys = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(",")
trainer = PPOTrainer({"env": "CartPole-v1", "seed": seed})
while True:
    result = trainer.train()
    reward = result["episode_reward_mean"]
    if not math.isnan(reward) and reward >= target:
        break
trainer.stop()
print(json.dumps({k: result.get(k) for k in keys}))
"""


def hierl_executable() -> Path:
    """The ``hierl`` console script next to this interpreter (the project's venv)."""
    return Path(sys.executable).parent / "hierl"


def command(mode: str, seed: int | str, target: float, out_dir: Path) -> list[str]:
    """The subprocess command line for one seed."""
    if mode == "cli":
        return [
            str(hierl_executable()),
            "train",
            "--algo",
            "PPO",
            "--env",
            "CartPole-v1",
            "--stop",
            f"episode_reward_mean={target:g}",
            "--seed",
            str(seed),
            "--quiet",
            "--output-dir",
            str(out_dir),
        ]
    return [sys.executable, "-c", FALLBACK_CODE, str(seed), str(target), ",".join(RESULT_KEYS)]


class TreeMonitor:
    """Polls a process tree: peak summed RSS, CPU seconds per pid (last seen)."""

    def __init__(self, root: psutil.Process, interval: float):
        self.root = root
        self.interval = interval
        self.peak_rss = 0
        self.peak_procs = 0
        self.samples = 0
        self.cpu_by_pid: dict[int, float] = {}
        self._procs: dict[int, psutil.Process] = {}

    def poll(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss = 0
        for p in procs:
            proc = self._procs.setdefault(p.pid, p)  # reuse: cpu_times needs the same object
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    c = proc.cpu_times()
                    self.cpu_by_pid[proc.pid] = c.user + c.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self.samples += 1
        if rss > self.peak_rss:
            self.peak_rss, self.peak_procs = rss, len(procs)

    def kill_tree(self) -> None:
        """Kill the root and its descendants (only processes this benchmark started)."""
        try:
            procs = [*self.root.children(recursive=True), self.root]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def run_one(
    mode: str, seed: int, target: float, timeout: float, poll: float, env: dict[str, str]
) -> dict[str, Any]:
    """Run one seed; wall time, peak tree RSS, CPU use, and the final training result."""
    with tempfile.TemporaryDirectory(prefix="hierl_bench_") as tmp:
        out_dir = Path(tmp) / "run"
        cmd = command(mode, seed, target, out_dir)
        busy0, steal0 = machine_busy_seconds(), steal_seconds()
        usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with (
            open(Path(tmp) / "stdout", "wb") as out_f,
            open(Path(tmp) / "stderr", "wb") as err_f,
        ):
            t0 = time.perf_counter()
            proc = psutil.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=out_f, stderr=err_f)
            ended: dict[str, float] = {}

            def wait() -> None:
                proc.wait()
                ended["t"] = time.perf_counter()

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            monitor = TreeMonitor(proc, poll)
            timed_out = False
            while waiter.is_alive():
                monitor.poll()
                if time.perf_counter() - t0 > timeout:
                    timed_out = True
                    monitor.kill_tree()
                    break
                waiter.join(poll)
            waiter.join()
        wall = ended.get("t", time.perf_counter()) - t0
        busy, steal = machine_busy_seconds() - busy0, steal_seconds() - steal0
        usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Exact CPU of the reaped subprocess (and the descendants it reaped), which the
        # 50 ms polling can only approach; take the larger of the two.
        reaped_cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
        stdout = (Path(tmp) / "stdout").read_text(errors="replace")
        stderr = (Path(tmp) / "stderr").read_text(errors="replace")
        result = _final_result(mode, out_dir, stdout)
    tree_cpu = max(reaped_cpu, sum(monitor.cpu_by_pid.values()))
    out: dict[str, Any] = {
        "seed": seed,
        "mode": mode,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "wall_s": wall,
        "peak_rss_bytes": monitor.peak_rss,
        "peak_rss_processes": monitor.peak_procs,
        "memory_samples": monitor.samples,
        "tree_cpu_cores": tree_cpu / wall,
        "background_cpu_cores": max(0.0, (busy - tree_cpu) / wall),
        "steal_cpu_cores": steal / wall,
        "result": result,
        "stdout_tail": stdout[-600:],
        "stderr_tail": stderr[-1500:],
    }
    reward = (result or {}).get("episode_reward_mean")
    out["solved"] = (
        proc.returncode == 0
        and not timed_out
        and reward is not None
        and not math.isnan(float(reward))
        and float(reward) >= target
    )
    steps = (result or {}).get("timesteps_total")
    train_s = (result or {}).get("time_total_s")
    out["env_steps_per_s_wall"] = steps / wall if steps else None
    out["env_steps_per_s_training"] = steps / train_s if steps and train_s else None
    return out


def _final_result(mode: str, out_dir: Path, stdout: str) -> dict[str, Any] | None:
    if mode == "cli":
        path = out_dir / "result.jsonl"
        if not path.exists():
            return None
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        if not lines:
            return None
        last = json.loads(lines[-1])
        return {k: last.get(k) for k in RESULT_KEYS}
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=450.0, help="episode_reward_mean")
    parser.add_argument(
        "--mode",
        choices=("auto", "cli", "python"),
        default="auto",
        help="auto: the hierl CLI, falling back to python -c if it is missing or fails",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per seed")
    parser.add_argument("--poll", type=float, default=0.05, help="memory poll interval (s)")
    parser.add_argument(
        "--set-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment variable for the subprocess (repeatable)",
    )
    parser.add_argument(
        "--ab-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A/B: also run every seed with these variables set (runs interleaved), and "
        "report the same-run ratios, e.g. --ab-env OMP_NUM_THREADS=1",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each run, wait up to this long for other processes to go quiet",
    )
    parser.add_argument("--name", default="ppo_cartpole", help="results file name")
    args = parser.parse_args(argv)

    def parse_env(items: list[str], flag: str) -> dict[str, str]:
        out = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key:
                parser.error(f"{flag} {item!r}: expected KEY=VALUE")
            out[key] = value
        return out

    env = dict(os.environ)
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    extra_env = parse_env(args.set_env, "--set-env")
    env.update(extra_env)
    ab_env = parse_env(args.ab_env, "--ab-env")
    ab_label = " ".join(f"{k}={v}" for k, v in ab_env.items())

    mode = args.mode
    if mode == "auto":
        mode = "cli" if hierl_executable().exists() else "python"
        if mode == "python":
            print(f"{hierl_executable()} not found: using the python -c fallback")
    print(
        f"PPO CartPole-v1 to episode_reward_mean >= {args.target:g}, seeds {args.seeds}, "
        f"mode: {'hierl CLI' if mode == 'cli' else 'python -c PPOTrainer fallback'}"
        + (f", env {extra_env}" if extra_env else ""),
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    ab_runs: list[dict[str, Any]] = []
    for i, seed in enumerate(args.seeds):
        order = ["base", "ab"] if i % 2 == 0 else ["ab", "base"]
        for variant in order if ab_env else ["base"]:
            run_env = env if variant == "base" else {**env, **ab_env}
            if args.wait_quiet:
                wait_for_quiet(args.wait_quiet)
            run = run_one(mode, seed, args.target, args.timeout, args.poll, run_env)
            if args.mode == "auto" and mode == "cli" and run["returncode"] != 0 and not runs:
                print(
                    f"  hierl CLI failed (rc {run['returncode']}): "
                    f"{run['stderr_tail'][-300:]!r}\n  switching to the python -c fallback",
                    flush=True,
                )
                mode = "python"
                run = run_one(mode, seed, args.target, args.timeout, args.poll, run_env)
            run["variant"] = "default" if variant == "base" else ab_label
            (runs if variant == "base" else ab_runs).append(run)
            _print_run(run)

    figures = summarize(runs, mode)
    report(runs, figures)
    if ab_env:
        figures["ab"] = ab_compare(runs, ab_runs, ab_label)
    config = {
        "mode": mode,
        "command": command(mode, "S", args.target, Path("<tmp>")),
        "seeds": args.seeds,
        "target_episode_reward_mean": args.target,
        "timeout_s": args.timeout,
        "poll_interval_s": args.poll,
        "extra_env": extra_env,
        "ab_env": ab_env,
        "targets": {"median_wall_s": TARGET_WALL_S, "median_peak_rss_bytes": TARGET_PEAK_BYTES},
    }
    path = record(args.name, config, {**figures, "runs": runs, "ab_runs": ab_runs})
    labels = [f"seed {r['seed']}" for r in runs] + ["median"]
    pngs = [
        bar_png(
            RESULTS_DIR / f"{args.name}_wall.png",
            labels,
            [r["wall_s"] for r in runs] + [figures["median_wall_s"]],
            f"PPO CartPole-v1 to reward {args.target:g}: wall time (target < {TARGET_WALL_S:g} s)",
            "seconds (whole process)",
        ),
        bar_png(
            RESULTS_DIR / f"{args.name}_memory.png",
            labels,
            [r["peak_rss_bytes"] / 1e6 for r in runs] + [figures["median_peak_rss_bytes"] / 1e6],
            "PPO CartPole-v1: peak RSS of the process tree (target < 1000 MB)",
            "MB",
        ),
    ]
    print(f"\nwrote {path}" + "".join(f"\nwrote {p}" for p in pngs))


def _print_run(run: dict[str, Any]) -> None:
    res = run["result"] or {}
    status = "solved" if run["solved"] else ("TIMEOUT" if run["timed_out"] else "NOT SOLVED")
    variant = "" if run["variant"] == "default" else f" [{run['variant']}]"
    print(
        f"  seed {run['seed']}{variant}: {status}, wall {run['wall_s']:.1f} s "
        f"(training {_fmt(res.get('time_total_s'), '.1f')} s), "
        f"{_fmt(res.get('timesteps_total'), ',')} timesteps, "
        f"{_fmt(res.get('training_iteration'), 'd')} iterations, "
        f"reward {_fmt(res.get('episode_reward_mean'), '.1f')}, "
        f"peak RSS {run['peak_rss_bytes'] / 1e6:,.0f} MB ({run['peak_rss_processes']} proc), "
        f"CPU cores: tree {run['tree_cpu_cores']:.2f}, "
        f"background {run['background_cpu_cores']:.2f}",
        flush=True,
    )
    if not run["solved"] and run["stderr_tail"]:
        print("    stderr: " + run["stderr_tail"][-500:].replace("\n", "\n    "))


def ab_compare(
    base: list[dict[str, Any]], variant: list[dict[str, Any]], label: str
) -> dict[str, Any]:
    """Per-seed ratios variant / default of wall and training time (runs interleaved)."""
    out: dict[str, Any] = {"variant": label, "per_seed": []}
    for b, v in zip(base, variant, strict=True):
        bt, vt = (b["result"] or {}).get("time_total_s"), (v["result"] or {}).get("time_total_s")
        out["per_seed"].append(
            {
                "seed": b["seed"],
                "wall_ratio": v["wall_s"] / b["wall_s"],
                "training_ratio": vt / bt if bt and vt else None,
                "training_steps_per_s_ratio": (
                    v["env_steps_per_s_training"] / b["env_steps_per_s_training"]
                    if v["env_steps_per_s_training"] and b["env_steps_per_s_training"]
                    else None
                ),
                "timesteps": [
                    (b["result"] or {}).get("timesteps_total"),
                    (v["result"] or {}).get("timesteps_total"),
                ],
                "cpu_cores": [b["tree_cpu_cores"], v["tree_cpu_cores"]],
            }
        )
    walls = [p["wall_ratio"] for p in out["per_seed"]]
    trains = [p["training_ratio"] for p in out["per_seed"] if p["training_ratio"] is not None]
    out["median_wall_ratio"] = _median(walls)
    out["median_training_ratio"] = _median(trains)
    out["median_training_steps_per_s_ratio"] = _median(
        [
            p["training_steps_per_s_ratio"]
            for p in out["per_seed"]
            if p["training_steps_per_s_ratio"]
        ]
    )
    out["median_wall_s"] = {
        "default": _median([r["wall_s"] for r in base]),
        label: _median([r["wall_s"] for r in variant]),
    }
    print(f"\nA/B, runs interleaved per seed: [{label}] / default")
    for p in out["per_seed"]:
        print(
            f"  seed {p['seed']}: wall x{p['wall_ratio']:.3f}, training time "
            f"x{_fmt(p['training_ratio'], '.3f')}, training steps/s "
            f"x{_fmt(p['training_steps_per_s_ratio'], '.3f')}, timesteps {p['timesteps'][0]} vs "
            f"{p['timesteps'][1]}, CPU cores {p['cpu_cores'][0]:.2f} vs {p['cpu_cores'][1]:.2f}"
        )
    print(
        f"  median: wall x{out['median_wall_ratio']:.3f}, training time "
        f"x{out['median_training_ratio']:.3f}, training steps/s "
        f"x{out['median_training_steps_per_s_ratio']:.3f}; "
        f"median wall {out['median_wall_s']['default']:.1f} s"
        f" vs {out['median_wall_s'][label]:.1f} s"
    )
    return out


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "?"
    try:
        return format(int(value) if spec in (",", "d") else float(value), spec)
    except (TypeError, ValueError):
        return str(value)


def summarize(runs: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Medians over seeds and the verdicts against the targets."""

    def col(key: str) -> list[float]:
        return [float(r[key]) for r in runs if r.get(key) is not None]

    def res_col(key: str) -> list[float]:
        return [float(r["result"][key]) for r in runs if (r["result"] or {}).get(key) is not None]

    median_wall = _median(col("wall_s"))
    median_peak = _median(col("peak_rss_bytes"))
    return {
        "mode": mode,
        "all_solved": all(r["solved"] for r in runs),
        "median_wall_s": median_wall,
        "median_peak_rss_bytes": median_peak,
        "median_timesteps_total": _median(res_col("timesteps_total")),
        "median_training_s": _median(res_col("time_total_s")),
        "median_env_steps_per_s_wall": _median(col("env_steps_per_s_wall")),
        "median_env_steps_per_s_training": _median(col("env_steps_per_s_training")),
        "median_background_cpu_cores": _median(col("background_cpu_cores")),
        "wall_target_met": median_wall < TARGET_WALL_S,
        "memory_target_met": median_peak < TARGET_PEAK_BYTES,
    }


def report(runs: list[dict[str, Any]], f: dict[str, Any]) -> None:
    """Print the per-seed table and the medians against the targets."""
    header = (
        "seed",
        "solved",
        "wall s",
        "train s",
        "timesteps",
        "steps/s wall",
        "steps/s train",
        "peak MB",
        "bg cores",
    )
    rows = []
    for r in runs:
        res = r["result"] or {}
        rows.append(
            (
                str(r["seed"]),
                "yes" if r["solved"] else "NO",
                f"{r['wall_s']:.1f}",
                _fmt(res.get("time_total_s"), ".1f"),
                _fmt(res.get("timesteps_total"), ","),
                _fmt(r["env_steps_per_s_wall"], ",.0f"),
                _fmt(r["env_steps_per_s_training"], ",.0f"),
                f"{r['peak_rss_bytes'] / 1e6:,.0f}",
                f"{r['background_cpu_cores']:.2f}",
            )
        )
    rows.append(
        (
            "median",
            "all" if f["all_solved"] else "NOT ALL",
            f"{f['median_wall_s']:.1f}",
            _fmt(f["median_training_s"], ".1f"),
            _fmt(f["median_timesteps_total"], ","),
            _fmt(f["median_env_steps_per_s_wall"], ",.0f"),
            _fmt(f["median_env_steps_per_s_training"], ",.0f"),
            f"{f['median_peak_rss_bytes'] / 1e6:,.0f}",
            f"{f['median_background_cpu_cores']:.2f}",
        )
    )
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    print()
    for row in (header, *rows):
        print("  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True)))
    ok = {True: "ok", False: "MISSED"}
    print(
        f"\nmedian wall time {f['median_wall_s']:.1f} s (target < {TARGET_WALL_S:g} s: "
        f"{ok[f['wall_target_met']]}); median peak memory "
        f"{f['median_peak_rss_bytes'] / 1e6:,.0f} MB (target < {TARGET_PEAK_BYTES / 1e6:,.0f} "
        f"MB: {ok[f['memory_target_met']]})"
    )
    print(
        "bg cores: CPU cores used by other processes on the machine during the run "
        f"(of {os.cpu_count()}); wall times with bg cores > {LOADED_CORES} are inflated by load."
    )
    loaded = [r["seed"] for r in runs if r["background_cpu_cores"] > LOADED_CORES]
    if loaded:
        print(f"WARNING: runs of seeds {loaded} were LOADED by other processes; rerun them.")


if __name__ == "__main__":
    main()
