"""The aggregation tree of the ``es`` optimizer.

With ``num_aggregators = A > 0`` the remote evaluators are split into A contiguous
groups, each served by a light ``ESAggregator`` actor (a fraction of a CPU).  Per round
the driver sends one request per aggregator; each fans out to its evaluators, merges
their ``RolloutResult``s and returns one, so the driver's fan-in is A, however many
evaluators there are.  The bulk data never passes through an aggregator: it forwards
the object refs of the noise table and of ``θ`` and the evaluators read them from the
object store themselves.  Contiguous groups keep the merged order equal to the direct
path's, so both compute bit-identical updates.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hierl.evaluators import EvaluatorSet
from hierl.evaluators.evaluator_set import is_evaluator_failure
from hierl.optimizers.es.rollouts import (
    RolloutResult,
    RolloutTask,
    evaluate_perturbations,
    merge_results,
)


class ESAggregator:
    """An inner node of the tree (a Ray actor).

    It holds no evaluators of its own: each request names them, so evaluators that the
    driver's EvaluatorSet recreated after a failure are used from the next round on.
    """

    def evaluate(
        self, requests: list[tuple[Any, RolloutTask]], refs: dict[str, Any], timeout_s: float
    ) -> RolloutResult:
        """Run ``requests`` (``(evaluator actor, task)`` pairs) and merge their results.

        ``refs`` holds the object refs of the noise table and of ``θ``, nested in a dict
        so that Ray does not resolve them here.  Evaluators that fail are reported in
        ``failures`` for the driver to handle; the others' results are merged in order.
        """
        import ray

        # CRUCIAL: the refs go on as top-level arguments: each evaluator resolves them
        # from the object store itself (zero-copy); the table never passes through here.
        calls = [
            actor.apply.remote(evaluate_perturbations, refs["noise"], refs["theta"], task)
            for actor, task in requests
        ]
        deadline = time.monotonic() + timeout_s
        results, failures = [], []
        for position, ref in enumerate(calls):
            try:
                results.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
            except Exception as error:  # reported to the driver
                failures.append((position, error))
        merged = merge_results(results)
        merged.failures = failures
        return merged


class AggregationTree:
    """The driver's side: ``num_aggregators`` ESAggregator actors and one round over them.

    Args:
        num_aggregators: actors to start (>= 1).
        num_cpus_per_aggregator: CPUs each reserves.
    """

    def __init__(self, num_aggregators: int, num_cpus_per_aggregator: float):
        self.num_cpus = num_cpus_per_aggregator
        self.aggregators = [self._make() for _ in range(num_aggregators)]

    def _make(self) -> Any:
        import ray

        return ray.remote(num_cpus=self.num_cpus)(ESAggregator).remote()

    def run(
        self,
        evaluators: EvaluatorSet,
        actors: list[Any],
        tasks: list[RolloutTask],
        refs: dict[str, Any],
    ) -> tuple[RolloutResult, int]:
        """Evaluate ``tasks[i]`` on ``actors[i]``; returns the merged result and the
        number of results the driver waited for (its fan-in).

        Failed evaluators are handed to ``evaluators.handle_failure`` (their pairs are
        lost for this round); a dead aggregator is replaced and its group's pairs lost.
        """
        import ray

        groups = np.array_split(np.arange(len(actors)), len(self.aggregators))
        calls = []
        for agg, group in zip(self.aggregators, groups, strict=True):
            requests = [(actors[i], tasks[i]) for i in group]
            if requests:
                ref = agg.evaluate.remote(requests, refs, evaluators.get_timeout_s)
                calls.append((agg, requests, ref))
        results = []
        for agg, requests, ref in calls:
            try:
                result = evaluators.get(ref)
            except ray.exceptions.RayActorError:
                self.aggregators[self.aggregators.index(agg)] = self._make()
                continue
            for position, error in result.failures:
                if not is_evaluator_failure(error):
                    raise error
                evaluators.handle_failure(requests[position][0], error)
            result.failures = []
            results.append(result)
        return merge_results(results), len(calls)

    def stop(self) -> None:
        """Kill the aggregator actors."""
        import ray

        for agg in self.aggregators:
            ray.kill(agg)
        self.aggregators = []
