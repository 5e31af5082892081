"""Evaluators sampling for sharded replay: Ape-X's actors (Horgan et al. 2018, Alg. 1).

* ``epsilon_ladder`` / ``pin_epsilon_ladder`` -- each evaluator explores with its
  own epsilon, ``0.4 ** (1 + 7 (i - 1) / (N - 1))`` for evaluator ``i`` of ``N`` (§4.1);
* ``sample_for_replay`` -- the evaluator-side task: a batch with its initial
  priorities, shaped so the bulk goes to a replay shard by object ref while the driver
  fetches only a row count;
* ``ReplaySamplers`` -- the driver's side: bounded sample tasks per evaluator and a
  weight refresh after every ``max_weight_sync_delay`` env steps an evaluator sampled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hierl.evaluators import EvaluatorSet, PolicyEvaluator
from hierl.evaluators.evaluator_set import is_evaluator_failure
from hierl.optimizers.apex.tasks import ApexTask
from hierl.optimizers.failures import handle_failed_task
from hierl.optimizers.replay.optimizer import sample_with_priorities
from hierl.optimizers.task_pool import Finished, TaskPool
from hierl.policy_graph import ExplorationScale, GlobalVars, PolicyGraph
from hierl.sample_batch import SampleBatch


def epsilon_ladder(index: int, num: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X exploration epsilon of evaluator ``index`` (1-based) out of ``num`` (§4.1)."""
    if not 1 <= index <= num:
        raise ValueError(f"evaluator index must be in [1, {num}], got {index}")
    return base ** (1 + alpha * (index - 1) / max(num - 1, 1))


def pin_epsilon(evaluator: PolicyEvaluator, epsilon: float) -> bool:
    """Pin ``epsilon`` as the exploration scale of each of the evaluator's policies that
    has one (``ExplorationScale``); True if any."""

    def pin(policy: PolicyGraph, _policy_id: str) -> bool:
        if isinstance(policy, ExplorationScale):
            policy.set_exploration_scale(epsilon)
            return True
        return False

    return any(evaluator.foreach_policy(pin))


def pin_epsilon_ladder(evaluators: EvaluatorSet, base: float, alpha: float) -> list[float]:
    """Pin each sampling evaluator to its rung of the ladder; returns the epsilons.

    The samplers are the remote evaluators, or the local one when there are none.
    Returns [] when no policy has an ``ExplorationScale`` (no ladder to pin).
    """
    remotes = evaluators.remote_evaluators
    num = max(1, len(remotes))
    eps = [epsilon_ladder(i, num, base, alpha) for i in range(1, num + 1)]
    if remotes:
        refs = [e.apply.remote(pin_epsilon, x) for e, x in zip(remotes, eps, strict=True)]
        pinned = evaluators.get(refs)
    else:
        pinned = [pin_epsilon(evaluators.local_evaluator, eps[0])]
    return eps if any(pinned) else []


def sample_for_replay(
    evaluator: PolicyEvaluator, priority_eps: float | None
) -> tuple[SampleBatch, np.ndarray | None, tuple[int, float]]:
    """A batch, its initial priorities (``|TD error| + priority_eps``; None when
    ``priority_eps`` is: the shard then inserts at its max priority) and
    ``(env steps, seconds taken)``.

    Called with ``num_returns=3`` so the driver fetches only the small last value and
    hands the first two refs to a replay shard.
    """
    start = time.perf_counter()
    batch, priorities = sample_with_priorities(evaluator, priority_eps)
    return batch, priorities, (batch.count, time.perf_counter() - start)


