"""Ape-X throughput, and how many workers the single-threaded driver could feed.

Horgan et al. 2018 ran Ape-X DQN at about 160,000 environment frames per second with 256
actors (RLlib ICML 2018 §5 reproduces it).  Two measurements, printed and written to
``benchmarks/results/apex_throughput.json``:

1. **Ape-X DQN** (``APEX`` trainer) on CartPole-v1 with 1, 2 and 4 remote evaluators
   and 2 replay shards: env frames/s reaching replay and learner updates/s, as the
   ``apex`` optimizer reports them per ``step()``.  On a small machine the evaluators,
   shards and learner share the cores (oversubscribed): the CPU use of each run is
   printed with its figures.
2. **The driver's routing capacity**: the real ``apex`` event loop over *fake*
   evaluators, whose sample task returns a cached batch at once, and fake replay shards,
   which acknowledge every add at once and never start replaying.  What remains is the
   driver's own work per sample batch: wait for finished tasks, hand each batch (an
   object ref) to a shard, relaunch the evaluator, refresh its weights every
   ``max_weight_sync_delay`` steps.  From the batches routed per second the script
   projects the largest worker count the driver sustains at the paper's per-worker rate,
   printing the arithmetic.  The projection counts sample routing only: the replay side
   (replay requests, priority updates) adds driver work per *learner* update, reported
   separately by the first measurement's ``wait``/``replay`` timers.

3. **A tuned example** (``--file``, e.g. ``examples/tuned/pong-apex.yaml``) instead of
   the two above: its Ape-X trainer as the file configures it (evaluation off) for
   ``--seconds`` of wall-clock, with the rates over the stretch after the learner's
   first update: env steps/s sampled, learner updates/s, rows replayed per sampled step
   (the replay ratio) and the learner thread's busy fraction.  This is what a learning
   run of the file gets from the machine; it learns nothing in that time.

Usage::

    .venv/bin/python benchmarks/apex_throughput.py                  # both, ~2 minutes
    .venv/bin/python benchmarks/apex_throughput.py --skip-real --fake-evaluators 16
    .venv/bin/python benchmarks/apex_throughput.py --file examples/tuned/pong-apex.yaml
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np

from hierl import get_trainer_class
from hierl.optimizers.apex import ApexConfig, ApexOptimizer, sharded_replay
from hierl.optimizers.apex.samplers import sample_for_replay
from hierl.sample_batch import SampleBatch
from hierl.tune.experiments import load_experiments

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CpuMeter, cartpole_batch, measure_routing, process_tree, record

PAPER_FRAMES_PER_S = 160_000
PAPER_WORKERS = 256
START_TIMEOUT_S = 120
"""Seconds ``tuned_throughput`` waits for the first learner update before giving up."""


# -- fakes: the driver's counterparts answering at once --------------------------------
class FakeEvaluator:
    """Answers the apex optimizer's evaluator calls at once, with one cached batch."""

    def __init__(self, batch: SampleBatch):
        self.result = (batch, None, (batch.count, 0.0))

    def apply(self, fn: Any, *args: Any) -> tuple[SampleBatch, None, tuple[int, float]]:
        """Stands in for ``sample_for_replay``: (batch, priorities, (rows, seconds))."""
        return self.result

    def set_weights(self, weights: Any, global_vars: Any = None) -> None:
        """Accepts (and drops) fresh weights."""

    def get_metrics(self) -> list:
        """No episodes."""
        return []


class FakeShard:
    """Acknowledges adds at once; reports size 0, so replay never starts."""

    def __init__(self, *args: Any) -> None:
        self.rows = 0

    @classmethod
    def as_remote(cls, num_cpus: float = 0.0) -> Any:
        import ray

        return ray.remote(num_cpus=num_cpus)(cls)

    def add_batch(self, batch: SampleBatch, priorities: Any = None) -> int:
        self.rows += batch.count
        return 0

    def stats(self) -> dict[str, float]:
        return {"rows": self.rows}


@contextlib.contextmanager
def fake_replay_shards() -> Iterator[None]:
    """Build the apex optimizer's shards from :class:`FakeShard` inside the block."""
    real = sharded_replay.ReplayShard
    sharded_replay.ReplayShard = FakeShard  # type: ignore[misc]
    try:
        yield
    finally:
        sharded_replay.ReplayShard = real  # type: ignore[misc]


