"""``async``: asynchronous gradients, applied on the driver as they arrive (A3C).

RLlib (ICML 2018) Fig. 4(c) and Mnih et al. 2016, "Asynchronous Methods for Deep
Reinforcement Learning": every evaluator keeps ``max_in_flight_per_evaluator`` tasks of
"sample, then compute gradients" in flight.  The driver waits for whichever finishes
first (``ray.wait``), applies that gradient to its policy, sends the new weights back to
that evaluator only and relaunches it.  Slow evaluators (stragglers) never hold up the
others; a failed one (dead process, env error) never hangs the step: the evaluator set
recreates it, and its first task runs on the current weights (or it is dropped).

Evaluators built with ``sample_async=True`` sample the next batch in a background thread
while the driver applies the last gradient, so a task is only the gradient computation.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer, single_policy_stats
from hierl.optimizers.failures import handle_failed_task
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.task_pool import TaskPool
from hierl.policy_graph import GlobalVars, LearnerStats, UpdateStats


@dataclasses.dataclass
class AsyncConfig(OptimizerConfig):
    """Settings of the ``async`` optimizer."""

    grads_per_step: int = 0
    """Gradients applied per ``step()``; 0 = until ``train_batch_size`` env steps arrived."""
    max_in_flight_per_evaluator: int = 1
    """Gradient tasks queued on each evaluator (more hides latency, adds staleness)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("grads_per_step", self.grads_per_step >= 0, "must be >= 0")
        self.check("max_in_flight_per_evaluator", self.max_in_flight_per_evaluator >= 1, ">= 1")


@dataclasses.dataclass
class GradientResult:
    """What one evaluator task returns: a gradient and the timings around it."""

    grads: list[np.ndarray]
    stats: dict[str, float]
    count: int
    sample_s: float
    grad_s: float


def sample_and_compute_gradients(
    evaluator: PolicyEvaluator,
    weights: Any = None,
    global_vars: GlobalVars | None = None,
) -> GradientResult:
    """Evaluator side: load ``weights`` if given, sample one batch, compute its gradient.

    Loading the weights inside the same task saves a second actor call per gradient.
    """
    if weights is not None:
        evaluator.set_weights(weights, global_vars)
    t0 = time.perf_counter()
    batch = evaluator.sample()
    t1 = time.perf_counter()
    grads, stats = evaluator.compute_gradients(batch)
    return GradientResult(grads, stats, batch.count, t1 - t0, time.perf_counter() - t1)


@register_optimizer
class AsyncGradientsOptimizer(PolicyOptimizer):
    """Apply each evaluator's gradient as soon as it arrives; refresh only that evaluator.

    Timers: ``sample`` and ``grad`` are measured inside the evaluators, ``wait`` is the
    driver blocked in ``ray.wait``, ``learn`` applying gradients on the driver and
    ``sync`` putting and sending weights.
    """

    name = "async"
    config_class = AsyncConfig
    required_policy_methods = ("compute_gradients", "apply_gradients")
    samples_to_driver = False  # gradients in, weights out

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.pool = TaskPool(self.config.max_in_flight_per_evaluator)
        self.num_gradients_applied = 0
        self.num_weight_syncs = 0
        self._step_stats = UpdateStats()

    def _done(self, grads: int, steps: int) -> bool:
        if self.config.grads_per_step:
            return grads >= self.config.grads_per_step
        return steps >= self.config.train_batch_size

    def _apply(self, result: GradientResult) -> None:
        self.timer("sample").push(result.sample_s)
        self.timer("grad").push(result.grad_s)
        with self.timer("learn"):  # refused (and counted) if not finite
            applied = self.local_evaluator.apply_gradients(result.grads)
        self._step_stats.add({**result.stats, **(applied or {})})
        self.num_gradients_applied += 1
        self.num_updates += 1
        self.num_steps_sampled += result.count
        self.num_steps_trained += result.count

    def _launch(self, weights: Any = None, refresh: tuple = ()) -> None:
        """Fill every live evaluator's slots; the ``refresh`` ones load ``weights`` first."""
        global_vars = self.global_vars()
        for e in self.evaluators.healthy_evaluators():
            fresh = weights if e in refresh else None
            while self.pool.has_capacity(e):
                self.pool.add(e, e.apply.remote(sample_and_compute_gradients, fresh, global_vars))
                fresh = None

    def step(self) -> LearnerStats:
        """Apply gradients until the step's quota (see ``grads_per_step``); the stats
        are their mean (``UpdateStats``)."""
        start_grads, start_steps = self.num_gradients_applied, self.num_steps_sampled
        self._step_stats = UpdateStats()

        def done() -> bool:
            return self._done(
                self.num_gradients_applied - start_grads, self.num_steps_sampled - start_steps
            )

        if not self.remote_evaluators:
            while not done():
                self._apply(sample_and_compute_gradients(self.local_evaluator))
            self.evaluators.set_global_vars(self.global_vars())
            self.learner_stats = single_policy_stats(self._step_stats.result())
            return self.learner_stats

        import ray

        self._launch()
        while not done():
            if not len(self.pool):
                raise RuntimeError("async: every remote evaluator has died")
            with self.timer("wait"):
                finished = self.pool.wait_any(self.evaluators.get_timeout_s)
            refresh = []
            for f in finished:
                if f.error is None:
                    self._apply(f.value)
                    refresh.append(f.actor)
                else:  # recreated (it was sent the current weights) or dropped
                    handle_failed_task(self.evaluators, self.pool, f)
            with self.timer("sync"):
                weights = None
                if refresh:
                    weights = self.local_evaluator.get_weights()
                    if len(refresh) > 1:  # one copy in the object store for all of them
                        weights = ray.put(weights)
                    self.num_weight_syncs += len(refresh)
                self._launch(weights, tuple(refresh))
        self.evaluators.set_global_vars(self.global_vars())
        self.learner_stats = single_policy_stats(self._step_stats.result())
        return self.learner_stats

    def stats(self) -> dict[str, float]:
        """Uniform stats plus gradient, sync and in-flight counters."""
        return {
            **super().stats(),
            "num_gradients_applied": self.num_gradients_applied,
            "num_weight_syncs": self.num_weight_syncs,
            "num_lost_tasks": self.pool.num_lost_tasks,
            "num_healthy_evaluators": self.evaluators.num_healthy_evaluators,
            "in_flight": len(self.pool),
        }

    def drop_in_flight(self) -> None:
        """Forget in-flight gradient tasks (their results would be stale when used)."""
        self.pool.drain()

    def stop(self) -> None:
        """Forget in-flight tasks (the evaluators are stopped by their owner)."""
        self.drop_in_flight()
