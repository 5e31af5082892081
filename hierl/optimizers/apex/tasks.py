"""The kinds of task in the Ape-X driver's shared task pool."""

from __future__ import annotations

import enum


class ApexTask(enum.Enum):
    """The first element of an Ape-X task tag: which kind of task finished.

    Sample tasks on the evaluators (``ReplaySamplers``, tagged ``(SAMPLE, index,
    batch_ref, priorities_ref)``) and replay requests to the shards (``ShardedReplay``,
    tagged ``(REPLAY, (shard, generation))``) share one ``TaskPool``, so one ``ray.wait``
    wakes the driver for either; ``ApexOptimizer`` routes each finished task by its kind.
    """

    SAMPLE = enum.auto()
    REPLAY = enum.auto()
