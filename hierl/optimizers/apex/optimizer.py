"""``apex``: Ape-X, distributed prioritized experience replay.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR 2018,
https://arxiv.org/abs/1803.00933), Algorithms 1 and 2, in the shape of RLlib's original
``ApexOptimizer`` (ICML 2018, §3.3).  Evaluators explore with an epsilon ladder, compute
initial priorities and push batches straight into replay-shard actors (the driver passes
object refs on: ``samplers``, ``sharded_replay``); the driver prefetches replay
batches into a ``LearnerThread``, returns its new priorities to the shards and refreshes
an evaluator's weights every ``max_weight_sync_delay`` env steps it sampled.  Every stage
is pipelined through bounded task pools and queues over preallocated buffers, so memory
stays flat however long it runs.  This module is the event loop joining the pieces; with
no remote evaluators the local evaluator samples inside it and the shards are in-process.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from hierl.evaluators import EpisodeRecord
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.optimizers.apex.rungs import RungReturns
from hierl.optimizers.apex.samplers import ReplaySamplers, pin_epsilon_ladder
from hierl.optimizers.apex.sharded_replay import ShardedReplay, ShardedReplayConfig
from hierl.optimizers.apex.tasks import ApexTask
from hierl.optimizers.base import PolicyOptimizer, single_policy_stats
from hierl.optimizers.learner_thread import LearnerThread
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.replay.optimizer import ReplayOptimizer, sample_with_priorities
from hierl.optimizers.task_pool import TaskPool
from hierl.policy_graph import LearnerStats, PolicyGraph
from hierl.sample_batch import SampleBatch


class LearnerOutput(NamedTuple):
    """What the learner returns for one replayed batch: new priorities to send back."""

    tag: Any
    """The tag the batch was queued with (the replay shard it came from)."""
    indexes: np.ndarray
    """The batch's ``BATCH_INDEXES`` (rows of the replay buffer)."""
    td_error: np.ndarray
    """Per-row TD error before the update (``LearnResult.td_error``)."""


def replay_learner(policy: PolicyGraph):
    """The learner thread's update: ``policy.learn_on_replay_batch``, its TD errors as
    the batch's new priorities (a ``LearnerOutput``; None without ``BATCH_INDEXES``)."""

    def learn(tag: Any, batch: SampleBatch) -> tuple[dict[str, float], LearnerOutput | None]:
        result = policy.learn_on_replay_batch(batch)
        if result.td_error is None or SampleBatch.BATCH_INDEXES not in batch:
            return result.stats, None
        indexes = batch[SampleBatch.BATCH_INDEXES]
        return result.stats, LearnerOutput(tag, indexes, np.asarray(result.td_error))

    return learn


