"""A bounded pool of in-flight Ray tasks over ``ray.wait`` that tolerates dead actors.

The asynchronous optimizers (``async``, ``sharded_ps``, ``apex``) keep a few tasks in
flight per actor and react to whichever finishes first.  This module is their shared
plumbing: it bounds the tasks per actor, returns finished tasks in completion order,
and turns an actor's death into a recorded event instead of a hang or a crash.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from typing import Any


@dataclasses.dataclass
class Finished:
    """One finished task: the actor that ran it, the caller's tag and the outcome."""

    actor: Any
    tag: Any
    ref: Any
    value: Any = None
    """The fetched result (``fetch=True``), else None."""
    error: BaseException | None = None
    """The exception the task raised, if it failed."""


def is_actor_death(error: BaseException) -> bool:
    """True for errors that mean the actor (process or node) is gone."""
    import ray.exceptions as rex

    return isinstance(error, rex.RayActorError)


class TaskPool:
    """In-flight tasks keyed by object ref, at most ``max_per_actor`` per actor.

    ``add(actor, ref, tag)`` registers a task; ``wait`` returns those that finished.
    An actor whose task fails with an actor-death error is recorded in ``dead`` and its
    other tasks are dropped, so callers stop scheduling on it and never wait on it.
    """

    def __init__(self, max_per_actor: int = 1):
        if max_per_actor < 1:
            raise ValueError(f"max_per_actor must be >= 1, got {max_per_actor}")
        self.max_per_actor = max_per_actor
        self._tasks: dict[Any, tuple[Any, Any]] = {}
        self._per_actor: dict[Any, int] = defaultdict(int)
        self.dead: list[Any] = []
        self.num_failed_tasks = 0
        self.num_lost_tasks = 0
        """Tasks lost with a dead actor: the failed one and those dropped with it."""

    def __len__(self) -> int:
        return len(self._tasks)

    def count(self, actor: Any) -> int:
        """Tasks in flight on ``actor``."""
        return self._per_actor.get(actor, 0)

    def has_capacity(self, actor: Any) -> bool:
        """Whether ``actor`` is alive and has fewer than ``max_per_actor`` tasks."""
        return actor not in self.dead and self.count(actor) < self.max_per_actor

    def add(self, actor: Any, ref: Any, tag: Any = None) -> None:
        """Track ``ref`` (a task running on ``actor``)."""
        self._tasks[ref] = (actor, tag)
        self._per_actor[actor] += 1

    def _pop(self, ref: Any) -> tuple[Any, Any]:
        actor, tag = self._tasks.pop(ref)
        self._per_actor[actor] -= 1
        return actor, tag

    def mark_dead(self, actor: Any) -> None:
        """Forget every task of ``actor`` and refuse new ones."""
        if actor not in self.dead:
            self.dead.append(actor)
        for ref in [r for r, (a, _) in self._tasks.items() if a == actor]:
            self._pop(ref)
            self.num_lost_tasks += 1

    def revive(self, actor: Any) -> None:
        """Take ``actor`` off ``dead`` (its failure was another actor's, e.g. an argument's
        producer died); its dropped tasks stay dropped."""
        if actor in self.dead:
            self.dead.remove(actor)

    def wait(
        self, timeout_s: float | None = None, fetch: bool = True, num_returns: int = 1
    ) -> list[Finished]:
        """Tasks that finished within ``timeout_s`` (at least ``num_returns`` if possible).

        With ``fetch=True`` each result is fetched (``ray.get``); a failed task comes back
        with ``error`` set, and an actor-death error also marks the actor dead.  With
        ``fetch=False`` results stay in the object store (pass ``ref`` on to another
        actor) and failures surface wherever the ref is consumed.
        """
        import ray

        if not self._tasks:
            return []
        refs = list(self._tasks)
        ready, _ = ray.wait(refs, num_returns=min(num_returns, len(refs)), timeout=timeout_s)
        out = []
        for ref in ready:
            if ref not in self._tasks:  # dropped by mark_dead while iterating
                continue
            actor, tag = self._pop(ref)
            done = Finished(actor, tag, ref)
            if fetch:
                try:
                    done.value = ray.get(ref, timeout=0)
                except Exception as e:  # the task or the actor failed
                    done.error = e
                    self.num_failed_tasks += 1
                    if is_actor_death(e):
                        self.num_lost_tasks += 1
                        self.mark_dead(actor)
            out.append(done)
        return out

    def poll(self, timeout_s: float = 0.0, fetch: bool = True) -> list[Finished]:
        """Every task finished so far, waiting up to ``timeout_s`` for the first one."""
        done = self.wait(timeout_s=timeout_s, fetch=fetch) if timeout_s > 0 else []
        return done + self.wait(timeout_s=0, fetch=fetch, num_returns=max(1, len(self)))

    def wait_any(self, deadline_s: float, fetch: bool = True) -> list[Finished]:
        """Block until at least one task finishes; TimeoutError after ``deadline_s``."""
        start = time.monotonic()
        while self._tasks:
            left = deadline_s - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(
                    f"no task finished within {deadline_s:.0f} s ({len(self._tasks)} in flight)"
                )
            done = self.wait(timeout_s=min(left, 1.0), fetch=fetch)
            if done:
                return done
        return []

    def drain(self) -> list[Any]:
        """Forget all in-flight tasks; returns their refs (e.g. to cancel them)."""
        refs = list(self._tasks)
        self._tasks.clear()
        self._per_actor.clear()
        return refs
