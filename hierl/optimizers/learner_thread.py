"""A learner thread: updates a policy on queued batches beside the driver's event loop.

Ape-X (Horgan et al. 2018, §3 and Alg. 2) learns on replayed batches and returns new
priorities; IMPALA (Espeholt et al. 2018, §3) learns on trajectories as they arrive from
the actors.  Both run their learner in a thread of the driver process so the
(GIL-releasing) torch update overlaps with the driver's Ray bookkeeping.  What one update
does is the ``learn`` function the optimizer passes.

How an optimizer drives it:

    def learn(tag, batch):                              # one update
        stats = policy.learn_on_batch(batch)
        return stats, (tag, something)                  # output None: nothing queued
    learner = LearnerThread(learn, inqueue_size=16)
    learner.start()
    learner.feed(pending)                               # bounded: never blocks
    for out in learner.drain_outqueue(): ...            # what learn returned
    learner.check()                                     # re-raises a failure of the thread
    learner.stop()
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from hierl.optimizers.timers import TimerStat
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, UpdateStats
from hierl.sample_batch import SampleBatch

LearnFn = Callable[[Any, SampleBatch], tuple[Mapping[str, float], Any]]
"""``learn(tag, batch) -> (stats, output)``: one update on ``batch`` (queued with
``tag``); ``output`` goes to the out-queue unless it is None."""


@dataclasses.dataclass
class LearnerSpan:
    """What the learner did while an optimizer's ``step()`` ran it (``run_rounds``)."""

    elapsed_s: float
    updates: int
    rows: int
    busy_s: float
    """Seconds spent inside ``learn``."""

    def rates(self, env_steps: int) -> dict[str, float]:
        """Per-second rates over the span: ``env_steps`` delivered by the samplers
        (``sample_steps_per_s``), learner updates and rows, and the busy fraction."""
        elapsed = max(self.elapsed_s, 1e-9)
        return {
            "sample_steps_per_s": env_steps / elapsed,
            "learner_updates_per_s": self.updates / elapsed,
            "learner_rows_per_s": self.rows / elapsed,
            "learner_busy_frac": self.busy_s / elapsed,
        }


