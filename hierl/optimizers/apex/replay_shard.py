"""A replay shard: one slice of Ape-X's replay memory (Horgan et al. 2018, §3).

A preallocated (prioritized) buffer that runs as a Ray actor, or as a plain in-process
object when nothing runs remotely; ``hierl.optimizers.apex.sharded_replay`` drives several
(configured by ``ShardedReplayConfig``).
"""

from __future__ import annotations

import dataclasses
import resource
from typing import Any

import numpy as np

from hierl.optimizers.replay.optimizer import ReplayConfig
from hierl.optimizers.replay.prioritized import make_replay_buffer
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class ShardedReplayConfig(ReplayConfig):
    """Replay settings plus the shards'; ``buffer_size`` is the total over all shards."""

    replay_ratio: float = 1.0
    """Most rows replayed per env step stored once learning has started.  The learner
    never runs ahead of this; it may fall behind (Ape-X's learner is not synchronised
    with the actors).  Raise it to let a fast learner replay more."""
    num_replay_shards: int = 4
    """Replay actors; each holds ``buffer_size // num_replay_shards`` rows and starts
    serving batches once it holds ``learning_starts // num_replay_shards``."""
    num_cpus_per_replay_shard: float = 0.0
    """CPUs each replay actor reserves (0: it shares the machine's)."""
    max_adds_in_flight_per_shard: int = 4
    """Batches sent to one shard and not yet stored; when every shard is this busy,
    finished samples wait (as object refs) and their evaluators get no new task."""
    replay_requests_in_flight_per_shard: int = 2
    """Replay batches being fetched from each shard at once (the learner's prefetch)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(
            "learning_starts",
            self.learning_starts <= self.buffer_size,
            f"must be in [1, buffer_size={self.buffer_size}] (a shard serves once it "
            "holds its share of both)",
        )
        for name in (
            "num_replay_shards",
            "max_adds_in_flight_per_shard",
            "replay_requests_in_flight_per_shard",
        ):
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        self.check(
            "buffer_size",
            self.buffer_size >= self.num_replay_shards,
            f"must be >= num_replay_shards={self.num_replay_shards} (one row per shard)",
        )
        self.check("num_cpus_per_replay_shard", self.num_cpus_per_replay_shard >= 0, ">= 0")


class ReplayShard:
    """One slice of the replay memory: a preallocated (prioritized) buffer.

    Runs as a Ray actor (``ReplayShard.as_remote(num_cpus)``) or, in-process, as a plain
    object.  ``capacity``, ``prioritized``, ``alpha``, ``seed`` and ``frame_storage``
    configure the buffer (``make_replay_buffer``); ``replay`` returns None until it holds
    ``learning_starts`` rows.
    """

    def __init__(
        self,
        capacity: int,
        prioritized: bool,
        alpha: float,
        learning_starts: int,
        seed: int | None = None,
        frame_storage: str = "auto",
    ):
        self.buffer = make_replay_buffer(
            capacity, prioritized, alpha=alpha, seed=seed, frame_storage=frame_storage
        )
        self.learning_starts = learning_starts

    @classmethod
    def as_remote(cls, num_cpus: float = 0.0) -> Any:
        """The Ray actor class of a shard reserving ``num_cpus``."""
        import ray

        return ray.remote(num_cpus=num_cpus)(cls)

    def add_batch(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> int:
        """Store ``batch`` at ``priorities`` (None: the max priority); returns the size."""
        self.buffer.add(batch, priorities)
        return len(self.buffer)

    def replay(self, num_items: int, beta: float) -> SampleBatch | None:
        """A prioritized batch of ``num_items`` rows, or None before ``learning_starts``."""
        if len(self.buffer) < self.learning_starts:
            return None
        return self.buffer.sample(num_items, beta=beta)

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities of replayed rows."""
        self.buffer.update_priorities(indexes, priorities)

    def stats(self) -> dict[str, float]:
        """The buffer's statistics, its ``capacity``, the bytes its storage occupies and
        the peak resident memory of the process it runs in."""
        return {
            **self.buffer.stats(),
            "capacity": self.buffer.capacity,
            "nbytes": self.buffer.nbytes,
            "process_max_rss_bytes": 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }
