"""The loop every learning test runs, its seed, and the record the seed sweep reads.

A fixed seed does not give the same trajectory on another CPU model (float results
differ between kernels), so each learning test is sized for seeds 0-4 with headroom
(``tests/LEARNING.md``).  CI runs seed 0; ``python tests/support/learning_seeds.py`` runs any
learning test over several seeds (``HIERL_LEARNING_SEED``) and prints the table from
the records ``train_until`` appends to ``HIERL_LEARNING_LOG``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from typing import Any

SEED = int(os.environ.get("HIERL_LEARNING_SEED", "0"))
"""The seed of every learning test's trainer (0 in CI)."""


@dataclasses.dataclass
class LearningRun:
    """How one learning run went: ``reached_at`` is the budget count (env steps or
    iterations) at which the metric first reached the threshold, None if it never did."""

    threshold: float
    budget: int
    unit: str
    reached_at: int | None
    best: float
    result: dict[str, Any]

    @property
    def reached(self) -> bool:
        return self.reached_at is not None

    def __str__(self) -> str:
        where = f"at {self.reached_at}" if self.reached else "never"
        return (
            f"threshold {self.threshold} reached {where} of {self.budget} {self.unit} "
            f"(best {self.best:.2f})"
        )


def episode_reward_mean(result: dict[str, Any]) -> float:
    """The default metric: the smoothed mean return."""
    return result["episode_reward_mean"]


def train_until(
    trainer: Any,
    threshold: float,
    budget: int,
    *,
    unit: str = "timesteps_total",
    metric: Callable[[dict[str, Any]], float] = episode_reward_mean,
    ready: Callable[[dict[str, Any]], bool] = lambda result: True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    record_run: bool = True,
) -> LearningRun:
    """Call ``trainer.train()`` until ``metric(result) >= threshold`` or ``result[unit]``
    reaches ``budget``; the trainer is left running (the caller stops it).

    ``ready(result)`` gates when the metric counts (e.g. after 10 episodes);
    ``on_result`` sees every result (per-iteration assertions).  The run is appended to
    ``$HIERL_LEARNING_LOG`` when that is set, unless ``record_run`` is False (a run
    expected not to learn).
    """
    best = -math.inf
    while True:
        result = trainer.train()
        if on_result is not None:
            on_result(result)
        value = metric(result) if ready(result) else -math.inf
        if not math.isnan(value):
            best = max(best, value)
        used = int(result[unit])
        if value >= threshold or used >= budget:
            run = LearningRun(
                threshold, budget, unit, used if value >= threshold else None, best, result
            )
            if record_run:
                record(run)
            return run


def record(run: LearningRun) -> None:
    """Append ``run`` (with the test's id and the seed) to ``$HIERL_LEARNING_LOG``."""
    path = os.environ.get("HIERL_LEARNING_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    line = {
        "test": test,
        "seed": SEED,
        "threshold": run.threshold,
        "budget": run.budget,
        "unit": run.unit,
        "reached_at": run.reached_at,
        "best": run.best,
        "timesteps_total": run.result.get("timesteps_total"),
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