class ReplaySamplers:
    """The driver's side of the remote evaluators that sample for replay.

    Keeps ``max_in_flight`` sample tasks per live evaluator in ``tasks``, tagged
    ``(ApexTask.SAMPLE, index, batch_ref, priorities_ref)``.  A task counts as in flight until
    its batch was handed on (``routed``), so an evaluator whose batches wait for a
    shard gets no new task.  An evaluator receives fresh weights once it has sampled
    ``max_weight_sync_delay`` env steps with its current ones.  A failed evaluator goes
    to the evaluator set (recreated or dropped); a recreated one gets the learner's
    weights and its rung of the epsilon ladder (``epsilons``) before its first task.
    """

    def __init__(
        self,
        evaluators: EvaluatorSet,
        tasks: TaskPool,
        max_in_flight: int,
        max_weight_sync_delay: int,
        priority_eps: float | None,
    ):
        self.evaluators = evaluators
        self.tasks = tasks
        self.max_in_flight = max_in_flight
        self.max_weight_sync_delay = max_weight_sync_delay
        self.priority_eps = priority_eps
        """Added to the TD errors the evaluators compute as initial priorities; None: no
        initial priorities (without ``worker_side_prioritization``)."""
        num = len(evaluators.remote_evaluators)
        self.outstanding: dict[Any, int] = {}
        """Per evaluator handle: sample tasks launched whose batches were not yet handed on."""
        self.steps_since_sync = [0] * num
        self.num_weight_syncs = 0
        self.epsilons: list[float] = []
        """Each evaluator's pinned epsilon (set by the owner; re-pinned on recreation)."""

    @property
    def num_dead(self) -> int:
        """Evaluators dropped after a failure (they get no more tasks)."""
        evaluators = self.evaluators
        return len(evaluators.remote_evaluators) - evaluators.num_healthy_evaluators

    @property
    def num_in_flight(self) -> int:
        """Sample tasks running or queued on the evaluators."""
        return sum(map(self.tasks.count, self.evaluators.healthy_evaluators()))

    def receive(
        self, finished: list[Finished], weights: Callable[[], Any]
    ) -> list[tuple[Any, Any, Any, int, float]]:
        """Finished sample tasks as ``(ticket, batch_ref, priorities_ref, rows, seconds)``;
        hand ``ticket`` to ``routed`` once the batch went to a shard.

        A failed evaluator is recreated (starting from ``weights()``, a ref) or dropped
        by the evaluator set, which raises when training cannot go on; other errors of a
        task raise RuntimeError.
        """
        out = []
        for done in finished:
            _, index, batch_ref, priorities_ref = done.tag
            if done.error is None:
                rows, seconds = done.value
                self.steps_since_sync[index] += rows
                out.append((done.actor, batch_ref, priorities_ref, rows, seconds))
                continue
            if not is_evaluator_failure(done.error):
                raise RuntimeError(
                    f"sampling on remote evaluator {index + 1} failed: {done.error!r}"
                ) from done.error
            current = done.actor in self.evaluators.remote_evaluators
            self.outstanding.pop(done.actor, None)  # its tasks are lost with it
            new = handle_failed_task(self.evaluators, self.tasks, done, weights())
            if current and new is not None:
                self.steps_since_sync[index] = 0
                if self.epsilons:  # queued before its first sample task
                    new.apply.remote(pin_epsilon, self.epsilons[index])
        return out

    def routed(self, ticket: Any) -> None:
        """The batch of ``ticket`` (from ``receive``) was handed on: its evaluator
        may get a new task."""
        if ticket in self.outstanding:
            self.outstanding[ticket] -= 1

    def launch(self, weights: Callable[[], Any], global_vars: GlobalVars) -> None:
        """Refresh due evaluators with ``weights()`` (a ref) and fill their task slots."""
        healthy = self.evaluators.healthy_evaluators()
        for index, evaluator in enumerate(self.evaluators.remote_evaluators):
            if evaluator not in healthy or evaluator in self.tasks.dead:
                continue
            if self.steps_since_sync[index] >= self.max_weight_sync_delay:
                evaluator.set_weights.remote(weights(), global_vars)
                self.steps_since_sync[index] = 0
                self.num_weight_syncs += 1
            while self.outstanding.get(evaluator, 0) < self.max_in_flight:
                method = evaluator.apply.options(num_returns=3)
                batch_ref, priorities_ref, info_ref = method.remote(
                    sample_for_replay, self.priority_eps
                )
                tag = (ApexTask.SAMPLE, index, batch_ref, priorities_ref)
                self.tasks.add(evaluator, info_ref, tag=tag)
                self.outstanding[evaluator] = self.outstanding.get(evaluator, 0) + 1
