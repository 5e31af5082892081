"""EvaluatorSet: the driver's local evaluator plus N remote replicas."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from hierl.evaluators.policy_evaluator import PolicyEvaluator
from hierl.evaluators.ray_runtime import DEFAULT_GET_TIMEOUT_S, ensure_ray

T = TypeVar("T")


class EvaluatorSet:
    """Creates, addresses and stops a local evaluator and ``num_evaluators`` Ray actors.

    ``evaluator_kwargs`` are PolicyEvaluator arguments shared by all; each remote gets
    ``worker_index`` 1..N and one torch thread per CPU it reserves.  Remote evaluators
    receive the local evaluator's weights on creation.
    """

    def __init__(
        self,
        evaluator_kwargs: Mapping[str, Any],
        num_evaluators: int = 0,
        num_cpus_per_evaluator: float = 1,
        num_gpus_per_evaluator: float = 0,
        ray_address: str | None = None,
        get_timeout_s: float = DEFAULT_GET_TIMEOUT_S,
        actor_options: Mapping[str, Any] | None = None,
    ):
        self.evaluator_kwargs = dict(evaluator_kwargs)
        self.num_cpus = num_cpus_per_evaluator
        self.num_gpus = num_gpus_per_evaluator
        self.get_timeout_s = get_timeout_s
        self.actor_options = dict(actor_options or {})
        self.local_evaluator = PolicyEvaluator(worker_index=0, **self.evaluator_kwargs)
        self.remote_evaluators: list[Any] = []
        if num_evaluators > 0:
            ensure_ray(ray_address)
            self.remote_evaluators = [self._make_remote(i + 1) for i in range(num_evaluators)]
            self.sync_weights()

    def _make_remote(self, worker_index: int) -> Any:
        cls = PolicyEvaluator.as_remote(
            num_cpus=self.num_cpus, num_gpus=self.num_gpus, **self.actor_options
        )
        threads = max(1, int(self.num_cpus))
        return cls.remote(worker_index=worker_index, num_threads=threads, **self.evaluator_kwargs)

    def get(self, refs: Any) -> Any:
        """``ray.get`` with this set's timeout."""
        import ray

        return ray.get(refs, timeout=self.get_timeout_s)

    def sync_weights(self, global_vars: Mapping[str, Any] | None = None) -> None:
        """Broadcast the local weights to every remote evaluator with a single ``ray.put``."""
        if global_vars:
            self.local_evaluator.set_global_vars(global_vars)
        if not self.remote_evaluators:
            return
        import ray

        ref = ray.put(self.local_evaluator.get_weights())
        self.get([e.set_weights.remote(ref, global_vars) for e in self.remote_evaluators])

    def sync_filters(self) -> None:
        """Merge every remote filter's new statistics into the local one; push back."""
        if not self.remote_evaluators:
            return
        local = self.local_evaluator
        for remote_states in self.get([e.get_filters.remote() for e in self.remote_evaluators]):
            for pid, buffer in remote_states.items():
                local.filters[pid].apply_buffer(buffer)
        self.push_filters()

    def push_filters(self) -> None:
        """Give every remote evaluator the local filters' total statistics."""
        if self.remote_evaluators:
            states = self.local_evaluator.get_filters(flush_after=False)
            self.get([e.sync_filters.remote(states) for e in self.remote_evaluators])

    def foreach_evaluator(self, fn: Callable[[PolicyEvaluator], T]) -> list[T]:
        """``fn(evaluator)`` on the local evaluator, then on every remote (in parallel)."""
        local = fn(self.local_evaluator)
        if not self.remote_evaluators:  # CRUCIAL: ray.get([]) would start Ray
            return [local]
        return [local, *self.get([e.apply.remote(fn) for e in self.remote_evaluators])]

    def stop(self) -> None:
        """Kill the remote actors and close the local envs."""
        self.local_evaluator.stop()
        if self.remote_evaluators:
            import ray

            for e in self.remote_evaluators:
                ray.kill(e)
        self.remote_evaluators = []