class LearnerThread(threading.Thread):
    """Daemon thread running ``learn(tag, batch)`` on queued ``(tag, batch)`` items.

    Args:
        learn: one update (see ``LearnFn``).
        inqueue_size: bound of ``inqueue`` (batches waiting to be learned).
        outqueue_size: bound of ``outqueue`` (outputs waiting for the driver);
            when it is full the thread waits, so an idle driver stalls the learner
            instead of growing memory.
        poll_s: how often a waiting thread re-checks for ``stop``/``pause``.

    Every update holds ``lock``; hold it too to read or change the policy from another
    thread (``get_weights``, sampling with it).  ``pause()`` returns once no update is
    running and none starts until ``resume()``, so the policy is stable in between
    (checkpoints, serving).  The thread starts active.  An exception inside the thread
    ends it; ``check()`` re-raises it on the caller's side.
    """

    def __init__(
        self,
        learn: LearnFn,
        inqueue_size: int = 16,
        outqueue_size: int = 16,
        poll_s: float = 0.05,
    ):
        super().__init__(name="hierl-learner", daemon=True)
        for name, size in (("inqueue_size", inqueue_size), ("outqueue_size", outqueue_size)):
            if size < 1:
                raise ValueError(f"{name} must be >= 1, got {size}")
        self.learn = learn
        self.inqueue: queue.Queue[tuple[Any, SampleBatch]] = queue.Queue(maxsize=inqueue_size)
        self.outqueue: queue.Queue[Any] = queue.Queue(maxsize=outqueue_size)
        self.lock = threading.Lock()
        self.poll_s = poll_s
        self.learn_timer = TimerStat()
        """Time spent inside ``learn``."""
        self.num_updates = 0
        self.num_rows_trained = 0
        self.error: BaseException | None = None
        self._item: tuple[Any, SampleBatch] | None = None
        self._active = threading.Event()
        self._active.set()
        self._stopped = threading.Event()
        self._stats = UpdateStats()
        self._last_stats: dict[str, float] = {}

    # -- thread body -------------------------------------------------------------------
    def run(self) -> None:
        """Take batches, learn, queue the outputs; record any exception and end."""
        try:
            while not self._stopped.is_set():
                if not self._active.wait(self.poll_s):
                    continue
                if self._item is None:
                    try:
                        self._item = self.inqueue.get(timeout=self.poll_s)
                    except queue.Empty:
                        continue
                with self.lock:
                    if not self._active.is_set():  # paused after we took the item: keep it
                        continue
                    tag, batch = self._item
                    self._item = None
                    with self.learn_timer:
                        stats, output = self.learn(tag, batch)
                    self.num_updates += 1
                    self.num_rows_trained += batch.count
                    self._stats.add(stats)
                del batch  # CRUCIAL: release the batch before blocking on the queue
                if output is not None:
                    self._put_out(output)
                del output
        except BaseException as e:  # surfaced by check()
            self.error = e

    def _put_out(self, item: Any) -> None:
        while not self._stopped.is_set():
            try:
                self.outqueue.put(item, timeout=self.poll_s)
                return
            except queue.Full:
                continue

    # -- control from the driver -------------------------------------------------------
    def pause(self) -> None:
        """Stop taking new batches; returns once the update in progress (if any) is done."""
        self._active.clear()
        with self.lock:
            pass

    def resume(self) -> None:
        """Start taking batches again."""
        self._active.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread and wait for it (at most ``timeout_s``)."""
        self._stopped.set()
        if self.is_alive():
            self.join(timeout_s)

    def run_rounds(self, one_round: Callable[[], None], min_seconds: float) -> LearnerSpan:
        """Learn while ``one_round()`` (the driver's event loop) runs, repeatedly, for at
        least ``min_seconds`` (and at least once); paused again on return.  Raises the
        thread's failure (``check``) as soon as a round sees it."""
        self.check()
        start = time.perf_counter()
        updates, rows, busy = self.num_updates, self.num_rows_trained, self.learn_timer.total_s
        self.resume()
        try:
            while True:
                one_round()
                self.check()
                if time.perf_counter() - start >= min_seconds:
                    break
        finally:
            self.pause()
        return LearnerSpan(
            time.perf_counter() - start,
            self.num_updates - updates,
            self.num_rows_trained - rows,
            self.learn_timer.total_s - busy,
        )

    def check(self) -> None:
        """Raise RuntimeError (from the original exception) if the thread failed or died."""
        if self.error is not None:
            raise RuntimeError(
                f"learner thread failed after {self.num_updates} updates: {self.error!r}"
            ) from self.error
        if self.ident is not None and not self.is_alive() and not self._stopped.is_set():
            raise RuntimeError("learner thread ended unexpectedly")

    def feed(self, pending: deque[tuple[Any, SampleBatch]]) -> None:
        """Move ``(tag, batch)`` items from the front of ``pending`` into ``inqueue``.

        Never blocks: what does not fit stays in ``pending`` for a later call.
        """
        while pending:
            try:
                self.inqueue.put_nowait(pending[0])
            except queue.Full:
                return
            pending.popleft()

    def drain_outqueue(self) -> list[Any]:
        """All outputs queued so far (non-blocking)."""
        out = []
        while True:
            try:
                out.append(self.outqueue.get_nowait())
            except queue.Empty:
                return out

    def pop_stats(self) -> dict[str, float]:
        """Learner statistics averaged over the updates since the last call
        (``UpdateStats``: refused updates counted, not averaged).

        Without new updates, the previous average is returned again ({} before any),
        with no refused updates.
        """
        with self.lock:
            if self._stats.applied or self._stats.skipped:
                self._last_stats = self._stats.result()
                self._stats = UpdateStats()
                return dict(self._last_stats)
            if not self._last_stats:
                return {}
            return {**self._last_stats, NONFINITE_GRADS_SKIPPED: 0.0}

    @property
    def num_pending(self) -> int:
        """Batches queued or taken but not yet learned."""
        return self.inqueue.qsize() + (self._item is not None)
