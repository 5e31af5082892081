"""How optimizers hand a failed evaluator task to the evaluator set.

The recreation policy lives in ``EvaluatorSet.handle_failure``; this is the glue for
optimizers that keep tasks in a ``TaskPool``: forget
the failed actor's other tasks, let the set recreate (or drop) it, and return the new
handle so the optimizer schedules work on it.
"""

from __future__ import annotations

from typing import Any

from hierl.evaluators import EvaluatorSet
from hierl.evaluators.evaluator_set import is_evaluator_failure
from hierl.optimizers.task_pool import Finished, TaskPool


def handle_failed_task(
    evaluators: EvaluatorSet, pool: TaskPool, done: Finished, weights: Any = None
) -> Any:
    """``done`` (a finished task of a remote evaluator) failed: returns the evaluator's
    replacement handle (None if dropped).  Errors that are no evaluator failure (a bug,
    e.g. a non-finite loss) are re-raised unchanged."""
    assert done.error is not None
    if not is_evaluator_failure(done.error):
        raise done.error
    pool.mark_dead(done.actor)  # its other tasks are lost with it
    return evaluators.handle_failure(done.actor, done.error, weights)
