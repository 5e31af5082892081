"""Replay memory of Atari transitions: RSS at 1M rows and the time to sample 32 of them.

Fills one replay buffer (prioritized by default, as DQN's ``replay`` optimizer builds it;
``frame_storage`` auto, so each frame is stored once) with synthetic Atari rows:
``obs`` and ``new_obs`` of shape ``(4, 84, 84)`` uint8 as Gymnasium's frame stack gives
them (the first frame repeated at a reset), episodes of ``--episode-len`` steps (uniform,
1,000-3,000 by default: Pong's), the last one terminated, in evaluator fragments of
``--fragment`` rows, optionally with n-step returns (Ape-X's 3).  Each frame is a
random base picture stamped with its own number, so no two frames are equal and the
buffer cannot dedupe more than a real game allows.

By default it stores ``1.07 x --rows`` rows, one lap of the frame ring past full, so
that the RSS printed is the steady state of a long run (every frame slot touched).
Then it times ``--samples`` single 32-row samples (prioritized with beta 0.4, and
uniform through the same buffer) and priority updates, and prints the naive (row)
buffer's projected size for the same rows.

Goals (issue 37): <= 8 GiB RSS at 1M rows, <= 1 ms per 32-row sample.

Usage::

    nice -n 19 .venv/bin/python benchmarks/replay_memory.py            # 1M rows, ~8 GiB
    .venv/bin/python benchmarks/replay_memory.py --rows 20000          # smoke run

Results: printed, and ``benchmarks/results/replay_memory.json`` (commit, machine, load).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record

from hierl.optimizers.replay.buffer import ReplayBuffer
from hierl.optimizers.replay.prioritized import make_replay_buffer
from hierl.postprocessing import compute_n_step
from hierl.sample_batch import SampleBatch

STACK, SIDE = 4, 84
GIB = 2**30


class SyntheticAtari:
    """Rows of an Atari evaluator: frame ``g`` is base picture ``g % 64`` stamped with
    ``g`` in its first 8 bytes; stacks padded with an episode's first frame.  A fragment
    ends early at an episode's end; its stacks are strided views of its frames (no copy)."""

    def __init__(self, rng: np.random.Generator, min_len: int, max_len: int):
        self.rng, self.min_len, self.max_len = rng, min_len, max_len
        self.base = rng.integers(0, 256, (64, SIDE, SIDE), dtype=np.uint8)
        self.next_frame = 0  # number of the next episode's reset frame
        self.eps_id = 0
        self._new_episode()

    def _new_episode(self) -> None:
        self.eps_id += 1
        self.first = self.next_frame  # the reset frame; step t's new frame is first + t + 1
        self.t = 0
        self.length = int(self.rng.integers(self.min_len, self.max_len + 1))
        self.next_frame += self.length + 1

    def _frames(self, numbers: np.ndarray) -> np.ndarray:
        out = self.base[numbers % len(self.base)]
        stamp = numbers.astype("<u8")[..., None].view(np.uint8)
        out.reshape(*numbers.shape, -1)[..., :8] = stamp
        return out

    def fragment(self, rows: int) -> SampleBatch:
        """Up to ``rows`` steps of the current episode (fewer where it ends)."""
        n = min(rows, self.length - self.t)
        # Step t sees frames first + max(0, t - 3 .. t) and makes new_obs of one later.
        numbers = self.first + np.maximum(np.arange(self.t - STACK + 1, self.t + n + 1), 0)
        seq = self._frames(numbers)
        frame = seq.strides[0]
        shape, strides = (n, STACK, SIDE, SIDE), (frame, *seq.strides)
        obs = np.lib.stride_tricks.as_strided(seq, shape, strides, writeable=False)
        new_obs = np.lib.stride_tricks.as_strided(seq[1:], shape, strides, writeable=False)
        self.t += n
        terminated = np.zeros(n, bool)
        terminated[-1] = self.t == self.length
        batch = SampleBatch(
            obs=obs,
            new_obs=new_obs,
            actions=self.rng.integers(0, 6, n),
            rewards=self.rng.choice(np.float32([-1, 0, 0, 0, 1]), n),
            terminateds=terminated,
            truncateds=np.zeros(n, bool),
            eps_id=np.full(n, self.eps_id),
        )
        if self.t == self.length:
            self._new_episode()
        return batch


def rss() -> int:
    """Resident bytes of this process now."""
    return psutil.Process().memory_info().rss


