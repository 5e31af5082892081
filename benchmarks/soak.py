"""Soak: does a long ``apex`` / ``async`` run keep the driver's memory flat?

RLlib (ICML 2018) §3.3 keeps control logically centralized in one driver, so everything
the optimizers keep in flight (sample and gradient tasks, replay requests, learner
queues, weight refs) lives there or in the object store it owns.  Each stage is bounded
by a config value; this script checks the sum empirically.  It trains Ape-X DQN
(``APEX``, the ``apex`` optimizer) and A3C (``async``) on CartPole-v1 with 2 remote
evaluators for ``--steps`` env steps each and samples, after every ``train()``:

* the driver's resident memory (``rss_mib``) and its private part (``private_mib`` =
  RSS minus shared pages; shared pages are object-store memory the driver mapped);
* the object store's usage (``store_mib``: ``object_store_memory`` total minus available,
  which the raylet reports from the plasma store's actual allocation, ~0.1-1 s late);
* the object refs the driver's core worker tracks (``driver_refs``): a leaked ref shows
  here exactly, one per leaked task, long before it shows in megabytes;
* the private memory of the actor processes (``actors_mib``: evaluators, replay shards).

CartPole's observations are zero-padded to ``--obs-size`` floats (1024: same dynamics)
so that batches, weights and gradients exceed Ray's 100 KiB inline limit and really
pass through the object store; with plain CartPole (``--obs-size 0``) every object is
inlined and the store stays empty whatever the optimizers do.

The replay buffer is small (``--buffer-size`` rows), so it is full during the warm-up
(the first third of the run); growth is then judged on the rest: the max over the last
third minus the max over the middle third, and a least-squares slope per 1k env steps
over the last two thirds.  Results go to ``benchmarks/results/soak.json``.

Usage::

    .venv/bin/python benchmarks/soak.py                # 30k env steps each, ~1.5 min
    .venv/bin/python benchmarks/soak.py --algos APEX --steps 100000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_COLOR_PREFIX", "0")

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import record

MIB = 1024 * 1024
METRICS = ("rss_mib", "private_mib", "store_mib", "driver_refs", "actors_mib")
"""What each :class:`MemorySample` measures (see the module docstring)."""


def padded_cartpole(env_config: Mapping[str, Any]) -> Any:
    """CartPole-v1 with its observation zero-padded to ``env_config["obs_size"]`` floats.

    The same dynamics with heavier rows: a sample batch of 16 rows (128 KiB at 1024
    floats), a replay batch and the weights of the first layer are then over Ray's
    100 KiB inline limit, so they really travel through the object store and a leaked
    ref would pin store memory instead of hiding in a task reply.
    """
    import gymnasium as gym

    size = int(env_config.get("obs_size", 1024))
    space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def pad(obs: np.ndarray) -> np.ndarray:
        out = np.zeros(size, np.float32)
        out[: obs.shape[0]] = obs
        return out

    return gym.wrappers.TransformObservation(gym.make("CartPole-v1"), pad, space)


def _env(obs_size: int) -> dict[str, Any]:
    if obs_size <= 0:
        return {"env": "CartPole-v1"}
    return {"env": padded_cartpole, "env_config": {"obs_size": obs_size}}


def apex_config(obs_size: int = 1024, buffer_size: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Ape-X DQN on (padded) CartPole-v1: 2 evaluators (0.25 CPU each), 2 replay shards of
    ``buffer_size // 2`` rows, a 16-step sample task, short iterations."""
    return {
        **_env(obs_size),
        "seed": seed,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "num_envs_per_evaluator": 2,
        "rollout_fragment_length": 8,  # 16 env steps per sample task: many tasks per 1k
        "train_batch_size": 32,
        "timesteps_per_iteration": 250,
        "sample_timeout_s": 120,
        "buffer_size": buffer_size,
        "learning_starts": buffer_size // 4,
        "num_replay_shards": 2,
        "replay_requests_in_flight_per_shard": 2,
        "learner_queue_size": 4,
        "min_step_time_s": 0.05,
    }


def a3c_config(obs_size: int = 1024, seed: int = 0) -> dict[str, Any]:
    """A3C on (padded) CartPole-v1: 2 evaluators (0.25 CPU each), a gradient per 10 steps;
    each evaluator samples its next batch in a background thread (``SampleQueue``)."""
    return {
        **_env(obs_size),
        "seed": seed,
        "optimizer": "async",
        "sample_async": True,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "num_envs_per_evaluator": 1,
        "rollout_fragment_length": 10,
        "train_batch_size": 200,  # env steps per train(): 20 gradients
        "sample_timeout_s": 120,
    }


