"""Sharded replay (Ape-X), the driver's side: bookkeeping of K replay-shard actors.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (§3): the replay memory
is split over several actors (``hierl.optimizers.apex.replay_shard``), so storing and sampling
scale with their number.  ``ShardedReplay`` hands sampled batches (object refs) to
the shards round-robin with a bounded number of unacknowledged adds per shard, tracks
their sizes, paces replay by a row budget (``replay_ratio`` replayed rows per stored env
step) and returns new priorities to the shard each replayed batch came from.  It is the
plumbing of the ``apex`` optimizer, which is only its event loop.

A shard actor that dies is recreated empty in its place (``num_replay_shard_restarts``);
until it holds ``learning_starts`` rows again, replay comes from the other shards.  Its
rows, the adds and replay requests in flight on it and the priority updates of batches
replayed from it are lost (a shard's ``generation`` tells stale priority updates apart).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hierl.optimizers.apex.replay_shard import ReplayShard, ShardedReplayConfig
from hierl.optimizers.apex.tasks import ApexTask
from hierl.optimizers.task_pool import TaskPool
from hierl.sample_batch import SampleBatch


class ShardedReplay:
    """The driver's view of ``config.num_replay_shards`` replay shards.

    Args:
        config: the replay and shard settings.
        remote: shards as Ray actors (else in-process objects, called directly).
        tasks: the pool replay requests are added to, tagged ``(ApexTask.REPLAY, (shard,
            generation))``; the
            caller waits on it (together with its own tasks) and hands every finished
            replay task to ``replayed``.
        get: fetches object refs with the caller's timeout (``EvaluatorSet.get``).
        seed: shard ``i`` samples with ``seed + i`` (None: fresh entropy).
    """

    def __init__(
        self,
        config: ShardedReplayConfig,
        remote: bool,
        tasks: TaskPool,
        get: Callable[[Any], Any],
        seed: int | None = None,
    ):
        n = config.num_replay_shards
        self.config = config
        self.remote = remote
        self.tasks = tasks
        self.capacity = config.buffer_size // n
        """Rows per shard."""
        self.learning_starts = max(1, config.learning_starts // n)
        """Rows a shard must hold before it serves replay batches."""
        seeds = [None if seed is None else seed + i for i in range(n)]
        buffer = (self.capacity, config.prioritized_replay, config.prioritized_replay_alpha)
        args = [(*buffer, self.learning_starts, seed, config.frame_storage) for seed in seeds]
        self._shard_args = args
        self.generation = [0] * n
        """Per shard: how many times it was recreated (tags replayed batches)."""
        self.num_replay_shard_restarts = 0
        if remote:
            self._shard_class = ReplayShard.as_remote(config.num_cpus_per_replay_shard)
            self.shards: list[Any] = [self._shard_class.remote(*a) for a in args]
            get([s.stats.remote() for s in self.shards])  # started now, not lazily
        else:
            self.shards = [ReplayShard(*a) for a in args]
        self.adds = TaskPool(config.max_adds_in_flight_per_shard)
        self.waiting: deque[tuple[Any, Any, Any, int]] = deque()
        """Sampled batches not yet handed to a shard: ``(tag, batch, priorities, rows)``."""
        self.sizes = [0] * n
        self.learning_started = False
        self.credit = 0.0
        """Rows the learner may still be given (the ``replay_ratio`` budget)."""
        self.num_samples_dropped = 0
        self._next_add = 0  # round-robin pointers
        self._next_replay = 0

    # -- samples in --------------------------------------------------------------------
    def add(self, batch: SampleBatch, priorities: np.ndarray | None) -> None:
        """In-process: store ``batch`` in the next shard."""
        shard = self._next_add
        self._next_add = (shard + 1) % len(self.shards)
        self._stored(shard, self.shards[shard].add_batch(batch, priorities), batch.count)

    def submit(self, tag: Any, batch_ref: Any, priorities_ref: Any, rows: int) -> None:
        """Queue a remotely sampled batch (object refs) for the next ``route``."""
        self.waiting.append((tag, batch_ref, priorities_ref, rows))

    def route(self) -> list[Any]:
        """Hand waiting batches to shards round-robin, skipping saturated shards.

        Returns the tags of the batches handed over; the others keep waiting (as refs).
        """
        n, routed = len(self.shards), []
        while self.waiting:
            order = [(self._next_add + k) % n for k in range(n)]
            free = [s for s in order if self.adds.has_capacity(self.shards[s])]
            if not free:
                break
            shard = free[0]
            self._next_add = (shard + 1) % n
            tag, batch_ref, priorities_ref, rows = self.waiting.popleft()
            actor = self.shards[shard]
            ref = actor.add_batch.remote(batch_ref, priorities_ref)
            self.adds.add(actor, ref, (shard, self.generation[shard], rows))
            routed.append(tag)
        return routed

    def poll_adds(self) -> None:
        """Account for every add the shards acknowledged since the last call."""
        for done in self.adds.poll():
            shard, generation, rows = done.tag
            if generation != self.generation[shard]:
                continue  # an add to a shard that was lost since
            if done.error is not None:
                self._failed(shard, done.error, rows)
            else:
                self._stored(shard, done.value, rows)

    def _stored(self, shard: int, size: int, rows: int) -> None:
        self.sizes[shard] = size
        if size >= self.learning_starts:
            self.learning_started = True
        if self.learning_started:
            self.credit += self.config.replay_ratio * rows

    def _failed(self, shard: int, error: BaseException, rows: int = 0) -> None:
        import ray.exceptions as rex

        if rows and isinstance(error, rex.ObjectLostError):  # the sample was lost, not the shard
            self.num_samples_dropped += rows
            return
        if not (self.remote and isinstance(error, rex.RayActorError)):
            raise RuntimeError(f"apex: replay shard {shard} failed: {error!r}") from error
        self.num_samples_dropped += rows
        self._recreate(shard)

    def _recreate(self, shard: int) -> None:
        """Replace lost shard actor ``shard`` by a new, empty one (same settings)."""
        import ray

        old = self.shards[shard]
        with contextlib.suppress(Exception):  # already gone
            ray.kill(old, no_restart=True)
        self.adds.mark_dead(old)  # adds and replays in flight on it are lost
        self.tasks.mark_dead(old)
        self.shards[shard] = self._shard_class.remote(*self._shard_args[shard])
        self.generation[shard] += 1
        self.sizes[shard] = 0
        self.num_replay_shard_restarts += 1

    # -- replay out --------------------------------------------------------------------
    def _targets(self, has_room: Callable[[int], bool]) -> Iterator[int]:
        """Shards to fetch one replay batch from next (round-robin over ready shards).

        Each yielded shard spends ``train_batch_size`` rows of the credit; it stops when
        the credit runs out or no ready shard ``has_room``.
        """
        size, n = self.config.train_batch_size, len(self.shards)
        skipped = 0
        while self.learning_started and self.credit >= size and skipped < n:
            shard = self._next_replay
            self._next_replay = (shard + 1) % n
            if self.sizes[shard] >= self.learning_starts and has_room(shard):
                self.credit -= size
                skipped = 0
                yield shard
            else:
                skipped += 1

    def request_replays(self, beta: float) -> None:
        """Keep up to ``replay_requests_in_flight_per_shard`` replay tasks per ready shard."""
        limit, size = self.config.replay_requests_in_flight_per_shard, self.config.train_batch_size
        for shard in self._targets(lambda s: self.tasks.count(self.shards[s]) < limit):
            actor = self.shards[shard]
            key = (shard, self.generation[shard])
            self.tasks.add(actor, actor.replay.remote(size, beta), tag=(ApexTask.REPLAY, key))

    def replay_local(
        self, beta: float, has_room: Callable[[], bool]
    ) -> Iterator[tuple[int, SampleBatch]]:
        """In-process: ``(key, batch)`` replayed within the credit while ``has_room()``."""
        for shard in self._targets(lambda _: has_room()):
            item = self.replayed(
                (shard, self.generation[shard]),
                self.shards[shard].replay(self.config.train_batch_size, beta),
            )
            if item is not None:
                yield item

    def replayed(
        self, key: tuple[int, int], batch: SampleBatch | None, error: BaseException | None = None
    ) -> tuple[tuple[int, int], SampleBatch] | None:
        """A finished replay request from shard ``key = (shard, generation)``: ``(key,
        batch)`` to learn on, or None (not ready, or the shard was lost)."""
        shard, generation = key
        if error is not None:
            if generation == self.generation[shard]:
                self._failed(shard, error)
            return None
        if batch is None:  # the shard was not ready after all: give the credit back
            self.credit += self.config.train_batch_size
            return None
        return key, batch

    def update_priorities(
        self, key: tuple[int, int], indexes: np.ndarray, td_error: np.ndarray
    ) -> None:
        """Send ``|td_error| + eps`` of replayed rows back to their shard (prioritized only;
        dropped if the shard was recreated since: the rows are gone).

        Remote calls are fire-and-forget yet bounded: a shard runs the driver's calls in
        order, so these are done before that shard's next replay batch returns.
        """
        shard, generation = key
        if not self.config.prioritized_replay or generation != self.generation[shard]:
            return
        priorities = np.abs(td_error) + self.config.prioritized_replay_eps
        if self.remote:
            self.shards[shard].update_priorities.remote(indexes, priorities)
        else:
            self.shards[shard].update_priorities(indexes, priorities)

    # -- reporting and teardown ----------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Rows stored, adds and replays in flight, batches waiting for a shard."""
        return {
            "replay_buffer_size": sum(self.sizes),
            "add_requests_in_flight": len(self.adds),
            "replay_requests_in_flight": sum(map(self.tasks.count, self.shards)),
            "batches_waiting_for_shard": len(self.waiting),
            "num_samples_dropped": self.num_samples_dropped,
            "num_replay_shard_restarts": self.num_replay_shard_restarts,
        }

    def stop(self) -> None:
        """Forget pending adds and kill the shard actors."""
        self.adds.drain()
        self.waiting.clear()
        if self.remote:
            import ray

            for shard in self.shards:
                ray.kill(shard)
        self.shards = []
