"""Offline input throughput: SGD fed from Parquet against SGD on an in-memory batch, and
reading 1 GB of Parquet with two evaluators.

Two measurements, each with its baseline from the same run, printed and written to
``benchmarks/results/offline.json``:

1. **Feeding SGD.**  ``local`` optimizer steps of a trainer whose ``input`` is a
   directory of logged data (each step reads ``train_batch_size`` shuffled rows, then
   runs the minibatch SGD), against the same steps on one in-memory batch (the
   evaluator's ``sample`` replaced by a function returning a batch it read before).
   Ratio = rows/s from Parquet / rows/s in memory (target >= 0.9).  For BC and PPO on
   CartPole-v1 (data logged by PPO, returns and advantages computed as it is read) and
   BC on an Atari-shaped image env (``(84, 84, 4)`` uint8 frames, NatureCNN); BC both
   reading in turn with SGD and with ``sample_async`` (the next batch is read in a
   background thread while SGD runs).  The two are measured in alternating rounds so
   drifting background load hits both alike.
2. **Reading 1 GB** of image rows (random frames, which zstd cannot shrink: bytes on
   disk are bytes decoded) with two remote OfflineEvaluators, each reading its half of
   the files with ``sample()``; against one process decoding the same files with
   ``pyarrow.parquet`` (the engine's own ceiling on this machine).

Usage::

    .venv/bin/python benchmarks/offline.py             # both, ~3 minutes
    .venv/bin/python benchmarks/offline.py --quick     # small data, short runs
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np
import pyarrow.parquet as pq

from hierl import BCTrainer, PPOTrainer
from hierl.evaluators.offline import OutputWriter, list_files
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ImageEnv, record

TARGET_RATIO = 0.9
"""The issue's bar: Parquet-fed SGD at >= 0.9x the in-memory rate."""


def log_cartpole(path: Path, steps: int) -> None:
    """``steps`` env steps of an untrained PPO policy on CartPole-v1, written raw (so PPO
    and BC both postprocess them as they read)."""
    config = {"env": "CartPole-v1", "output": str(path), "output_postprocessed": False}
    with PPOTrainer(config) as trainer:
        rows = 0
        while rows < steps:
            rows += trainer.local_evaluator.sample().count


def write_images(path: Path, megabytes: float, rows_per_batch: int = 500) -> int:
    """Random ``ImageEnv`` transitions, ``megabytes`` of them; returns the rows written."""
    space = ImageEnv.observation_space
    writer = OutputWriter(path, {DEFAULT_POLICY_ID: (space, ImageEnv.action_space)})
    rng = np.random.default_rng(0)
    row_bytes = 2 * int(np.prod(space.shape))  # obs and new_obs
    rows = int(megabytes * 2**20 / row_bytes)
    for start in range(0, rows, rows_per_batch):
        n = min(rows_per_batch, rows - start)
        idx = np.arange(start, start + n)
        writer.write(
            SampleBatch(
                obs=rng.integers(0, 256, (n, *space.shape), dtype=np.uint8),
                new_obs=rng.integers(0, 256, (n, *space.shape), dtype=np.uint8),
                actions=rng.integers(0, 6, n),
                rewards=np.ones(n, np.float32),
                terminateds=np.zeros(n, bool),
                truncateds=idx % 400 == 399,
                eps_id=idx // 400,
                t=idx % 400,
            )
        )
    writer.close()
    return rows


def sgd_ratio(trainer_cls: type, config: dict[str, Any], steps: int, rounds: int) -> dict:
    """Rows/s of ``local`` optimizer steps reading ``config['input']`` and of the same
    steps on one in-memory batch, over ``rounds`` alternating rounds of ``steps`` each."""
    with trainer_cls(config) as trainer:
        optimizer, evaluator = trainer.optimizer, trainer.local_evaluator
        read = evaluator.sample
        batch = read()
        optimizer.step()  # warm-up: allocator, Adam state

        def timed(sample: Any) -> tuple[int, float]:
            evaluator.sample = sample
            rows0 = optimizer.num_steps_sampled
            start = time.perf_counter()
            for _ in range(steps):
                optimizer.step()
            return optimizer.num_steps_sampled - rows0, time.perf_counter() - start

        totals = {"parquet": [0, 0.0], "memory": [0, 0.0]}
        for _ in range(rounds):
            for name, sample in (("parquet", read), ("memory", lambda: batch)):
                rows, seconds = timed(sample)
                totals[name][0] += rows
                totals[name][1] += seconds
        evaluator.sample = read
    out = {f"{name}_rows_per_s": rows / seconds for name, (rows, seconds) in totals.items()}
    out["ratio"] = out["parquet_rows_per_s"] / out["memory_rows_per_s"]
    out["batch_rows"] = batch.count
    return out


