"""``aso``: asynchronous samples, the IMPALA actor-learner pipeline.

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures" (https://arxiv.org/abs/1802.01561), §3, in the shape of
RLlib's ``AsyncSamplesOptimizer``.  Each remote evaluator keeps
``max_sample_requests_in_flight_per_evaluator`` sample tasks queued, so it samples
continuously; a finished task leaves its fragment in the object store and the driver
fetches only ``(rows, seconds)``.  Fragments are concatenated into train batches of at
least ``train_batch_size`` rows, on the driver or, with ``num_aggregation_workers``, by
aggregation actors that also decompress them.  A learner thread takes train batches from
a bounded queue and updates the driver's policy (``num_sgd_iter`` epochs of
``sgd_minibatch_size`` minibatches of whole trajectory runs; one full-batch update by
default).  Every ``broadcast_interval`` learner updates the weights go into the object
store once and travel with each evaluator's next sample task.  Batches are therefore a
few updates old when learned from (the *policy lag*, reported per fragment); the
algorithm corrects for it (V-trace).

Memory is bounded: sample tasks per evaluator, train batches waiting for the learner
(``learner_queue_size`` in the driver's backlog and as many in the learner's queue), and
no new sample task while the backlog is full (back-pressure instead of growth).  A failed
evaluator is recreated (with the current weights) or dropped by the evaluator set, a dead
aggregator is replaced and its fragments are aggregated again, and an exception in the
learner thread is raised by ``step()`` with the original as its cause.  With no remote
evaluators the local evaluator samples inside ``step()``, under the learner's lock.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections import deque
from typing import Any

import numpy as np

from hierl.config import ConfigError
from hierl.evaluators import PolicyEvaluator
from hierl.evaluators.evaluator_set import is_evaluator_failure
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.optimizers.aso.aggregators import AggregatorPool
from hierl.optimizers.base import PolicyOptimizer, single_policy_stats
from hierl.optimizers.failures import handle_failed_task
from hierl.optimizers.learner_thread import LearnerThread
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.sgd import SGDConfig, minibatch_sgd
from hierl.optimizers.task_pool import Finished, TaskPool, is_actor_death
from hierl.policy_graph import GlobalVars, LearnerStats
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class ASOConfig(SGDConfig):
    """Settings of the ``aso`` optimizer (SGD epochs and minibatches as ``local``'s)."""

    train_batch_size: int = 500
    """Rows per learner update: fragments are concatenated until at least this many."""
    max_sample_requests_in_flight_per_evaluator: int = 2
    """Sample tasks queued on each evaluator (2: it starts the next one at once)."""
    learner_queue_size: int = 4
    """Train batches waiting for the learner, in its queue and again in the driver's
    backlog; while the backlog is full, no new sample task starts."""
    broadcast_interval: int = 1
    """Learner updates between weight broadcasts to the evaluators."""
    num_aggregation_workers: int = 0
    """Aggregation actors that concatenate and decompress fragments off the driver
    (needs remote evaluators); 0: the driver does it."""
    num_cpus_per_aggregation_worker: float = 0.5
    """CPUs each aggregation actor reserves."""
    min_step_time_s: float = 1.0
    """Each ``step()`` runs the pipeline at least this long (and at least one round)."""
    wait_timeout_s: float = 0.01
    """Longest the driver blocks in ``ray.wait`` per round."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "max_sample_requests_in_flight_per_evaluator",
            "learner_queue_size",
            "broadcast_interval",
        ):
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        self.check("num_aggregation_workers", self.num_aggregation_workers >= 0, "must be >= 0")
        self.check(
            "num_cpus_per_aggregation_worker",
            self.num_cpus_per_aggregation_worker >= 0,
            "must be >= 0",
        )
        self.check("min_step_time_s", self.min_step_time_s >= 0, "must be >= 0")
        self.check("wait_timeout_s", self.wait_timeout_s > 0, "must be > 0")


class ASOTask(enum.Enum):
    """The first element of a task tag in the driver's pool."""

    SAMPLE = enum.auto()
    """``(SAMPLE, fragment_ref, behaviour_version)`` on an evaluator."""
    AGGREGATE = enum.auto()
    """``(AGGREGATE, fragment_refs, behaviour_versions)`` on an aggregator."""


AGGREGATIONS_IN_FLIGHT = 2
"""Aggregation tasks queued per aggregator."""


def sample_fragment(
    evaluator: PolicyEvaluator, weights: Any = None, global_vars: GlobalVars | None = None
) -> tuple[SampleBatch, tuple[int, float]]:
    """Evaluator side: load ``weights`` if given, sample one fragment; returns it and
    ``(rows, seconds)``.  Called with ``num_returns=2``: the driver fetches the second."""
    if weights is not None:
        evaluator.set_weights(weights, global_vars)
    start = time.perf_counter()
    batch = evaluator.sample()
    return batch, (batch.count, time.perf_counter() - start)


@register_optimizer
class AsyncSamplesOptimizer(PolicyOptimizer):
    """Evaluators sample continuously, a learner thread consumes; see the module docstring.

    Timers: ``sample`` (one fragment, measured in the evaluator), ``wait`` (the driver in
    ``ray.wait``), ``route`` (taking finished tasks, building train batches, relaunching
    samples), ``sync`` (putting weights) and ``learn`` (one learner update).
    """

    name = "aso"
    config_class = ASOConfig
    learns_from = "lagged_samples"  # not interchangeable with on-policy strategies
    supports_recurrent = True  # train batches are whole fragments: sequences stay whole

    @classmethod
    def check_config(cls, config: ASOConfig, num_evaluators: int) -> None:
        """Aggregation actors need remote evaluators."""
        if config.num_aggregation_workers and not num_evaluators:
            raise ConfigError(
                f"optimizer_config.num_aggregation_workers = {config.num_aggregation_workers}"
                " needs remote evaluators (num_evaluators >= 1); with num_evaluators = 0 "
                "the driver samples and aggregates itself: set it to 0"
            )

    @classmethod
    def actor_groups(cls, config: ASOConfig, num_evaluators: int) -> list[ActorGroup]:
        """The aggregation actors (only with remote evaluators)."""
        if not num_evaluators or not config.num_aggregation_workers:
            return []
        return [
            ActorGroup.from_settings(
                "aggregation worker",
                config,
                "num_aggregation_workers",
                "num_cpus_per_aggregation_worker",
            )
        ]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.check_config(cfg, len(self.remote_evaluators))
        self.rng = np.random.default_rng(self.seed)
        self.tasks = TaskPool(
            max(cfg.max_sample_requests_in_flight_per_evaluator, AGGREGATIONS_IN_FLIGHT)
        )
        self.aggregators: AggregatorPool | None = None
        if self.remote_evaluators and cfg.num_aggregation_workers:
            self.aggregators = AggregatorPool(
                cfg.num_aggregation_workers, cfg.num_cpus_per_aggregation_worker
            )
        self.learner = LearnerThread(self._learn, cfg.learner_queue_size, cfg.learner_queue_size)
        self.timers["learn"] = self.learner.learn_timer
        for phase in ("sample", "wait", "route", "sync"):
            self.timer(phase)
        # Fragments waiting to fill a train batch: (ref or batch, rows, behaviour version).
        self._fragments: deque[tuple[Any, int, int]] = deque()
        self._fragment_rows = 0
        self._to_learn: deque[tuple[tuple[int, ...], SampleBatch]] = deque()
        self._weights: tuple[int, Any] | None = None  # (learner version, object ref)
        self._sent_version = dict.fromkeys(self.remote_evaluators, 0)
        self._lags: list[int] = []
        self._rates: dict[str, float] = {}
        self.num_weight_syncs = 0
        self.learner.pause()  # it learns only inside step(): the policy is stable between
        self.learner.start()

    # -- the learner's update ------------------------------------------------------------
    def _learn(
        self, versions: tuple[int, ...], batch: SampleBatch
    ) -> tuple[dict[str, float], list[int]]:
        """In the learner thread: SGD on one train batch; the policy lag of each fragment
        (learner version now minus the version that sampled it)."""
        cfg = self.config
        lags = [self.learner.num_updates - v for v in versions]
        if 0 < cfg.sgd_minibatch_size < batch.count and SampleBatch.SEQ_LENS not in batch:
            batch.chop_into_sequences(batch.count)  # minibatches of whole trajectory runs
        stats = minibatch_sgd(
            self.local_evaluator.policy, batch, cfg.num_sgd_iter, cfg.sgd_minibatch_size, self.rng
        )
        return stats, lags

    # -- the event loop ------------------------------------------------------------------
    def step(self) -> LearnerStats:
        """Run the pipeline for ``min_step_time_s``; returns the learner's mean stats."""
        sampled0 = self.num_steps_sampled
        one_round = self._remote_round if self.remote_evaluators else self._local_round
        span = self.learner.run_rounds(one_round, self.config.min_step_time_s)
        lags, self._lags = self._lags + self._drain_lags(), []
        self.evaluators.set_global_vars(self.global_vars())
        self.num_steps_trained += span.rows
        self.num_updates += span.updates
        self._rates = span.rates(self.num_steps_sampled - sampled0)
        if lags:
            self._rates.update(policy_lag_mean=float(np.mean(lags)), policy_lag_max=max(lags))
        self.learner_stats = single_policy_stats(self.learner.pop_stats())
        return self.learner_stats

    def _drain_lags(self) -> list[int]:
        return [lag for lags in self.learner.drain_outqueue() for lag in lags]

    @property
    def _backlog_full(self) -> bool:
        aggregators = self.aggregators.actors if self.aggregators is not None else ()
        aggregating = sum(map(self.tasks.count, aggregators))
        return len(self._to_learn) + aggregating >= self.config.learner_queue_size

    def _remote_round(self) -> None:
        """One pass: wait (GIL released) for finished tasks, route them, relaunch.

        CRUCIAL: never spin; the learner thread needs the GIL between its torch ops.
        """
        with self.timer("wait"):
            if len(self.tasks):
                finished = self.tasks.poll(self.config.wait_timeout_s)
            else:  # back-pressure: everything waits on the learner
                finished = []
                time.sleep(self.config.wait_timeout_s)
        with self.timer("route"):
            for done in finished:
                if done.tag[0] is ASOTask.SAMPLE:
                    self._sampled(done)
                else:
                    self._aggregated(done)
            self._assemble()
            self._lags.extend(self._drain_lags())
            self.learner.feed(self._to_learn)
            self._launch()

    def _local_round(self) -> None:
        """In-process: sample on the local evaluator (the learner's policy) and feed."""
        if self._backlog_full:
            self.learner.feed(self._to_learn)
            time.sleep(self.config.wait_timeout_s)
            return
        # CRUCIAL: hold the learner's lock, the learner thread updates this very policy.
        with self.learner.lock, self.timer("sample"):
            batch = self.local_evaluator.sample()
            version = self.learner.num_updates
        self.num_steps_sampled += batch.count
        self._add_fragment(batch, batch.count, version)
        self._assemble()
        self._lags.extend(self._drain_lags())
        self.learner.feed(self._to_learn)

    def _add_fragment(self, fragment: Any, rows: int, version: int) -> None:
        self._fragments.append((fragment, rows, version))
        self._fragment_rows += rows

    def _sampled(self, done: Finished) -> None:
        """A sample task finished: keep its fragment, or hand a failed evaluator on."""
        _, fragment_ref, version = done.tag
        if done.error is None:
            rows, seconds = done.value
            self.timer("sample").push(seconds)
            self.num_steps_sampled += rows
            self._add_fragment(fragment_ref, rows, version)
            return
        if not is_evaluator_failure(done.error):
            raise RuntimeError(f"sampling failed: {done.error!r}") from done.error
        weights_version, weights = self._current_weights()
        new = handle_failed_task(self.evaluators, self.tasks, done, weights)
        if new is not None:  # recreated, and sent these weights first
            self._sent_version[new] = weights_version

    def _assemble(self) -> None:
        """Full train batches out of the waiting fragments, on an aggregator or here."""
        size = self.config.train_batch_size
        while self._fragment_rows >= size and not self._backlog_full:
            taken: list[tuple[Any, int, int]] = []
            rows = 0
            while rows < size:
                taken.append(self._fragments.popleft())
                rows += taken[-1][1]
            self._fragment_rows -= rows
            fragments = [f for f, _, _ in taken]
            versions = tuple(v for _, _, v in taken)
            if self.aggregators is not None:
                self._submit_aggregation(fragments, versions)
            else:
                if self.remote_evaluators:
                    fragments = self.evaluators.get(fragments)
                self._to_learn.append((versions, SampleBatch.concat_samples(fragments)))

    def _submit_aggregation(self, fragment_refs: list[Any], versions: tuple[int, ...]) -> None:
        assert self.aggregators is not None
        actor = self.aggregators.pick(self.tasks.count)
        ref = actor.aggregate.remote(*fragment_refs)
        self.tasks.add(actor, ref, tag=(ASOTask.AGGREGATE, fragment_refs, versions))

    def _aggregated(self, done: Finished) -> None:
        """A train batch is ready; a dead aggregator is replaced and its work redone."""
        _, fragment_refs, versions = done.tag
        if done.error is None:
            self._to_learn.append((versions, done.value))
            return
        if not is_actor_death(done.error):
            raise RuntimeError(f"aggregation failed: {done.error!r}") from done.error
        assert self.aggregators is not None
        self.aggregators.replace(done.actor)
        self._submit_aggregation(fragment_refs, versions)

    def _current_weights(self) -> tuple[int, Any]:
        """``(version, ref)`` of the learner's weights in the object store, put again once
        ``broadcast_interval`` updates have passed since the last put."""
        import ray

        learner = self.learner
        if (
            self._weights is None
            or learner.num_updates - self._weights[0] >= self.config.broadcast_interval
        ):
            with self.timer("sync"), learner.lock:
                version = learner.num_updates
                self._weights = (version, ray.put(self.local_evaluator.get_weights()))
        return self._weights

    def _launch(self) -> None:
        """Fill every live evaluator's sample slots (unless the backlog is full, or a
        whole train batch of fragments still waits to be assembled: the learner, not
        sampling, is behind); a task to an evaluator behind the current weights carries
        them."""
        if self._backlog_full or self._fragment_rows >= self.config.train_batch_size:
            return
        version, weights = self._current_weights()
        global_vars = self.global_vars()
        per_evaluator = self.config.max_sample_requests_in_flight_per_evaluator
        for evaluator in self.evaluators.healthy_evaluators():
            while evaluator not in self.tasks.dead and self.tasks.count(evaluator) < per_evaluator:
                fresh = None
                if self._sent_version.get(evaluator, -1) < version:
                    fresh = weights
                    self._sent_version[evaluator] = version
                    self.num_weight_syncs += 1
                method = evaluator.apply.options(num_returns=2)
                fragment_ref, info_ref = method.remote(sample_fragment, fresh, global_vars)
                tag = (ASOTask.SAMPLE, fragment_ref, self._sent_version[evaluator])
                self.tasks.add(evaluator, info_ref, tag=tag)

    # -- reporting, weights and teardown ---------------------------------------------------
    @property
    def num_sample_requests_in_flight(self) -> int:
        """Sample tasks running or queued on the evaluators."""
        return sum(map(self.tasks.count, self.evaluators.healthy_evaluators()))

    def stats(self) -> dict[str, float]:
        """Counters, queue sizes and the last ``step()``'s rates: env steps delivered
        (``sample_steps_per_s``), learner updates and rows (``learner_updates_per_s``,
        ``learner_rows_per_s``), ``learner_busy_frac`` and the policy lag of the
        fragments learned from (``policy_lag_mean``, ``policy_lag_max``, in learner
        updates)."""
        return {
            **super().stats(),
            "num_learner_updates": self.learner.num_updates,
            "num_weight_syncs": self.num_weight_syncs,
            "num_healthy_evaluators": self.evaluators.num_healthy_evaluators,
            "num_aggregator_restarts": self.aggregators.num_restarts if self.aggregators else 0,
            "learner_queue_size": self.learner.inqueue.qsize(),
            "batches_waiting_for_learner": len(self._to_learn),
            "fragments_waiting": len(self._fragments),
            "sample_requests_in_flight": self.num_sample_requests_in_flight,
            **self._rates,
        }

    def push_local_weights(self, global_vars: GlobalVars | None = None) -> None:
        """Broadcast the local weights now; they are the current version everywhere."""
        super().push_local_weights(global_vars)
        self._weights = None
        version = self.learner.num_updates
        self._sent_version = dict.fromkeys(self.remote_evaluators, version)

    def drop_in_flight(self) -> None:
        """Forget queued tasks, fragments and train batches (sampled with older weights)."""
        self.tasks.drain()
        self._fragments.clear()
        self._fragment_rows = 0
        self._to_learn.clear()

    def stop(self) -> None:
        """Stop the learner thread and the aggregators (the evaluators stay)."""
        self.learner.stop()
        self.drop_in_flight()
        if self.aggregators is not None:
            self.aggregators.stop()