def routing_capacity(
    algo: str, num_fake: int, in_flight: int, batch_rows: int, seconds: float
) -> dict[str, float]:
    """Sample batches per second the apex driver routes from instant fake evaluators."""
    import ray

    trainer = get_trainer_class(algo)({"env": "CartPole-v1", "num_evaluators": 0})
    evaluators = trainer.evaluators
    batch = cartpole_batch(batch_rows)
    fake_class = ray.remote(num_cpus=0)(FakeEvaluator)
    evaluators.remote_evaluators = [fake_class.remote(batch) for _ in range(num_fake)]
    # Started, and the task function unpickled once (that imports hierl and torch there).
    evaluators.get([e.apply.remote(sample_for_replay, None) for e in evaluators.remote_evaluators])
    config = ApexConfig.from_dict(
        {
            "num_replay_shards": 4,
            "buffer_size": 100_000,
            "learning_starts": 100_000,  # never reached: no replay traffic
            "max_sample_requests_in_flight_per_evaluator": in_flight,
            "per_worker_epsilon": False,
            "min_step_time_s": seconds,
        }
    )
    with fake_replay_shards():
        optimizer = ApexOptimizer(evaluators, config=config)
    try:
        return {
            **measure_routing(optimizer, seconds, batch_rows),
            "weight_syncs": optimizer.samplers.num_weight_syncs,
        }
    finally:
        optimizer.stop()
        for actor in evaluators.remote_evaluators:
            ray.kill(actor)
        evaluators.remote_evaluators = []
        trainer.stop()


def real_throughput(algo: str, num_evaluators: int, iterations: int, step_s: float) -> dict:
    """Env frames/s and learner updates/s of Ape-X on CartPole with ``num_evaluators``."""
    config = {
        "env": "CartPole-v1",
        "num_evaluators": num_evaluators,
        "num_cpus_per_evaluator": 0,
        "optimizer_config": {"num_replay_shards": 2, "min_step_time_s": step_s},
    }
    with get_trainer_class(algo)(config) as trainer:
        trainer.train()  # warm-up: learning starts, queues fill
        frames, updates = [], []
        with CpuMeter({"ours": process_tree()}) as meter:
            for _ in range(iterations):
                result = trainer.train()
                frames.append(result["sample_steps_per_s"])
                updates.append(result["learner_updates_per_s"])
        return {
            "evaluators": num_evaluators,
            "env_frames_per_s": float(np.mean(frames)),
            "learner_updates_per_s": float(np.mean(updates)),
            "replay_batch_rows": int(trainer.optimizer.config.train_batch_size),
            "cores_used": meter.cores["ours"],
            "episode_reward_mean": result["episode_reward_mean"],
        }


def tuned_throughput(path: str, seconds: float) -> dict[str, Any]:
    """Rates of the Ape-X trainer of the tuned example at ``path`` (evaluation off) over
    ``seconds``, counted from the result that first shows a learner update (which may take
    up to ``START_TIMEOUT_S``: actors start and the replay fills to ``learning_starts``)."""
    ((name, spec),) = load_experiments(path).items()
    config = {**spec.config, "env": spec.env, "seed": 0, "evaluation_interval": 0}
    keys = ("num_steps_sampled", "num_steps_trained", "num_learner_updates")
    with get_trainer_class(spec.run)(config) as trainer:
        start = time.monotonic()
        first = last = None
        busy = []
        while True:
            result = trainer.train()
            now = time.monotonic()
            if result["num_learner_updates"] > 0:
                point = (now, *(result[k] for k in keys))
                first, last = first or point, point
                busy.append(result["learner_busy_frac"])
                if now - first[0] >= seconds:
                    break
            elif now - start > START_TIMEOUT_S:
                raise SystemExit(f"{path}: the learner had not started within {START_TIMEOUT_S} s")
        rows = int(trainer.optimizer.config.train_batch_size)
    dt, sampled, trained, updates = (b - a for a, b in zip(first, last, strict=True))
    return {
        "experiment": name,
        "env": spec.env,
        "seconds_measured": dt,
        "learning_started_after_s": first[0] - start,
        "env_steps_per_s": sampled / dt,
        "learner_updates_per_s": updates / dt,
        "replay_batch_rows": rows,
        "rows_replayed_per_step_sampled": trained / sampled,
        "learner_busy_frac": float(np.mean(busy)),
        "env_steps_total": last[1],
    }