@dataclasses.dataclass
class ApexConfig(ShardedReplayConfig):
    """Settings of the ``apex`` optimizer (the sharded replay's plus these)."""

    max_sample_requests_in_flight_per_evaluator: int = 2
    """Sample tasks queued on each evaluator (the next one waits while one runs)."""
    learner_queue_size: int = 16
    """Bound of the learner thread's input (replay batches) and output (priorities) queues."""
    max_weight_sync_delay: int = 400
    """Env steps an evaluator samples before it receives fresh weights."""
    per_worker_epsilon: bool = True
    """Pin evaluator i of N to epsilon ``epsilon_base ** (1 + epsilon_alpha (i - 1) / (N - 1))``
    (its policy's ``ExplorationScale``, when it has one); the local evaluator is i = 1 of 1 when
    it samples."""
    epsilon_base: float = 0.4
    """The ladder's largest epsilon (the paper's 0.4)."""
    epsilon_alpha: float = 7.0
    """The ladder's exponent range (the paper's 7): the last evaluator gets
    ``epsilon_base ** (1 + epsilon_alpha)``."""
    rung_window_episodes: int = 100
    """With the ladder, each rung's ``rung_<i>/episode_reward_mean`` is over its last
    this-many episodes (``rungs.RungReturns``; 100, as the SB3 zoo's training curves)."""
    min_step_time_s: float = 1.0
    """Each ``step()`` runs the event loop at least this long (and at least one round)."""
    wait_timeout_s: float = 0.01
    """Longest the driver blocks in ``ray.wait`` per round (it wakes up for the first
    finished sample or replay task); bounds the delay of priority updates."""
    worker_side_prioritization: bool = True
    """Evaluators compute the initial priorities of the rows they sample (Ape-X,
    Horgan et al. 2018, Algorithm 1 ``ComputePriorities``); False: rows enter at each
    shard's max priority."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "max_sample_requests_in_flight_per_evaluator",
            "learner_queue_size",
            "max_weight_sync_delay",
            "rung_window_episodes",
        ):
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        self.check("epsilon_base", 0 <= self.epsilon_base <= 1, "must be in [0, 1]")
        self.check("epsilon_alpha", self.epsilon_alpha >= 0, "must be >= 0")
        self.check("min_step_time_s", self.min_step_time_s >= 0, "must be >= 0")
        self.check("wait_timeout_s", self.wait_timeout_s > 0, "must be > 0")


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
    learns_from = "replay"

    @classmethod
    def actor_groups(cls, config: ApexConfig, num_evaluators: int) -> list[ActorGroup]:
        """The replay-shard actors (in-process shards without remote evaluators)."""
        if not num_evaluators:
            return []
        return [
            ActorGroup.from_settings(
                "Ape-X replay shard", config, "num_replay_shards", "num_cpus_per_replay_shard"
            )
        ]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        # Sample tasks (on evaluators) and replay tasks (on shards) share one pool, so a
        # single ray.wait wakes the driver for either; per-kind bounds are kept apart.
        per_actor = cfg.max_sample_requests_in_flight_per_evaluator
        self._tasks = TaskPool(max(per_actor, cfg.replay_requests_in_flight_per_shard))
        self.samplers = ReplaySamplers(
            self.evaluators,
            self._tasks,
            per_actor,
            cfg.max_weight_sync_delay,
            cfg.initial_priority_eps,
        )
        self.replay = ShardedReplay(
            cfg, bool(self.remote_evaluators), self._tasks, self.evaluators.get, self.seed
        )
        self.epsilons: list[float] = []
        """The epsilon pinned on each sampling evaluator (empty without a ladder)."""
        if cfg.per_worker_epsilon:
            self.epsilons = pin_epsilon_ladder(self.evaluators, cfg.epsilon_base, cfg.epsilon_alpha)
            self.samplers.epsilons = self.epsilons
        self.rungs = RungReturns(cfg.rung_window_episodes)
        """Each rung's training return (reported while there is a ladder)."""
        self.learner = LearnerThread(
            replay_learner(self.local_evaluator.policy),
            cfg.learner_queue_size,
            cfg.learner_queue_size,
        )
        self.timers["learn"] = self.learner.learn_timer
        for phase in ("sample", "wait", "route", "replay", "sync"):
            self.timer(phase)
        self.learner.pause()  # it learns only inside step(): the policy is stable between
        self.learner.start()
        self._to_learn: deque[tuple[int, SampleBatch]] = deque()
        self._weights: tuple[int, Any] | None = None  # (learner version, object ref)
        self._rates: dict[str, float] = {}

    beta = ReplayOptimizer.beta  # the same annealed importance-sampling exponent

    # -- the event loop ----------------------------------------------------------------
    def step(self) -> LearnerStats:
        """Run the event loop for ``min_step_time_s``; returns the learner's mean stats."""
        self._weights = None  # the local weights may have been set between steps
        sampled0 = self.num_steps_sampled
        one_round = self._remote_round if self.remote_evaluators else self._local_round
        span = self.learner.run_rounds(one_round, self.config.min_step_time_s)
        self._send_priorities()
        self.evaluators.set_global_vars(self.global_vars())
        # Deltas: the counters may have been restored from a checkpoint, the learner's not.
        self.num_steps_trained += span.rows
        self.num_updates += span.updates
        self._rates = span.rates(self.num_steps_sampled - sampled0)
        self.learner_stats = single_policy_stats(self.learner.pop_stats())
        return self.learner_stats

    def _remote_round(self) -> None:
        """One pass over every event source, blocking (GIL released) until a task is done.

        CRUCIAL: never spin.  The learner thread needs the GIL between its torch ops; a
        driver polling without blocking would delay each of them by a GIL switch interval.
        """
        self.replay.poll_adds()
        with self.timer("wait"):
            if len(self._tasks):
                finished = self._tasks.poll(self.config.wait_timeout_s)
            else:  # everything waits on the shards' acknowledgements
                finished = []
                time.sleep(self.config.wait_timeout_s)
        with self.timer("replay"):
            for done in finished:
                if done.tag[0] is ApexTask.REPLAY:
                    item = self.replay.replayed(done.tag[1], done.value, done.error)
                    if item is not None:
                        self._to_learn.append(item)
            self.learner.feed(self._to_learn)
            self._send_priorities()
            if not self._to_learn:  # else the learner is behind: prefetch nothing more
                self.replay.request_replays(self.beta)
        with self.timer("route"):
            sampled = [done for done in finished if done.tag[0] is ApexTask.SAMPLE]
            for ticket, batch_ref, priorities_ref, rows, seconds in self.samplers.receive(
                sampled, self._weights_ref
            ):
                self.timer("sample").push(seconds)
                self.num_steps_sampled += rows
                self.replay.submit(ticket, batch_ref, priorities_ref, rows)
            for ticket in self.replay.route():
                self.samplers.routed(ticket)
            self.samplers.launch(self._weights_ref, self.global_vars())

    def _local_round(self) -> None:
        """In-process: sample on the local evaluator, store, feed the learner."""
        # CRUCIAL: hold the learner's lock, the learner thread updates this very policy.
        with self.learner.lock, self.timer("sample"):
            self.local_evaluator.set_global_vars(self.global_vars())
            batch, priorities = sample_with_priorities(
                self.local_evaluator, self.config.initial_priority_eps
            )
        self.num_steps_sampled += batch.count
        self.replay.add(batch, priorities)
        with self.timer("replay"):
            self._send_priorities()
            for item in self.replay.replay_local(
                self.beta, lambda: not self.learner.inqueue.full()
            ):
                self._to_learn.append(item)
                self.learner.feed(self._to_learn)

    def _weights_ref(self) -> Any:
        """The learner's current weights in the object store: one ``ray.put`` per version."""
        import ray

        with self.timer("sync"):
            if self._weights is None or self._weights[0] != self.learner.num_updates:
                with self.learner.lock:
                    version = self.learner.num_updates
                    weights = self.local_evaluator.get_weights()
                self._weights = (version, ray.put(weights))
        return self._weights[1]

    def _send_priorities(self) -> None:
        for out in self.learner.drain_outqueue():
            self.replay.update_priorities(out.tag, out.indexes, out.td_error)

    # -- reporting, checkpoints and teardown -------------------------------------------
    def episodes_by_evaluator(self) -> list[tuple[int, list[EpisodeRecord]]]:
        """``PolicyOptimizer.episodes_by_evaluator``; with the ladder, each sampling
        evaluator's episodes also count towards its rung (the local one is rung 1 when
        it samples, without remote evaluators)."""
        by_evaluator = super().episodes_by_evaluator()
        if self.epsilons:
            for index, episodes in by_evaluator:
                if index or not self.remote_evaluators:
                    self.rungs.add(max(index, 1), episodes)
        return by_evaluator

    def stats(self) -> dict[str, float]:
        """Counters, queue and in-flight sizes, and rates over the last ``step()``: env
        steps delivered (``sample_steps_per_s``), learner updates and rows completed
        (``learner_updates_per_s``, ``learner_rows_per_s``) and ``learner_busy_frac``;
        with the epsilon ladder, its smallest and largest value (``epsilon_min``,
        ``epsilon_max``) and each rung's training return (``RungReturns.metrics``)."""
        out = {
            **super().stats(),
            **self.replay.stats(),
            "num_learner_updates": self.learner.num_updates,
            "num_weight_syncs": self.samplers.num_weight_syncs,
            "num_dead_evaluators": self.samplers.num_dead,
            "learner_queue_size": self.learner.inqueue.qsize(),
            "learner_out_queue_size": self.learner.outqueue.qsize(),
            "sample_requests_in_flight": self.samplers.num_in_flight,
            "batches_waiting_for_learner": len(self._to_learn),
            **self._rates,
        }
        if self.config.prioritized_replay:
            out["prioritized_replay_beta"] = self.beta
        if self.epsilons:
            out.update(epsilon_min=min(self.epsilons), epsilon_max=max(self.epsilons))
            out.update(self.rungs.metrics(self.epsilons))
        return out

    def save(self) -> dict[str, Any]:
        """The base counters and the rungs' windows."""
        return {**super().save(), "rungs": self.rungs.get_state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``save`` (a checkpoint from before the rungs were kept has none)."""
        super().restore(state)
        self.rungs.set_state(state.get("rungs", {}))

    def stop(self) -> None:
        """Stop the learner thread and the replay shards (the evaluators stay)."""
        self.learner.stop()
        self._tasks.drain()
        self._to_learn.clear()
        self.replay.stop()