def impala_config(obs_size: int = 1024, seed: int = 0) -> dict[str, Any]:
    """IMPALA on (padded) CartPole-v1: 2 evaluators (0.25 CPU each) sampling 20-row
    fragments continuously, 80-row train batches through one aggregation actor."""
    return {
        **_env(obs_size),
        "seed": seed,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "num_envs_per_evaluator": 2,
        "rollout_fragment_length": 10,
        "train_batch_size": 80,
        "timesteps_per_iteration": 250,
        "sample_timeout_s": 120,
        "num_aggregation_workers": 1,
        "num_cpus_per_aggregation_worker": 0.1,
        "min_step_time_s": 0.05,
    }


CONFIGS: dict[str, Callable[..., dict[str, Any]]] = {
    "APEX": apex_config,
    "A3C": a3c_config,
    "IMPALA": impala_config,
}


@dataclasses.dataclass
class MemorySample:
    """One measurement, taken after a ``train()`` that brought the run to ``steps``."""

    steps: int
    """Env steps sampled so far (``timesteps_total``)."""
    rss_mib: float
    """Resident memory of the driver process."""
    private_mib: float
    """The driver's RSS minus its shared pages (object-store pages it mapped, libraries)."""
    store_mib: float
    """Object-store memory in use on the node (Ray's resource view of the plasma store)."""
    driver_refs: int
    """Object refs tracked by the driver's core worker (owned or borrowed)."""
    actors_mib: float = 0.0
    """Private memory (RSS minus shared) summed over this Ray node's actor processes
    (evaluators, replay shards); idle workers and Ray's agents are left out."""


def object_store_used_bytes() -> float:
    """Bytes of object-store memory in use (total minus available ``object_store_memory``)."""
    import ray

    total = ray.cluster_resources().get("object_store_memory", 0.0)
    return total - ray.available_resources().get("object_store_memory", 0.0)


def driver_ref_count() -> int:
    """Object refs the driver's core worker tracks (Ray internals; -1 if unavailable)."""
    import ray

    core_worker = getattr(ray._private.worker.global_worker, "core_worker", None)
    counts = getattr(core_worker, "get_all_reference_counts", None)
    return len(counts()) if counts is not None else -1


def actor_processes_private_bytes() -> float:
    """Private memory of the local raylet's worker processes that host actors or tasks."""
    import ray
    from ray._private import ray_constants

    node = ray._private.worker._global_node
    raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, []) if node else []
    if not raylets:
        return -1.0
    total = 0.0
    for proc in psutil.Process(raylets[0].process.pid).children(recursive=True):
        try:
            name = proc.name()
            if not name.startswith("ray::") or name in _RAY_SYSTEM_PROCESSES:
                continue
            info = proc.memory_info()
        except psutil.Error:  # gone meanwhile
            continue
        total += info.rss - getattr(info, "shared", 0)
    return total


_RAY_SYSTEM_PROCESSES = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def measure(steps: int) -> MemorySample:
    """The driver's memory, the object store's usage and the driver's ref count now."""
    info = psutil.Process().memory_info()
    return MemorySample(
        steps=int(steps),
        rss_mib=info.rss / MIB,
        private_mib=(info.rss - getattr(info, "shared", 0)) / MIB,
        store_mib=object_store_used_bytes() / MIB,
        driver_refs=driver_ref_count(),
        actors_mib=actor_processes_private_bytes() / MIB,
    )


def run_soak(trainer: Any, total_steps: int) -> list[MemorySample]:
    """``trainer.train()`` until ``total_steps`` env steps; a sample after each call."""
    samples: list[MemorySample] = []
    steps = 0
    while steps < total_steps:
        steps = trainer.train()["timesteps_total"]
        samples.append(measure(steps))
    return samples