def projection(batches_per_s: float, batch_rows: int) -> tuple[int, list[str]]:
    """Largest worker count the driver sustains at the paper's per-worker frame rate."""
    per_worker = PAPER_FRAMES_PER_S / PAPER_WORKERS
    per_worker_batches = per_worker / batch_rows
    workers = int(batches_per_s // per_worker_batches)
    lines = [
        f"paper: {PAPER_FRAMES_PER_S:,} frames/s / {PAPER_WORKERS} workers "
        f"= {per_worker:.0f} frames/s per worker",
        f"at {batch_rows} frames per sample batch: {per_worker:.0f} / {batch_rows} "
        f"= {per_worker_batches:.2f} batches/s per worker",
        f"driver routes {batches_per_s:,.0f} batches/s -> {batches_per_s:,.0f} / "
        f"{per_worker_batches:.2f} = {workers:,} workers "
        f"({workers * per_worker:,.0f} frames/s; the paper's rate needs "
        f"{PAPER_WORKERS * per_worker_batches:,.0f} batches/s)",
        f"{PAPER_WORKERS} workers at this routing rate need batches of >= "
        f"{PAPER_FRAMES_PER_S:,} / {batches_per_s:,.0f} = "
        f"{math.ceil(PAPER_FRAMES_PER_S / batches_per_s):,} frames",
    ]
    return workers, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="APEX", help="Ape-X trainer name (APEX)")
    parser.add_argument("--evaluators", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--iterations", type=int, default=3, help="measured train() calls")
    parser.add_argument("--step-seconds", type=float, default=3.0, help="apex min_step_time_s")
    parser.add_argument("--fake-evaluators", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=4, help="sample tasks per fake")
    parser.add_argument("--batch-rows", type=int, default=50, help="frames per sample batch")
    parser.add_argument("--routing-seconds", type=float, default=10.0)
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--skip-routing", action="store_true")
    parser.add_argument("--file", help="measure this tuned example's Ape-X instead")
    parser.add_argument("--seconds", type=float, default=180.0, help="with --file")
    args = parser.parse_args(argv)

    import ray

    ray.init(
        num_cpus=max(2, *args.evaluators) + 1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    cores = os.cpu_count()
    figures: dict[str, Any] = {"cpu_count": cores}
    if args.file:
        run = tuned_throughput(args.file, args.seconds)
        print(
            f"{run['experiment']} ({run['env']}), {cores} CPU cores, "
            f"{run['seconds_measured']:.0f} s from the first learner update "
            f"(after {run['learning_started_after_s']:.0f} s):\n"
            f"  {run['env_steps_per_s']:,.0f} env steps/s sampled, "
            f"{run['learner_updates_per_s']:.1f} learner updates/s of "
            f"{run['replay_batch_rows']} rows, "
            f"{run['rows_replayed_per_step_sampled']:.2f} rows replayed per step sampled, "
            f"learner busy {run['learner_busy_frac']:.0%}"
        )
        figures["tuned"] = run
        args.skip_real = args.skip_routing = True
    if not args.skip_real:
        print(f"Ape-X DQN on CartPole-v1, {cores} CPU cores (oversubscribed beyond that):")
        print(f"{'evaluators':>10} {'env frames/s':>13} {'updates/s':>10} {'cores used':>11}")
        runs = []
        for n in args.evaluators:
            run = real_throughput(args.algo, n, args.iterations, args.step_seconds)
            runs.append(run)
            print(
                f"{n:>10} {run['env_frames_per_s']:>13,.0f} "
                f"{run['learner_updates_per_s']:>10,.1f} {run['cores_used']:>11.2f}",
                flush=True,
            )
        figures["real"] = runs
    if not args.skip_routing:
        cap = routing_capacity(
            args.algo, args.fake_evaluators, args.in_flight, args.batch_rows, args.routing_seconds
        )
        workers, lines = projection(cap["batches_per_s"], args.batch_rows)
        # The driver is single-threaded: on a crowded machine it gets less than a core.
        per_core = cap["batches_per_s"] / max(cap["driver_cores"], 1e-9)
        workers_per_core, core_lines = projection(per_core, args.batch_rows)
        print(
            f"\nDriver routing capacity ({args.fake_evaluators} instant fake evaluators x "
            f"{args.in_flight} tasks, instant fake shards, {args.batch_rows}-row batches):\n"
            f"  {cap['batches_per_s']:,.0f} sample batches/s "
            f"({cap['frames_per_s']:,.0f} frames/s); driver used {cap['driver_cores']:.2f} "
            f"cores, the machine {cap['machine_cores']:.2f} of {cores}"
        )
        print("Projection (as measured):\n  " + "\n  ".join(lines))
        print(
            f"Projection (driver given one whole core: {cap['batches_per_s']:,.0f} / "
            f"{cap['driver_cores']:.2f} = {per_core:,.0f} batches/s):\n  " + "\n  ".join(core_lines)
        )
        figures["routing"] = {
            **cap,
            "projected_workers": workers,
            "projection": lines,
            "batches_per_driver_core_s": per_core,
            "projected_workers_one_core": workers_per_core,
        }
    path = record("apex_throughput", vars(args), figures)
    print(f"\nwrote {path}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
