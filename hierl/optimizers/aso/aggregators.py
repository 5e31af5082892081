"""Aggregation actors: concatenate (and decompress) sampled fragments off the driver.

IMPALA's learner wants ``train_batch_size`` rows per update, evaluators return
fragments of ``rollout_fragment_length x num_envs`` rows, LZ4-compressed when
``compress_observations`` is on.  With ``num_aggregation_workers > 0`` the driver passes
the fragments' object refs to an aggregator, which concatenates and decompresses them
in its own process; the driver then fetches one ready train batch (RLlib's
``AggregatorWorker``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from hierl.sample_batch import SampleBatch


class Aggregator:
    """Ray actor: ``aggregate(*fragments)`` returns one decompressed train batch."""

    def aggregate(self, *fragments: SampleBatch) -> SampleBatch:
        """The fragments (resolved from their refs by Ray) concatenated row-wise."""
        batch = SampleBatch.concat_samples(list(fragments))
        return batch.decompress_if_needed()

    def ping(self) -> bool:
        """Liveness probe."""
        return True


class AggregatorPool:
    """The driver's side: ``num`` aggregator actors, each reserving ``num_cpus``.

    ``pick`` returns the one with the fewest tasks in flight; ``replace`` swaps a dead
    one for a new actor (the caller resubmits its lost tasks' fragments).
    """

    def __init__(self, num: int, num_cpus: float, actor_options: dict[str, Any] | None = None):
        self.num_cpus = num_cpus
        self.actor_options = dict(actor_options or {})
        self.actors = [self._make() for _ in range(num)]
        self.num_restarts = 0

    def _make(self) -> Any:
        import ray

        cls = ray.remote(num_cpus=self.num_cpus, **self.actor_options)(Aggregator)
        return cls.remote()

    def pick(self, load: Any) -> Any:
        """The aggregator with the smallest ``load(actor)``."""
        return min(self.actors, key=load)

    def replace(self, actor: Any) -> Any:
        """A new aggregator in ``actor``'s place (``actor`` when already replaced)."""
        import ray

        if actor not in self.actors:
            return None
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor, no_restart=True)
        new = self._make()
        self.actors[self.actors.index(actor)] = new
        self.num_restarts += 1
        return new

    def stop(self) -> None:
        """Kill the aggregators."""
        import ray

        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor, no_restart=True)
        self.actors = []
