"""``apex``: Ape-X, distributed prioritized experience replay.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR 2018,
https://arxiv.org/abs/1803.00933), Algorithms 1 (actor) and 2 (learner), in the shape of
RLlib's original ``ApexOptimizer`` (ICML 2018, §3.3):

* every evaluator (the paper's actor) explores with its own epsilon,
  ``0.4 ** (1 + 7 (i - 1) / (N - 1))`` for evaluator ``i`` of ``N`` (§4.1), computes the
  initial priorities of what it samples and pushes the batch straight into one of
  ``num_replay_shards`` replay actors -- the driver only passes object refs on;
* the driver prefetches prioritized batches from the shards into the bounded queue of
  a ``LearnerThread``, returns the learner's new priorities to the shard each batch
  came from, and gives an evaluator fresh weights once it has sampled
  ``max_weight_sync_delay`` env steps with its current ones;
* every stage is pipelined through bounded pools of in-flight Ray tasks and bounded
  queues, and buffers are preallocated, so memory stays flat however long it runs.

With no remote evaluators the local evaluator samples inside the loop and the shards are
plain in-process objects (no Ray needed); the learner thread runs all the same.
"""

from __future__ import annotations

import dataclasses
import queue
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.base import PolicyOptimizer
from hierl.optimizers.learner_thread import LearnerThread
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.replay import ReplayConfig, ReplayOptimizer, sample_with_priorities
from hierl.optimizers.replay_buffer import make_replay_buffer
from hierl.optimizers.task_pool import Finished, TaskPool, is_actor_death
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class ApexConfig(ReplayConfig):
    """Settings of the ``apex`` optimizer; ``buffer_size`` is the total over all shards."""

    replay_ratio: float = 1.0
    """Most rows replayed per env step sampled once learning has started.  The learner
    never runs ahead of this; it may fall behind (Ape-X's learner is not synchronised
    with the actors).  Raise it to let a fast learner replay more."""
    num_replay_shards: int = 4
    """Replay actors; each holds ``buffer_size // num_replay_shards`` rows and starts
    serving batches once it holds ``learning_starts // num_replay_shards``."""
    num_cpus_per_replay_shard: float = 0.0
    """CPUs each replay actor reserves (0: it shares the machine's)."""
    max_sample_requests_in_flight_per_evaluator: int = 2
    """Sample tasks queued on each evaluator (the next one waits while one runs)."""
    max_adds_in_flight_per_shard: int = 4
    """Batches sent to one shard and not yet stored; when every shard is this busy,
    finished samples wait (as object refs) and their evaluators get no new task."""
    replay_requests_in_flight_per_shard: int = 2
    """Replay batches being fetched from each shard at once (the learner's prefetch)."""
    learner_queue_size: int = 16
    """Bound of the learner thread's input (replay batches) and output (priorities) queues."""
    max_weight_sync_delay: int = 400
    """Env steps an evaluator samples before it receives fresh weights."""
    per_worker_epsilon: bool = True
    """Pin evaluator i of N to epsilon ``epsilon_base ** (1 + epsilon_alpha (i - 1) / (N - 1))``
    (its policy's ``set_epsilon``, when it has one); the local evaluator is i = 1 of 1 when
    it samples."""
    epsilon_base: float = 0.4
    """The ladder's largest epsilon (the paper's 0.4)."""
    epsilon_alpha: float = 7.0
    """The ladder's exponent range (the paper's 7): the last evaluator gets
    ``epsilon_base ** (1 + epsilon_alpha)``."""
    min_step_time_s: float = 1.0
    """Each ``step()`` runs the event loop at least this long (and at least one round)."""
    wait_timeout_s: float = 0.01
    """Longest the driver blocks in ``ray.wait`` per round (it wakes up for the first
    finished sample or replay task); bounds the delay of priority updates."""

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = (
            "num_replay_shards",
            "max_sample_requests_in_flight_per_evaluator",
            "max_adds_in_flight_per_shard",
            "replay_requests_in_flight_per_shard",
            "learner_queue_size",
            "max_weight_sync_delay",
        )
        for name in positive:
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        self.check(
            "buffer_size",
            self.buffer_size >= self.num_replay_shards,
            f"must be >= num_replay_shards={self.num_replay_shards} (one row per shard)",
        )
        self.check("num_cpus_per_replay_shard", self.num_cpus_per_replay_shard >= 0, ">= 0")
        self.check("epsilon_base", 0 <= self.epsilon_base <= 1, "must be in [0, 1]")
        self.check("epsilon_alpha", self.epsilon_alpha >= 0, "must be >= 0")
        self.check("min_step_time_s", self.min_step_time_s >= 0, "must be >= 0")
        self.check("wait_timeout_s", self.wait_timeout_s > 0, "must be > 0")


