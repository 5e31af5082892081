"""Background sampling: a thread keeps a bounded queue of sample batches filled.

A3C-style evaluators (Mnih et al. 2016; RLlib's ``sample_async``) sample while the
driver is busy with their last gradient, which cuts the request-to-gradient latency to
the gradient computation alone.  The batches are sampled with whatever weights the
evaluator held at the time (bounded policy lag: at most ``max_queued`` batches old).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class SampleQueue:
    """Runs ``sample_fn`` in a daemon thread under ``lock`` and queues its results.

    At most ``max_queued`` batches exist ahead of the consumer, counting the one being
    sampled: the thread reserves a slot before it samples and ``get`` frees one.  So a
    batch is at most ``max_queued`` weight versions old when it is taken (a thread that
    sampled on while the queue was full would add one more version of lag).

    ``lock`` must also guard every other use of the policy, filters and episode list
    in the owning evaluator (weights are never swapped mid-fragment).  An exception in
    the thread is re-raised by ``get`` once the batches sampled before it are taken.
    """

    def __init__(self, sample_fn: Callable[[], Any], lock: threading.RLock, max_queued: int = 1):
        if max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {max_queued}")
        self._sample_fn = sample_fn
        self._lock = lock
        self._queue: queue.Queue = queue.Queue()  # bounded by the slots
        self._slots = threading.Semaphore(max_queued)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hierl-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._slots.acquire(timeout=0.1):
                    continue
                with self._lock:
                    batch = self._sample_fn()
                self._queue.put(batch)
        except BaseException as e:  # surfaced to the caller of get()
            self._error = e

    def qsize(self) -> int:
        """Batches waiting."""
        return self._queue.qsize()

    def get(self, timeout_s: float | None = None) -> Any:
        """The oldest queued batch (blocks until one is ready).

        Batches sampled before a failure of the thread are returned first; once the
        queue is empty, the thread's exception is raised.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                return self._take(block=False)
            except queue.Empty:
                if self._error is not None:
                    raise self._error from None
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"no sample within {timeout_s} s")
            try:
                return self._take(block=True, timeout=left)
            except queue.Empty:
                continue

    def _take(self, block: bool, timeout: float | None = None) -> Any:
        batch = self._queue.get(block=block, timeout=timeout)
        self._slots.release()  # the thread may sample the next one (with current weights)
        return batch

    def stop(self) -> None:
        """Stop the thread (after its current fragment) and wait for it."""
        self._stop.set()
        self._thread.join(timeout=30)
