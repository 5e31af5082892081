"""Per-phase timers of the optimizers (``<phase>_time_ms`` in their stats)."""

from __future__ import annotations

import time
from typing import Any


class TimerStat:
    """Context-manager timer keeping the total and the mean of its intervals."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.count = 0
        self._start = 0.0

    def __enter__(self) -> TimerStat:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.push(time.perf_counter() - self._start)

    def push(self, seconds: float) -> None:
        """Record an interval measured elsewhere (e.g. inside a remote evaluator)."""
        self.total_s += seconds
        self.count += 1

    @property
    def mean_ms(self) -> float:
        """Mean interval in milliseconds (0 before the first one)."""
        return 1000.0 * self.total_s / self.count if self.count else 0.0