def growth(samples: Sequence[MemorySample]) -> dict[str, Any]:
    """Per metric: the growth over the run's second half, judged robustly.

    The first third (by env steps) is warm-up (allocator pools, the replay buffer filling,
    JIT-ish first calls).  ``<metric>_growth`` = max over the last third - max over the
    middle third: a leak raises it by the leak's size over a third of the run, while
    noise around a flat level (GC timing, a batch in flight) does not accumulate.
    ``<metric>_per_1k`` is the least-squares slope per 1000 env steps over the last two
    thirds.  Also the thirds' boundaries and the final value of each metric.
    """
    steps = np.array([s.steps for s in samples], dtype=np.float64)
    if len(samples) < 6:
        raise ValueError(f"need at least 6 samples to judge growth, got {len(samples)}")
    first, second = steps[-1] / 3, 2 * steps[-1] / 3
    middle, last = (steps > first) & (steps <= second), steps > second
    if not middle.any() or not last.any():  # a few big iterations: split by sample count
        n = len(samples)
        middle = np.arange(n) >= n // 3
        last = np.arange(n) >= 2 * n // 3
        middle &= ~last
    tail = middle | last
    out: dict[str, Any] = {
        "samples": len(samples),
        "steps": int(steps[-1]),
        "middle_from_steps": int(steps[middle][0]),
        "last_from_steps": int(steps[last][0]),
    }
    for metric in METRICS:
        values = np.array([getattr(s, metric) for s in samples], dtype=np.float64)
        out[f"{metric}_growth"] = float(values[last].max() - values[middle].max())
        x = steps[tail] / 1000.0
        slope = float(np.polyfit(x, values[tail], 1)[0]) if np.ptp(x) > 0 else 0.0
        out[f"{metric}_per_1k"] = slope
        out[f"{metric}_final"] = float(values[-1])
    return out


def describe(name: str, g: Mapping[str, Any]) -> str:
    """One line per metric: growth over the last third and slope per 1k env steps."""
    lines = [
        f"{name}: {g['steps']} env steps, {g['samples']} samples; middle third from "
        f"{g['middle_from_steps']}, last third from {g['last_from_steps']} steps"
    ]
    for metric in METRICS:
        unit = "" if metric == "driver_refs" else " MiB"
        lines.append(
            f"  {metric:<12} final {g[f'{metric}_final']:9.2f}{unit}   growth (max last third"
            f" - max middle third) {g[f'{metric}_growth']:+8.2f}{unit}   slope "
            f"{g[f'{metric}_per_1k']:+.3f}{unit} per 1k steps"
        )
    return "\n".join(lines)


def soak(
    name: str,
    total_steps: int,
    config: Mapping[str, Any],
    prepare: Callable[[Any], None] | None = None,
) -> tuple[list[MemorySample], dict[str, Any]]:
    """Build trainer ``name`` from ``config`` (then ``prepare(trainer)``, if given) and
    soak it for ``total_steps`` env steps.

    Returns the samples and their :func:`growth`, plus ``optimizer_stats`` at the end.
    """
    from hierl import get_trainer_class

    trainer = get_trainer_class(name)(dict(config))
    try:
        if prepare is not None:
            prepare(trainer)
        samples = run_soak(trainer, total_steps)
        stats = trainer.optimizer.stats()
    finally:
        trainer.stop()
    out = growth(samples)
    out["optimizer_stats"] = {k: float(v) for k, v in stats.items()}
    return samples, out


def format_sample(s: MemorySample) -> str:
    """One line of the timeline."""
    return (
        f"  {s.steps:>7} steps  rss {s.rss_mib:7.1f} MiB  private {s.private_mib:7.1f} MiB  "
        f"store {s.store_mib:6.2f} MiB  refs {s.driver_refs:>4}  actors {s.actors_mib:7.1f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    """Soak each algorithm, print the timeline and the growth, write the JSON record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per algorithm")
    parser.add_argument("--buffer-size", type=int, default=1000, help="APEX replay rows")
    parser.add_argument(
        "--obs-size", type=int, default=1024, help="CartPole obs padded to this (0: none)"
    )
    parser.add_argument("--print-every", type=int, default=10, help="print every n-th sample")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * MIB,
        logging_level="ERROR",
        log_to_driver=False,
    )
    figures: dict[str, Any] = {}
    configs: dict[str, Any] = {}
    try:
        for name in args.algos:
            kwargs = {"buffer_size": args.buffer_size} if name == "APEX" else {}
            config = CONFIGS[name](obs_size=args.obs_size, seed=args.seed, **kwargs)
            configs[name] = {k: getattr(v, "__name__", v) for k, v in config.items()}
            print(f"{name}: soaking for {args.steps} env steps...", flush=True)
            start = time.perf_counter()
            samples, g = soak(name, args.steps, config)
            g["wall_s"] = time.perf_counter() - start
            for i, s in enumerate(samples):
                if i % max(1, args.print_every) == 0 or i == len(samples) - 1:
                    print(format_sample(s))
            print(describe(name, g) + f"\n  ({g['wall_s']:.0f} s)\n", flush=True)
            figures[name] = {**g, "timeline": [dataclasses.asdict(s) for s in samples]}
    finally:
        ray.shutdown()
    path = record("soak", {**vars(args), "trainer_configs": configs}, figures)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
