"""EvaluatorSet: the driver's local evaluator plus N remote replicas, and their failures.

The set is the one place that decides what happens when a remote evaluator fails (its
process or node died, or its env raised): every optimizer hands the failure to
``EvaluatorSet.handle_failure`` and goes on with whatever handle it returns.

* **recreate** (default): a new actor is started with the same ``worker_index`` and
  options, put in the failed one's place in ``remote_evaluators`` (order and indices
  stay stable), and before any task of the caller reaches it, it is sent the local
  evaluator's current weights, observation-filter state and the last global counters
  (Ray runs one caller's calls on an actor in submission order, so nothing waits).
  At most ``max_evaluator_restarts`` recreations in all.  Failures that recreating
  could only repeat end training at once: an evaluator whose constructor raised, and a
  recreated evaluator whose env fails again before its first env step (e.g. an env
  failing in every ``reset``).
* **drop** (``recreate_failed_evaluators=False``): the failed evaluator is skipped from
  then on; training ends when none is left.
* **fail fast** (``fail_fast=True``): the original error (with the remote traceback)
  is re-raised.

A failure is an actor death (``RayActorError``: killed, crashed, node lost) or an
``EnvError`` raised inside the evaluator.  Other errors
(e.g. a non-finite loss) are bugs, not failures: they propagate unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from hierl.evaluators.env import EnvError
from hierl.evaluators.external.evaluator import ExternalEvaluator
from hierl.evaluators.offline.evaluator import OfflineEvaluator
from hierl.evaluators.policy_evaluator import PolicyEvaluator
from hierl.evaluators.ray_runtime import DEFAULT_GET_TIMEOUT_S, ensure_ray
from hierl.evaluators.restarts import RestartBudget
from hierl.evaluators.spec import EvaluatorSpec
from hierl.policy_graph import GlobalVars

T = TypeVar("T")
logger = logging.getLogger(__name__)

DEFAULT_MAX_EVALUATOR_RESTARTS = 100
"""Recreations an evaluator set makes in all before a failure ends training."""


class EvaluatorFailureError(RuntimeError):
    """Evaluator failures that end training (restarts used up, a reproducible failure,
    or no evaluator left); the last failure's error is chained as ``__cause__``."""


