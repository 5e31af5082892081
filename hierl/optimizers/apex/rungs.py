"""The training return of each rung of Ape-X's epsilon ladder.

Ape-X's actors explore at different epsilons (``samplers.epsilon_ladder``): with two
evaluators, one plays at 0.4 and the other at 0.4 ** 8.  The trainer's
``episode_reward_mean`` pools their episodes, so it mixes near-random play with
near-greedy play and can stay far below what the policy achieves.  ``RungReturns``
keeps each rung's last episodes apart: the last rung's window is the training return
that compares with DQN's (whose epsilon anneals to 0.01) and with the published curves
of the SB3 zoo (the mean return of the last 100 training episodes).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hierl.evaluators import EpisodeRecord


class RungReturns:
    """The returns of the last ``window`` episodes of each rung (rung ``i`` is sampling
    evaluator ``i``: the remote evaluator of worker index ``i``, or the local one as
    rung 1 when it samples), and the episodes each rung finished in all.

    Result keys (``metrics``): ``rung_<i>/episode_reward_mean`` (nan before the rung's
    first episode), ``rung_<i>/episodes_total`` and ``rung_<i>/epsilon``.
    """

    def __init__(self, window: int):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = int(window)
        self.returns: dict[int, deque[float]] = {}
        self.totals: dict[int, int] = {}

    def add(self, rung: int, episodes: Iterable[EpisodeRecord]) -> None:
        """Count ``episodes``, finished by rung ``rung`` (1-based)."""
        rewards = [float(e.episode_reward) for e in episodes]
        self.returns.setdefault(rung, deque(maxlen=self.window)).extend(rewards)
        self.totals[rung] = self.totals.get(rung, 0) + len(rewards)

    def metrics(self, epsilons: Sequence[float]) -> dict[str, float]:
        """The keys above for rungs ``1..len(epsilons)`` (``epsilons[i - 1]``: rung i's)."""
        out: dict[str, float] = {}
        for rung, epsilon in enumerate(epsilons, start=1):
            window = self.returns.get(rung)
            out[f"rung_{rung}/episode_reward_mean"] = float(np.mean(window)) if window else math.nan
            out[f"rung_{rung}/episodes_total"] = self.totals.get(rung, 0)
            out[f"rung_{rung}/epsilon"] = float(epsilon)
        return out

    def get_state(self) -> dict[str, Any]:
        """The windows as float64 arrays and the totals, by rung (a checkpoint entry of
        the optimizer)."""
        returns = {str(r): np.asarray(list(w), dtype=np.float64) for r, w in self.returns.items()}
        return {"returns": returns, "totals": {str(r): n for r, n in self.totals.items()}}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state`` (each window keeps its last ``window`` returns).

        Raises:
            ValueError: a rung that is not 1, 2, ..., returns that are not a 1-D array
                of numbers, or a total that is not an integer >= 0.
        """
        returns, totals = {}, {}
        for key, values in dict(state.get("returns", {})).items():
            array = np.asarray(values)
            if array.ndim != 1 or array.dtype.kind not in "fiu":
                raise ValueError(f"rung {key!r}: episode returns must be a 1-D array of numbers")
            returns[_rung(key)] = deque(array.astype(np.float64).tolist(), maxlen=self.window)
        for key, total in dict(state.get("totals", {})).items():
            if isinstance(total, bool) or not isinstance(total, (int, np.integer)) or total < 0:
                raise ValueError(
                    f"rung {key!r}: episodes_total must be an integer >= 0, got {total!r}"
                )
            totals[_rung(key)] = int(total)
        self.returns, self.totals = returns, totals


def _rung(key: Any) -> int:
    """A rung number from a checkpoint's key: an integer >= 1."""
    try:
        rung = int(key)
    except (TypeError, ValueError):
        rung = 0
    if rung < 1 or str(rung) != str(key):
        raise ValueError(f"rungs are numbered 1, 2, ...; got {key!r}")
    return rung
