"""RestartBudget: how many failed actors may be recreated before a failure ends training.

Every component that recreates its failed Ray actors (the evaluator set, the population
trainers, AlphaZero) counts the recreations against one budget, a config setting such as
``max_evaluator_restarts``, and raises its own error when it is used up:

    budget = RestartBudget(config.max_evaluator_restarts, "max_evaluator_restarts",
                           EvaluatorFailureError)
    ...
    except Exception as error:                  # actor ``index`` failed
        budget.check_recreatable(f"evaluator {index}", error)   # its constructor raised?
        budget.check(f"evaluator {index}", error)               # any recreation left?
        recreate(index)
        budget.record(index)

The messages name the failed actor, the setting, the recreations made and the last error,
e.g. ``evaluator 1 failed after max_evaluator_restarts=2 recreations (2 made, ...); the
last error: ...``; the error is chained as ``__cause__``.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable


class RestartBudget:
    """Counts the recreations of failed actors against ``limit``, in all.

    Args:
        limit: recreations allowed in all (>= 0).
        setting: the config setting that sets ``limit`` (messages name it).
        error: the exception class raised when a failure ends training.

    Attributes:
        made: recreations made so far (what a checkpoint keeps: ``get_state``).
        counts: recreations per key (a worker index, a role...) made by this process.
    """

    def __init__(self, limit: int, setting: str, error: type[Exception] = RuntimeError):
        if limit < 0:
            raise ValueError(f"{setting} must be >= 0, got {limit}")
        self.limit = limit
        self.setting = setting
        self.error = error
        self.made = 0
        self.counts: collections.Counter[Hashable] = collections.Counter()

    def check_recreatable(self, what: str, error: BaseException) -> None:
        """Raise ``self.error`` if ``error`` says the actor's constructor raised (Ray's
        ``actor_init_failed``): a new one would fail the same way."""
        if getattr(error, "actor_init_failed", False):
            raise self.error(
                f"{what} could not be created (recreating it would fail the same way): {error}"
            ) from error

    def check(
        self,
        what: str,
        error: BaseException | None,
        *,
        detail: str = "",
        last_error: str | None = None,
    ) -> None:
        """Raise ``self.error`` (``error`` chained) if no recreation is left for ``what``
        (the failed actor, e.g. ``"evaluator 3"``).

        ``detail`` follows the count in the message (``", 2 of evaluator 3"``);
        ``last_error`` replaces ``str(error)`` as the last error's text.
        """
        if self.made >= self.limit:
            last = str(error) if last_error is None else last_error
            raise self.error(
                f"{what} failed after {self.setting}={self.limit} recreations "
                f"({self.made} made{detail}); the last error: {last}"
            ) from error

    def record(self, key: Hashable = None) -> None:
        """Count one recreation (of the actor ``key``)."""
        self.made += 1
        self.counts[key] += 1

    def get_state(self) -> int:
        """The recreations made (a JSON number for checkpoints)."""
        return self.made

    def set_state(self, made: int) -> None:
        """Go on counting from ``made`` recreations (``counts`` stay this process's)."""
        self.made = int(made)