def env_error_of(error: BaseException) -> EnvError | None:
    """The EnvError behind ``error`` (itself, or the cause a ``RayTaskError`` wraps)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, EnvError):
        return cause
    return error if isinstance(error, EnvError) else None


def is_evaluator_failure(error: BaseException) -> bool:
    """Whether ``error`` from a remote evaluator's task means that evaluator failed: its
    actor is gone (process or node) or its env raised."""
    import ray.exceptions as rex

    return isinstance(error, rex.RayActorError) or env_error_of(error) is not None


def evaluator_class(spec: EvaluatorSpec) -> type[PolicyEvaluator]:
    """OfflineEvaluator when the spec's input has logged data, ExternalEvaluator when apps
    drive the episodes (``input: "external"``), else PolicyEvaluator."""
    if spec.input is not None and spec.input.is_external:
        return ExternalEvaluator
    return OfflineEvaluator if spec.input is not None and spec.input.offline else PolicyEvaluator


class EvaluatorSet:
    """Creates, addresses, recreates and stops a local evaluator and N Ray actors.

    Every evaluator is built from ``spec`` (an ``EvaluatorSpec``; a failed one is
    recreated from it too): the local one with ``worker_index`` 0, each remote with
    ``worker_index`` 1..N and one torch thread per CPU it reserves.  Remote evaluators
    receive the local evaluator's weights on creation.  ``actor_options`` go to
    ``ray.remote`` (e.g. ``{"scheduling_strategy": "SPREAD"}``).  See the module
    docstring for ``recreate_failed_evaluators``, ``max_evaluator_restarts`` and
    ``fail_fast``.
    """

    def __init__(
        self,
        spec: EvaluatorSpec,
        num_evaluators: int = 0,
        num_cpus_per_evaluator: float = 1,
        num_gpus_per_evaluator: float = 0,
        ray_address: str | None = None,
        get_timeout_s: float = DEFAULT_GET_TIMEOUT_S,
        actor_options: Mapping[str, Any] | None = None,
        recreate_failed_evaluators: bool = True,
        max_evaluator_restarts: int = DEFAULT_MAX_EVALUATOR_RESTARTS,
        fail_fast: bool = False,
    ):
        self.spec = spec
        self.num_cpus = num_cpus_per_evaluator
        self.num_gpus = num_gpus_per_evaluator
        self.get_timeout_s = get_timeout_s
        self.actor_options = dict(actor_options or {})
        self.evaluator_class = evaluator_class(spec)
        self.local_evaluator = self.evaluator_class(spec, worker_index=0)
        self.remote_evaluators: list[Any] = []
        self._init_failure_handling(recreate_failed_evaluators, max_evaluator_restarts, fail_fast)
        if num_evaluators > 0:
            ensure_ray(ray_address)
            self.remote_evaluators = [self._make_remote(i + 1) for i in range(num_evaluators)]
            self.sync_weights()

    @classmethod
    def over(cls, local: PolicyEvaluator, remotes: Sequence[Any] = ()) -> EvaluatorSet:
        """A set over evaluators created elsewhere.  It has no spec to recreate them from:
        a failed remote evaluator is dropped."""
        evaluators = cls.__new__(cls)
        evaluators.spec = None
        evaluators.local_evaluator = local
        evaluators.remote_evaluators = list(remotes)
        evaluators.get_timeout_s = DEFAULT_GET_TIMEOUT_S
        evaluators._init_failure_handling(recreate=False, max_restarts=0, fail_fast=False)
        return evaluators

    def _init_failure_handling(self, recreate: bool, max_restarts: int, fail_fast: bool) -> None:
        self.recreate_failed_evaluators = recreate
        self.fail_fast = fail_fast
        self.restarts = RestartBudget(max_restarts, "max_evaluator_restarts", EvaluatorFailureError)
        """Recreations made, by worker index, against ``max_evaluator_restarts``."""
        self.global_vars: GlobalVars | None = None
        """The last global counters pushed (``sync_weights`` / ``set_global_vars``)."""
        self.failures: list[tuple[int, str]] = []
        """``(worker_index, error text)`` of every failure handled, oldest first."""
        self._dropped: list[Any] = []
        self._replaced: dict[Any, int] = {}  # old handle → worker index

    @property
    def max_evaluator_restarts(self) -> int:
        """Recreations allowed in all."""
        return self.restarts.limit

    @property
    def num_evaluator_restarts(self) -> int:
        """Remote evaluators recreated so far."""
        return self.restarts.made

    @property
    def restarts_per_index(self) -> dict[int, int]:
        """worker_index → times that evaluator was recreated."""
        return dict(self.restarts.counts)

    def _make_remote(self, worker_index: int) -> Any:
        cls = self.evaluator_class.as_remote(
            num_cpus=self.num_cpus, num_gpus=self.num_gpus, **self.actor_options
        )
        threads = max(1, int(self.num_cpus))
        return cls.remote(self.spec, worker_index=worker_index, num_threads=threads)

    # -- health --------------------------------------------------------------------------
    def healthy_evaluators(self) -> list[Any]:
        """The remote evaluators not dropped after a failure (recreated ones included)."""
        return [e for e in self.remote_evaluators if e not in self._dropped]

    @property
    def num_healthy_evaluators(self) -> int:
        """How many remote evaluators are in service."""
        return len(self.healthy_evaluators())

    def worker_index(self, actor: Any) -> int:
        """The worker index (1..N) of a current remote evaluator handle."""
        return self.remote_evaluators.index(actor) + 1

    def handle_failure(self, actor: Any, error: BaseException, weights: Any = None) -> Any:
        """React to ``error`` from a task of remote evaluator ``actor``; see the module doc.

        Returns the handle now in ``actor``'s place (a new actor when recreated, the
        current one if ``actor`` was already replaced), or None when it was dropped.
        ``weights`` (a dict or object ref) replaces the local evaluator's weights as the
        new actor's starting point.  Raises ``error`` itself in fail-fast mode and
        EvaluatorFailureError when training cannot go on.
        """
        if actor not in self.remote_evaluators:
            if actor in self._dropped:
                return None
            if actor in self._replaced:
                return self.remote_evaluators[self._replaced[actor] - 1]
            raise error  # not one of ours
        if actor in self._dropped:
            return None
        index = self.worker_index(actor)
        self.failures.append((index, f"{type(error).__name__}: {error}"))
        logger.warning("remote evaluator %d failed: %s: %s", index, type(error).__name__, error)
        if self.fail_fast:
            raise error
        if not self.recreate_failed_evaluators:
            self._dropped.append(actor)
            if not self.healthy_evaluators():
                raise EvaluatorFailureError(
                    f"all {len(self.remote_evaluators)} remote evaluators have died (or "
                    f"failed; recreate_failed_evaluators is off); the last, evaluator "
                    f"{index}: {error}"
                ) from error
            return None
        what = f"evaluator {index}"
        self.restarts.check_recreatable(what, error)
        env_error = env_error_of(error)
        if env_error is not None and env_error.before_first_step and self._restarts(index):
            raise EvaluatorFailureError(
                f"evaluator {index} was recreated and failed again before its first env "
                f"step, so recreating it cannot help (an env that fails on every reset?): "
                f"{env_error}"
            ) from error
        self.restarts.check(what, error, detail=f", {self._restarts(index)} of {what}")
        return self._recreate(actor, index, weights)

    def _restarts(self, index: int) -> int:
        return self.restarts.counts[index]

    def _recreate(self, actor: Any, index: int, weights: Any) -> Any:
        import ray

        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor, no_restart=True)  # e.g. its env raised: the process is alive
        new = self._make_remote(index)
        self.remote_evaluators[index - 1] = new
        self._replaced[actor] = index
        self.restarts.record(index)
        # CRUCIAL: queued before any caller's task (an actor runs one caller's calls in
        # order), so the new evaluator never samples with its initial random weights.
        if weights is None:
            weights = ray.put(self.local_evaluator.get_weights())
        new.set_weights.remote(weights, self.global_vars)
        new.sync_filters.remote(self.local_evaluator.get_filters(flush_after=False))
        return new

    # -- calls ---------------------------------------------------------------------------
    def get(self, refs: Any) -> Any:
        """``ray.get`` with this set's timeout."""
        import ray

        return ray.get(refs, timeout=self.get_timeout_s)

    def call_remotes(
        self, submit: Callable[[Any], Any], weights: Any = None
    ) -> list[tuple[Any, Any]]:
        """``submit(actor) -> ref`` on every healthy remote evaluator; ``(actor, result)``
        of those that succeeded.  Failures go to ``handle_failure`` (the replacement
        gets no task from this call; ``weights`` as there); other errors propagate.
        Waits at most ``get_timeout_s`` in all."""
        import ray

        pairs = [(e, submit(e)) for e in self.healthy_evaluators()]
        deadline = time.monotonic() + self.get_timeout_s
        out = []
        for actor, ref in pairs:
            try:
                out.append((actor, ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))))
            except Exception as error:
                if not is_evaluator_failure(error):
                    raise
                self.handle_failure(actor, error, weights)
        return out

    def set_global_vars(self, global_vars: GlobalVars) -> None:
        """Give the local evaluator ``global_vars`` and remember them for new evaluators."""
        self.global_vars = global_vars
        self.local_evaluator.set_global_vars(global_vars)

    def sync_weights(self, global_vars: GlobalVars | None = None) -> None:
        """Broadcast the local weights to every remote evaluator with a single ``ray.put``."""
        if global_vars is not None:
            self.set_global_vars(global_vars)
        if not self.remote_evaluators:
            return
        import ray

        ref = ray.put(self.local_evaluator.get_weights())
        self.call_remotes(lambda e: e.set_weights.remote(ref, global_vars), weights=ref)

    def sync_filters(self) -> None:
        """Merge every remote filter's new statistics into the local one; push back."""
        if not self.remote_evaluators:
            return
        local = self.local_evaluator
        for _, remote_states in self.call_remotes(lambda e: e.get_filters.remote()):
            for pid, buffer in remote_states.items():
                local.filters[pid].apply_buffer(buffer)
        self.push_filters()

    def push_filters(self) -> None:
        """Give every remote evaluator the local filters' total statistics."""
        if self.remote_evaluators:
            states = self.local_evaluator.get_filters(flush_after=False)
            self.call_remotes(lambda e: e.sync_filters.remote(states))

    def input_states(self) -> dict[str, Any]:
        """The reading positions of the remote offline evaluators, by worker index
        (``OfflineEvaluator.input_state``); empty when they read no logged data.

        Positions are taken after the evaluators' queued tasks: batches an asynchronous
        optimizer has requested but not yet consumed count as read."""
        if not self.remote_evaluators or not isinstance(self.local_evaluator, OfflineEvaluator):
            return {}
        pairs = self.call_remotes(lambda e: e.input_state.remote())
        return {str(self.worker_index(actor)): state for actor, state in pairs}

    def set_input_states(self, states: Mapping[str, Any]) -> None:
        """Inverse of ``input_states``; evaluators without a saved position start over."""
        if states and self.remote_evaluators:
            self.call_remotes(
                lambda e: e.set_input_state.remote(states.get(str(self.worker_index(e))))
            )

    def foreach_evaluator(self, fn: Callable[[PolicyEvaluator], T]) -> list[T]:
        """``fn(evaluator)`` on the local evaluator, then on every healthy remote (in
        parallel); a remote that fails meanwhile is handled and left out of the result."""
        local = fn(self.local_evaluator)
        if not self.remote_evaluators:  # CRUCIAL: ray.get([]) would start Ray
            return [local]
        return [local, *(v for _, v in self.call_remotes(lambda e: e.apply.remote(fn)))]

    def stop(self) -> None:
        """Stop every evaluator (their output files are finished), then kill the actors."""
        self.local_evaluator.stop()
        if self.remote_evaluators:
            import ray

            if self.spec is not None and self.spec.output is not None:
                stops = [e.stop.remote() for e in self.healthy_evaluators()]
                with contextlib.suppress(Exception):  # a dead one has left its parts
                    ray.get(stops, timeout=self.get_timeout_s)
            for e in self.remote_evaluators:
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(e)
        self.remote_evaluators = []
