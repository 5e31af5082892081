"""The pipelined evaluator tasks of the ``sharded_ps`` optimizer.

Every remote evaluator keeps up to ``max_in_flight`` ``compute_gradient_shards`` tasks
running, across steps (so gradients may be a few updates stale).  A task returns K
gradient-shard refs and a small ``GradientInfo``; only the info is fetched when the task
finishes, and the refs wait in ``backlog`` until the driver routes them to the shards.
An evaluator whose weights are older than the shards' ``version`` is handed the shards'
weight refs with its next task (a weight pull), so weights also go actor to actor.

A task that fails because a parameter shard died (its weight ref is an error) restores
the shard (``ShardGroup.restore_lost``) and leaves the evaluator in service; a failed
evaluator goes to the evaluator set (recreated, and then pulls the weights with its
first task, or dropped).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from hierl.evaluators import EvaluatorSet
from hierl.optimizers.failures import handle_failed_task
from hierl.optimizers.sharded_ps.param_server import compute_gradient_shards
from hierl.optimizers.sharded_ps.shard_group import ShardGroup
from hierl.optimizers.task_pool import Finished, TaskPool
from hierl.optimizers.timers import TimerStat
from hierl.policy_graph import GlobalVars


class GradientPipeline:
    """In-flight gradient tasks on the remote evaluators of ``evaluators``.

    Args:
        evaluators: the evaluator set (its remote evaluators run the tasks; a dead one is
            skipped, and ``get_timeout_s`` bounds each wait).
        servers: the shards whose ``version`` and ``weight_refs`` new tasks start from.
        max_in_flight: tasks kept running per evaluator (1 = plain A3C).
    """

    def __init__(self, evaluators: EvaluatorSet, servers: ShardGroup, max_in_flight: int):
        self.evaluators = evaluators
        self.servers = servers
        self.pool = TaskPool(max_in_flight)
        self.backlog: deque[Finished] = deque()
        """Finished tasks whose gradients are not applied yet (``tag``: the K refs)."""
        self.num_weight_pulls = 0
        self.num_dropped_gradients = 0
        self._evaluator_version: dict[Any, int] = {}
        self._spec_ref: Any = None
        if evaluators.remote_evaluators:
            import ray

            self._spec_ref = ray.put(servers.spec)

    def launch(self, global_vars: GlobalVars) -> None:
        """Fill every live evaluator up to ``max_in_flight`` tasks."""
        k, version = self.servers.spec.num_shards, self.servers.version
        for e in self.evaluators.healthy_evaluators():
            while self.pool.has_capacity(e):
                stale = self._evaluator_version.get(e) != version
                weight_refs = self.servers.weight_refs if stale else []
                if stale:
                    self.num_weight_pulls += 1
                    self._evaluator_version[e] = version
                refs = e.apply.options(num_returns=k + 1).remote(
                    compute_gradient_shards, self._spec_ref, global_vars, *weight_refs
                )
                self.pool.add(e, refs[-1], tag=refs[:-1])

    def next(self, global_vars: GlobalVars, timer: Callable[[str], TimerStat]) -> Finished:
        """The oldest finished gradient task, launching and waiting (``timer("wait")``) for
        one if none is; RuntimeError once every evaluator has died."""
        while not self.backlog:
            self.launch(global_vars)
            if not len(self.pool):
                raise RuntimeError(
                    f"all {len(self.evaluators.remote_evaluators)} remote evaluators died; "
                    "sharded_ps has no one left to compute gradients"
                )
            with timer("wait"):
                finished = self.pool.wait_any(self.evaluators.get_timeout_s, fetch=True)
            for done in finished:
                if done.error is None:
                    self.backlog.append(done)
                elif self.servers.restore_lost():  # a dead shard's weight ref broke it
                    self.pool.revive(done.actor)
                else:  # raises a real error (e.g. a non-finite loss)
                    handle_failed_task(self.evaluators, self.pool, done)
        return self.backlog.popleft()

    def drop(self) -> None:
        """Forget unapplied gradients: tasks in flight finish unseen (their results are
        freed with their refs).

        CRUCIAL: no ``ray.cancel`` of these actor tasks.  Cancelling queued actor tasks
        can leave a gap in the actor's task sequence numbers; the actor then waits 30 s
        for the missing one and fails its queued tasks with ``ActorUnavailableError``,
        which reads as a dead evaluator (a full test run failed that way once, on a
        healthy evaluator right after a drop, 2026-11-26).  A stale gradient costs the
        evaluator a few milliseconds.
        """
        refs = self.pool.drain()
        self.num_dropped_gradients += len(refs) + len(self.backlog)
        self.backlog.clear()