def epsilon_ladder(index: int, num: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X exploration epsilon of evaluator ``index`` (1-based) out of ``num`` (§4.1)."""
    if not 1 <= index <= num:
        raise ValueError(f"evaluator index must be in [1, {num}], got {index}")
    return base ** (1 + alpha * (index - 1) / max(num - 1, 1))


def pin_epsilon(evaluator: PolicyEvaluator, epsilon: float) -> bool:
    """Evaluator side: ``set_epsilon(epsilon)`` on each policy that has it; True if any."""

    def pin(policy: Any, _policy_id: str) -> bool:
        if callable(getattr(policy, "set_epsilon", None)):
            policy.set_epsilon(epsilon)
            return True
        return False

    return any(evaluator.foreach_policy(pin))


def sample_for_replay(
    evaluator: PolicyEvaluator, prioritized: bool
) -> tuple[SampleBatch, np.ndarray | None, tuple[int, float]]:
    """Evaluator side: a batch, its initial priorities and ``(env steps, seconds taken)``.

    Called with ``num_returns=3`` so the driver fetches only the small last value and
    hands the first two refs to a replay shard.
    """
    start = time.perf_counter()
    batch, priorities = sample_with_priorities(evaluator, prioritized)
    return batch, priorities, (batch.count, time.perf_counter() - start)


class ReplayShard:
    """One slice of the replay memory: a preallocated (prioritized) buffer.

    Runs as a Ray actor (``ReplayShard.as_remote(num_cpus)``) or, in-process, as a plain
    object.  ``capacity``, ``prioritized``, ``alpha`` and ``seed`` configure the buffer
    (``make_replay_buffer``); ``replay`` returns None until it holds ``learning_starts``
    rows.
    """

    def __init__(
        self,
        capacity: int,
        prioritized: bool,
        alpha: float,
        learning_starts: int,
        seed: int | None = None,
    ):
        self.buffer = make_replay_buffer(capacity, prioritized, alpha=alpha, seed=seed)
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
        """The buffer's statistics plus its ``capacity``."""
        return {**self.buffer.stats(), "capacity": self.buffer.capacity}


def _poll(pool: TaskPool, timeout_s: float = 0.0) -> list[Finished]:
    """Every finished task of ``pool``, waiting up to ``timeout_s`` for the first one."""
    done = pool.wait(timeout_s=timeout_s) if timeout_s > 0 else []
    return done + pool.wait(timeout_s=0, num_returns=max(1, len(pool)))


@register_optimizer
class ApexOptimizer(PolicyOptimizer):
    """Evaluators → replay shards → learner thread, pipelined; see the module docstring.

    Timers: ``sample`` (producing one batch with its priorities, measured where it
    happens), ``learn`` (one learner-thread update), ``wait`` (the driver waiting for
    and fetching finished tasks), ``route`` (handing batches to shards, relaunching samples),
    ``replay`` (fetching replay batches, returning priorities) and ``sync`` (weights).
    """

    name = "apex"
    config_class = ApexConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        n = cfg.num_replay_shards
        self.shard_capacity = cfg.buffer_size // n
        self.shard_learning_starts = max(1, cfg.learning_starts // n)
        shard_args = [
            (
                self.shard_capacity,
                cfg.prioritized_replay,
                cfg.prioritized_replay_alpha,
                self.shard_learning_starts,
                None if cfg.seed is None else cfg.seed + i,
            )
            for i in range(n)
        ]
        if self.remote_evaluators:
            shard_cls = ReplayShard.as_remote(cfg.num_cpus_per_replay_shard)
            self.shards: list[Any] = [shard_cls.remote(*a) for a in shard_args]
            self.evaluators.get([s.stats.remote() for s in self.shards])  # started, not lazy
        else:
            self.shards = [ReplayShard(*a) for a in shard_args]

        # The epsilon pinned on each sampling evaluator (empty without a ladder).
        self.epsilons = self._pin_epsilons() if cfg.per_worker_epsilon else []

        self.learner = LearnerThread(
            self.local_evaluator.policy, cfg.learner_queue_size, cfg.learner_queue_size
        )
        self.timers["learn"] = self.learner.learn_timer
        for phase in ("sample", "wait", "route", "replay", "sync"):
            self.timer(phase)
        self.learner.pause()  # it learns only inside step(): the policy is stable between
        self.learner.start()

        num = len(self.remote_evaluators)
        # Sample tasks (on evaluators) and replay tasks (on shards) share one pool, so a
        # single ray.wait wakes the driver for either; per-kind bounds are checked below.
        self._tasks = TaskPool(
            max(
                cfg.max_sample_requests_in_flight_per_evaluator,
                cfg.replay_requests_in_flight_per_shard,
            )
        )
        self._add_tasks = TaskPool(cfg.max_adds_in_flight_per_shard)
        self._outstanding = [0] * num  # per evaluator: sample tasks launched, not yet routed
        self._steps_since_sync = [0] * num
        self._to_route: deque[tuple[int, Any, Any, int]] = deque()
        self._to_learn: deque[tuple[int, SampleBatch]] = deque()
        self._shard_sizes = [0] * n
        self._next_shard = 0  # round-robin pointers: routing samples, fetching replays
        self._next_replay = 0
        self._learning_started = False
        self._replay_credit = 0.0  # rows the learner may still be given (replay_ratio cap)
        self._weights: tuple[int, Any] | None = None  # (learner version, object ref)
        self._rows_trained_seen = 0
        self.num_weight_syncs = 0
        self.num_samples_dropped = 0
        self._rates: dict[str, float] = {}

    beta = ReplayOptimizer.beta  # the same annealed importance-sampling exponent

    def _pin_epsilons(self) -> list[float]:
        samplers = self.remote_evaluators or [self.local_evaluator]
        cfg, num = self.config, len(samplers)
        eps = [
            epsilon_ladder(i, num, cfg.epsilon_base, cfg.epsilon_alpha) for i in range(1, num + 1)
        ]
        if self.remote_evaluators:
            pinned = self.evaluators.get(
                [e.apply.remote(pin_epsilon, x) for e, x in zip(samplers, eps, strict=True)]
            )
        else:
            pinned = [pin_epsilon(self.local_evaluator, eps[0])]
        return eps if any(pinned) else []  # policies without ``set_epsilon``: no ladder

    # -- the event loop ----------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """Run the event loop for ``min_step_time_s``; returns the learner's mean stats."""
        self.learner.check()
        start = time.perf_counter()
        sampled0, updates0 = self.num_steps_sampled, self.learner.num_updates
        rows0, busy0 = self.learner.num_rows_trained, self.learner.learn_timer.total_s
        self._weights = None  # the local weights may have been set between steps
        self.learner.resume()
        try:
            while True:
                if self.remote_evaluators:
                    self._remote_round()
                else:
                    self._local_round()
                self.learner.check()
                if time.perf_counter() - start >= self.config.min_step_time_s:
                    break
        finally:
            self.learner.pause()
        self._send_priorities()
        self.local_evaluator.set_global_vars({"timestep": self.num_steps_sampled})
        learner = self.learner
        self.num_steps_trained += learner.num_rows_trained - self._rows_trained_seen
        self._rows_trained_seen = learner.num_rows_trained
        elapsed = max(time.perf_counter() - start, 1e-9)
        self._rates = {
            "sample_steps_per_s": (self.num_steps_sampled - sampled0) / elapsed,
            "learner_updates_per_s": (learner.num_updates - updates0) / elapsed,
            "learner_rows_per_s": (learner.num_rows_trained - rows0) / elapsed,
            "learner_busy_frac": (learner.learn_timer.total_s - busy0) / elapsed,
        }
        self.learner_stats = learner.pop_stats()
        return self.learner_stats

    def _remote_round(self) -> None:
        """One pass over every event source, blocking (GIL released) until a task is done.

        CRUCIAL: never spin.  The learner thread needs the GIL between its torch ops; a
        driver polling without blocking would delay each of them by a GIL switch interval.
        """
        adds = _poll(self._add_tasks)
        for done in adds:
            shard, count = done.tag
            if done.error is not None:
                self._shard_failed(shard, done.error, count)
            else:
                self._stored(shard, done.value, count)
        timeout = self.config.wait_timeout_s
        with self.timer("wait"):
            if len(self._tasks):
                finished = _poll(self._tasks, timeout)
            else:  # everything waits on the shards' acknowledgements
                finished = []
                time.sleep(timeout)
        with self.timer("replay"):
            for done in finished:
                if done.tag[0] == "replay":
                    if done.error is not None:
                        self._shard_failed(done.tag[1], done.error)
                    self._replayed(done.tag[1], done.value)
            self._feed_learner()
            self._send_priorities()
            self._request_replays()
        with self.timer("route"):
            self._receive_samples([done for done in finished if done.tag[0] == "sample"])
            self._route_samples()
            self._launch_samples()

    def _local_round(self) -> None:
        """In-process: sample on the local evaluator, store, feed the learner."""
        cfg = self.config
        # CRUCIAL: hold the learner's lock, the learner thread updates this very policy.
        with self.learner.lock, self.timer("sample"):
            self.local_evaluator.set_global_vars({"timestep": self.num_steps_sampled})
            batch, priorities = sample_with_priorities(self.local_evaluator, cfg.prioritized_replay)
        shard = self._next_shard
        self._next_shard = (shard + 1) % len(self.shards)
        self.num_steps_sampled += batch.count
        self._stored(shard, self.shards[shard].add_batch(batch, priorities), batch.count)
        with self.timer("replay"):
            self._send_priorities()
            beta = self.beta
            for shard in self._replay_targets(lambda _: not self.learner.inqueue.full()):
                self._replayed(shard, self.shards[shard].replay(cfg.train_batch_size, beta))
                self._feed_learner()

    # -- samples → shards ----------------------------------------------------------------
    def _receive_samples(self, finished: list[Finished]) -> None:
        for done in finished:
            _, index, batch_ref, priorities_ref = done.tag
            if done.error is not None:
                if not is_actor_death(done.error):
                    raise RuntimeError(
                        f"apex: sampling on remote evaluator {index + 1} failed: {done.error!r}"
                    ) from done.error
                if self.num_dead_evaluators == len(self.remote_evaluators):
                    raise RuntimeError(
                        f"apex: all {len(self.remote_evaluators)} remote evaluators have died"
                    ) from done.error
                continue
            count, sample_s = done.value
            self.timer("sample").push(sample_s)
            self.num_steps_sampled += count
            self._steps_since_sync[index] += count
            self._to_route.append((index, batch_ref, priorities_ref, count))

    def _route_samples(self) -> None:
        """Hand finished samples to shards round-robin, skipping saturated shards."""
        n = len(self.shards)
        while self._to_route:
            order = [(self._next_shard + k) % n for k in range(n)]
            free = [s for s in order if self._add_tasks.has_capacity(self.shards[s])]
            if not free:
                return  # keep the refs; their evaluators get no new task meanwhile
            shard = free[0]
            self._next_shard = (shard + 1) % n
            index, batch_ref, priorities_ref, count = self._to_route.popleft()
            actor = self.shards[shard]
            ref = actor.add_batch.remote(batch_ref, priorities_ref)
            self._add_tasks.add(actor, ref, tag=(shard, count))
            self._outstanding[index] -= 1

    def _launch_samples(self) -> None:
        cfg = self.config
        for index, evaluator in enumerate(self.remote_evaluators):
            if evaluator in self._tasks.dead:
                continue
            if self._steps_since_sync[index] >= cfg.max_weight_sync_delay:
                self._sync_weights(index, evaluator)
            while self._outstanding[index] < cfg.max_sample_requests_in_flight_per_evaluator:
                method = evaluator.apply.options(num_returns=3)
                batch_ref, priorities_ref, info_ref = method.remote(
                    sample_for_replay, cfg.prioritized_replay
                )
                tag = ("sample", index, batch_ref, priorities_ref)
                self._tasks.add(evaluator, info_ref, tag=tag)
                self._outstanding[index] += 1

    def _sync_weights(self, index: int, evaluator: Any) -> None:
        """Send the learner's current weights: one ``ray.put`` per learner version."""
        import ray

        with self.timer("sync"):
            if self._weights is None or self._weights[0] != self.learner.num_updates:
                with self.learner.lock:
                    version = self.learner.num_updates
                    weights = self.local_evaluator.get_weights()
                self._weights = (version, ray.put(weights))
            evaluator.set_weights.remote(self._weights[1], {"timestep": self.num_steps_sampled})
        self._steps_since_sync[index] = 0
        self.num_weight_syncs += 1

    def _stored(self, shard: int, size: int, count: int) -> None:
        """A shard acknowledged ``count`` new rows and now holds ``size``."""
        self._shard_sizes[shard] = size
        if size >= self.shard_learning_starts:
            self._learning_started = True
        if self._learning_started:
            self._replay_credit += self.config.replay_ratio * count

    def _shard_failed(self, shard: int, error: BaseException, count: int = 0) -> None:
        import ray.exceptions as rex

        if count and isinstance(error, rex.ObjectLostError):  # the sample was lost, not the shard
            self.num_samples_dropped += count
            return
        raise RuntimeError(f"apex: replay shard {shard} failed: {error!r}") from error

    # -- shards → learner → shards -------------------------------------------------------
    def _replay_targets(self, has_room: Callable[[int], bool]) -> Iterator[int]:
        """Shards to fetch one replay batch from next (round-robin over ready shards).

        Each yielded shard spends ``train_batch_size`` rows of the ``replay_ratio`` credit;
        it stops when the credit runs out or no ready shard ``has_room``.
        """
        size, n = self.config.train_batch_size, len(self.shards)
        skipped = 0
        while self._learning_started and self._replay_credit >= size and skipped < n:
            shard = self._next_replay
            self._next_replay = (shard + 1) % n
            if self._shard_sizes[shard] >= self.shard_learning_starts and has_room(shard):
                self._replay_credit -= size
                skipped = 0
                yield shard
            else:
                skipped += 1

    def _request_replays(self) -> None:
        """Keep up to ``replay_requests_in_flight_per_shard`` replay tasks per ready shard."""
        if self._to_learn:
            return  # the learner is behind: prefetch nothing more
        beta, limit = self.beta, self.config.replay_requests_in_flight_per_shard
        for shard in self._replay_targets(lambda s: self._tasks.count(self.shards[s]) < limit):
            actor = self.shards[shard]
            ref = actor.replay.remote(self.config.train_batch_size, beta)
            self._tasks.add(actor, ref, tag=("replay", shard))

    def _replayed(self, shard: int, batch: SampleBatch | None) -> None:
        if batch is None:  # the shard was not ready after all: give the credit back
            self._replay_credit += self.config.train_batch_size
        else:
            self._to_learn.append((shard, batch))

    def _feed_learner(self) -> None:
        """Move fetched replay batches into the learner's queue while it has room."""
        while self._to_learn:
            try:
                self.learner.inqueue.put_nowait(self._to_learn[0])
            except queue.Full:
                return  # keep them for the next round: nothing is dropped or blocked on
            self._to_learn.popleft()

    def _send_priorities(self) -> None:
        """Return the learner's new priorities to the shards (uniform replay: drop them)."""
        outputs = self.learner.drain_outqueue()
        if not self.config.prioritized_replay:
            return
        eps = self.config.prioritized_replay_eps
        for out in outputs:
            priorities = np.abs(out.td_error) + eps
            shard = self.shards[out.tag]
            if self.remote_evaluators:
                # Fire and forget: bounded, because a shard runs a driver's calls in order,
                # so these are done before the next replay batch of that shard returns.
                shard.update_priorities.remote(out.indexes, priorities)
            else:
                shard.update_priorities(out.indexes, priorities)

    # -- reporting and teardown ----------------------------------------------------------
    @property
    def num_dead_evaluators(self) -> int:
        """Remote evaluators found dead (they get no more tasks)."""
        return sum(e in self._tasks.dead for e in self.remote_evaluators)

    def stats(self) -> dict[str, float]:
        """Uniform stats plus counters, queue and in-flight sizes and honest rates.

        The rates are over the last ``step()``'s wall time: ``sample_steps_per_s`` (env
        steps the evaluators delivered), ``learner_updates_per_s`` and
        ``learner_rows_per_s`` (updates the learner thread completed) and
        ``learner_busy_frac`` (share of that time the learner spent updating).
        """
        out = {
            **super().stats(),
            "num_learner_updates": self.learner.num_updates,
            "num_weight_syncs": self.num_weight_syncs,
            "num_samples_dropped": self.num_samples_dropped,
            "num_dead_evaluators": self.num_dead_evaluators,
            "learner_queue_size": self.learner.inqueue.qsize(),
            "learner_out_queue_size": self.learner.outqueue.qsize(),
            "replay_buffer_size": sum(self._shard_sizes),
            "sample_requests_in_flight": sum(map(self._tasks.count, self.remote_evaluators)),
            "add_requests_in_flight": len(self._add_tasks),
            "replay_requests_in_flight": sum(map(self._tasks.count, self.shards)),
            "batches_waiting_for_shard": len(self._to_route),
            "batches_waiting_for_learner": len(self._to_learn),
            **self._rates,
        }
        if self.config.prioritized_replay:
            out["prioritized_replay_beta"] = self.beta
        return out

    def stop(self) -> None:
        """Stop the learner thread and kill the replay shards (the evaluators stay)."""
        self.learner.stop()
        for pool in (self._tasks, self._add_tasks):
            pool.drain()
        self._to_route.clear()
        self._to_learn.clear()
        if self.remote_evaluators:
            import ray

            for shard in self.shards:
                ray.kill(shard)
        self.shards = []