def read_with_evaluators(path: Path, rows: int, batch_rows: int) -> dict[str, float]:
    """Two remote evaluators each read their half of the files once through
    ``sample()`` (in parallel); rows/s and MiB/s of the whole read."""
    import ray

    config = {
        "env": ImageEnv,
        "input": str(path),
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 1,
        "rollout_fragment_length": batch_rows,
        "train_batch_size": 2 * batch_rows,
    }
    with BCTrainer(config) as trainer:
        evaluators = trainer.evaluators.remote_evaluators
        ray.get([e.get_weights.remote() for e in evaluators], timeout=120)  # started
        share = rows // 2
        start = time.perf_counter()
        done = [0, 0]
        pending = {e.sample.remote(): i for i, e in enumerate(evaluators)}
        while pending:
            [ref], _ = ray.wait(list(pending), timeout=120)
            i = pending.pop(ref)
            done[i] += ray.get(ref, timeout=120).count
            if done[i] < share:
                pending[evaluators[i].sample.remote()] = i
        seconds = time.perf_counter() - start
    read = sum(done)
    return {"rows": read, "seconds": seconds, "rows_per_s": read / seconds}


def read_with_pyarrow(path: Path) -> dict[str, float]:
    """One process decoding every file with ``pyarrow.parquet`` (all columns)."""
    start = time.perf_counter()
    rows = 0
    for f in list_files(str(path)):
        for block in pq.ParquetFile(f).iter_batches():
            rows += block.num_rows
    seconds = time.perf_counter() - start
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=1024.0, help="image data to read")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="small data, short runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.megabytes, args.steps, args.rounds = 64.0, 2, 2

    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    figures: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="hierl-offline-bench-") as tmp:
        cartpole, images = Path(tmp) / "cartpole", Path(tmp) / "images"
        log_cartpole(cartpole, 20_000)
        image_rows = write_images(images, args.megabytes)
        cases = {
            "BC CartPole-v1": (BCTrainer, {"env": "CartPole-v1", "input": str(cartpole)}),
            # the reader fills the next batch in a background thread while SGD runs
            "BC CartPole, async": (
                BCTrainer,
                {"env": "CartPole-v1", "input": str(cartpole), "sample_async": True},
            ),
            "PPO CartPole-v1": (
                PPOTrainer,
                {"env": "CartPole-v1", "input": str(cartpole), "postprocess_inputs": True},
            ),
            "BC image": (
                BCTrainer,
                {"env": ImageEnv, "input": str(images), "train_batch_size": 500},
            ),
            "BC image, async": (
                BCTrainer,
                {
                    "env": ImageEnv,
                    "input": str(images),
                    "train_batch_size": 500,
                    "sample_async": True,
                },
            ),
        }
        print("Feeding local SGD: rows/s from Parquet vs the same SGD on an in-memory batch")
        figures["sgd"] = {}
        for name, (cls, config) in cases.items():
            run = sgd_ratio(cls, config, args.steps, args.rounds)
            figures["sgd"][name] = run
            verdict = "meets" if run["ratio"] >= TARGET_RATIO else "MISSES"
            print(
                f"  {name:<17} {run['batch_rows']:>5}-row batches: parquet "
                f"{run['parquet_rows_per_s']:>9,.0f} rows/s, memory "
                f"{run['memory_rows_per_s']:>9,.0f} rows/s, ratio {run['ratio']:.3f} "
                f"({verdict} the {TARGET_RATIO} target)",
                flush=True,
            )

        on_disk = sum(f.stat().st_size for f in images.glob("*.parquet")) / 2**20
        print(f"Reading {on_disk:,.0f} MiB of Parquet ({image_rows:,} image rows):")
        evaluators = read_with_evaluators(images, image_rows, 500)
        baseline = read_with_pyarrow(images)
        for name, run in (("2 evaluators", evaluators), ("pyarrow, 1 proc", baseline)):
            mib_s = on_disk * run["rows"] / image_rows / run["seconds"]
            run["mib_per_s"] = mib_s
            print(
                f"  {name:<16} {run['rows']:>7,} rows in {run['seconds']:6.1f} s: "
                f"{run['rows_per_s']:>8,.0f} rows/s, {mib_s:>6,.0f} MiB/s"
            )
        ratio = evaluators["rows_per_s"] / baseline["rows_per_s"]
        print(f"  2 evaluators / pyarrow in one process: {ratio:.2f}x")
        figures["read"] = {
            "mib_on_disk": on_disk,
            "rows": image_rows,
            "evaluators": evaluators,
            "pyarrow": baseline,
            "ratio": ratio,
        }
    path = record("offline", vars(args), figures)
    print(f"wrote {path}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