def timed_ms(fn, count: int) -> dict[str, float]:
    """Wall-clock median, 90th percentile and mean milliseconds of ``count`` calls of
    ``fn``, and the mean CPU milliseconds of this process per call (which a loaded
    machine's descheduling does not inflate)."""
    times = []
    cpu_start = time.process_time()
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    cpu_ms = (time.process_time() - cpu_start) * 1e3 / count
    ms = np.array(times) * 1e3
    return {
        "median": float(np.median(ms)),
        "p90": float(np.percentile(ms, 90)),
        "mean": float(ms.mean()),
        "cpu_mean": cpu_ms,
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="buffer capacity (rows)")
    parser.add_argument("--fill", type=float, default=1.07, help="rows stored / --rows")
    parser.add_argument("--fragment", type=int, default=256, help="rows per add")
    parser.add_argument("--episode-len", type=int, nargs=2, default=(1000, 3000))
    parser.add_argument("--n-step", type=int, default=1)
    parser.add_argument("--uniform", action="store_true", help="uniform instead of prioritized")
    parser.add_argument("--samples", type=int, default=2000, help="timed 32-row samples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    env = SyntheticAtari(rng, *args.episode_len)
    # The row buffer's bytes per row, from a one-row buffer of the same columns.
    one = ReplayBuffer(1, frame_storage="rows")
    one.add(env.fragment(1))
    naive_bytes = one.nbytes * args.rows
    env = SyntheticAtari(np.random.default_rng(args.seed), *args.episode_len)

    load_before = os.getloadavg()
    rss_before = rss()
    buffer = make_replay_buffer(args.rows, not args.uniform, seed=args.seed)
    target = int(args.rows * args.fill)
    add_s = 0.0
    while buffer.num_added < target:
        batch = env.fragment(min(args.fragment, target - buffer.num_added))
        if args.n_step > 1:
            batch = compute_n_step(batch, args.n_step, 0.99)
        start = time.perf_counter()
        buffer.add(batch)
        add_s += time.perf_counter() - start
    del batch
    rss_after = rss()

    beta = 0.0 if args.uniform else 0.4
    for _ in range(100):  # warm-up
        buffer.sample(32, beta=beta)
    sample_ms = timed_ms(lambda: buffer.sample(32, beta=beta), args.samples)
    uniform_ms = timed_ms(lambda: ReplayBuffer.sample(buffer, 32), args.samples)
    idx = buffer.sample(32)[SampleBatch.BATCH_INDEXES]
    update_ms = timed_ms(lambda: buffer.update_priorities(idx, rng.uniform(0.1, 2, 32)), 500)
    stats = buffer.stats()
    figures = {
        "rows_stored": len(buffer),
        "rows_added": buffer.num_added,
        "frames_written": stats["frames_written"],
        "frame_capacity": stats["frame_capacity"],
        "buffer_nbytes_gib": buffer.nbytes / GIB,
        "rss_gib": rss_after / GIB,
        "rss_growth_gib": (rss_after - rss_before) / GIB,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
        "naive_projected_gib": naive_bytes / GIB,
        "add_rows_per_s": buffer.num_added / add_s,
        "sample32_ms": sample_ms,
        "uniform_sample32_ms": uniform_ms,
        "update_priorities32_ms": update_ms,
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
    }
    kind = "uniform" if args.uniform else "prioritized"
    f = figures
    lines = [
        f"{kind} replay, {args.rows:,} rows of (4, 84, 84) uint8 obs + new_obs, "
        f"n-step {args.n_step}",
        f"  stored {len(buffer):,} rows (added {buffer.num_added:,}); frames written "
        f"{stats['frames_written']:,} into a ring of {stats['frame_capacity']:,}",
        f"  RSS {f['rss_gib']:.2f} GiB (buffer arrays {f['buffer_nbytes_gib']:.2f} GiB, "
        f"peak {f['peak_rss_gib']:.2f} GiB); goal <= 8 GiB",
        f"  naive row buffer, projected: {f['naive_projected_gib']:.1f} GiB "
        f"({naive_bytes / 1e9:.1f} GB)",
        f"  sample 32 rows ({kind}): median {sample_ms['median']:.3f} ms, p90 "
        f"{sample_ms['p90']:.3f} ms, mean {sample_ms['mean']:.3f} ms, CPU "
        f"{sample_ms['cpu_mean']:.3f} ms a call; goal <= 1 ms",
        f"  sample 32 rows (uniform): median {uniform_ms['median']:.3f} ms, mean "
        f"{uniform_ms['mean']:.3f} ms, CPU {uniform_ms['cpu_mean']:.3f} ms a call",
        f"  update 32 priorities: median {update_ms['median']:.3f} ms; add "
        f"{f['add_rows_per_s']:,.0f} rows/s",
        "  load average before / after: "
        + " / ".join(", ".join(f"{x:.1f}" for x in v) for v in (load_before, f["load_avg_after"]))
        + " (a shared 2-core machine)",
    ]
    print("\n".join(lines))
    config = {**vars(args), "kind": kind}
    config["episode_len"] = list(args.episode_len)
    record("replay_memory", config, figures)
    return figures


if __name__ == "__main__":
    main()
