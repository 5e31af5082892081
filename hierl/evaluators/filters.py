"""Observation filters: running mean/std normalisation whose statistics sync across evaluators.

Each evaluator's filter keeps the total running statistics plus a *buffer* of what it saw
since the last sync.  The driver collects the buffers, merges them into its own filter
(parallel variance merge, Chan et al. 1979) and pushes the merged statistics back, so
every evaluator normalises with the same statistics.

Which observations are recorded is the samplers' rule, the same in every autoreset mode
and in the multi-agent sampler: each observation a policy acts on, once; an episode's
final observation is normalised (``update=False``) but not recorded.  Rows with a NaN or
inf are never recorded (``MeanStdFilter.num_nonfinite_rows_skipped`` counts them): one
would make the running statistics, and every later normalised observation, NaN for good.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

STD_EPSILON = 1e-8
"""Added to the standard deviation before dividing by it."""


class RunningStat:
    """Count, mean and sum of squared deviations of a stream of arrays of one shape."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(shape)
        self.n = 0
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.m2 = np.zeros(self.shape, dtype=np.float64)

    def push_batch(self, x: np.ndarray) -> None:
        """Add a batch of rows (shape ``(B, *shape)``)."""
        if len(x) == 0:
            return
        self.merge_moments(*batch_moments(x))

    def merge(self, other: RunningStat) -> None:
        """Merge another stream's statistics into this one."""
        if other.n == 0:
            return
        self.merge_moments(other.n, other.mean, other.m2)

    def merge_moments(self, n_other: int, mean: np.ndarray, m2: np.ndarray | float) -> None:
        """Merge the count, mean and sum of squared deviations of other data (Chan et al.)."""
        n = self.n + n_other
        delta = mean - self.mean
        self.mean = self.mean + delta * (n_other / n)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * n_other / n)
        self.n = n

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation (1 where fewer than two samples were seen)."""
        if self.n < 2:
            return np.ones(self.shape)
        return np.sqrt(self.m2 / self.n)

    def get_state(self) -> dict[str, Any]:
        """JSON/array state."""
        return {"n": self.n, "mean": self.mean.copy(), "m2": self.m2.copy()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunningStat:
        """Inverse of ``get_state``."""
        rs = cls(np.shape(state["mean"]))
        rs.n = int(state["n"])
        rs.mean = np.array(state["mean"], dtype=np.float64)
        rs.m2 = np.array(state["m2"], dtype=np.float64)
        return rs


def batch_moments(x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray | float]:
    """``(count, mean, sum of squared deviations)`` of a non-empty batch of rows.

    One row (a single env's step, the common case) is its own mean with zero spread:
    the same numbers as the general formula, without its reductions.
    """
    x = np.asarray(x, dtype=np.float64)
    if len(x) == 1:
        return 1, x[0], 0.0
    mean = x.mean(axis=0)
    return len(x), mean, ((x - mean) ** 2).sum(axis=0)


class NoFilter:
    """Identity filter."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.shape = shape

    def __call__(self, x: np.ndarray, update: bool | np.ndarray = True) -> np.ndarray:
        """Return ``x`` unchanged (``update`` as for ``MeanStdFilter``)."""
        return x

    def record(self, x: np.ndarray) -> None:
        """Record every row of the batch ``x`` as ``self(x)`` does, without normalising
        it (for callers that only feed the statistics, e.g. ES after an episode)."""

    def frozen(self) -> Callable[[np.ndarray], np.ndarray]:
        """``x -> self(x, update=False)`` with the statistics as they are now: for loops
        that normalise many single rows without recording them (ES's episodes).  The
        result is only valid until the statistics change."""
        return functools.partial(self.__call__, update=False)

    def normalization(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The filter as ``clip((x - mean) / scale, -clip, clip)``: ``(mean, scale,
        clip)`` in float64 (copies), for exported models that fold it in; None for the
        identity."""
        return None

    def get_state(self) -> dict[str, Any]:
        """Nothing to save."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""

    def flush_buffer(self) -> dict[str, Any]:
        """Nothing seen since the last sync."""
        return {}

    def apply_buffer(self, buffer: dict[str, Any]) -> None:
        """Nothing to merge."""

    def get_checkpoint_state(self) -> dict[str, Any]:
        """Everything to resume exactly: ``get_state`` plus the unsynced buffer."""
        return self.get_state()

    def set_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``get_checkpoint_state``."""
        self.set_state(state)


class MeanStdFilter(NoFilter):
    """Normalise to zero mean and unit variance with running statistics, then clip."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0):
        super().__init__(shape)
        self.clip = clip
        self.rs = RunningStat(shape)
        self.buffer = RunningStat(shape)
        self.num_nonfinite_rows_skipped = 0
        """Rows not recorded because they hold a NaN or inf (or overflow the moments)."""

    def __call__(self, x: np.ndarray, update: bool | np.ndarray = True) -> np.ndarray:
        """Normalise a batch ``x`` of shape ``(B, *shape)``, recording it first.

        ``update`` is True (record every row), False (record none) or a ``(B,)`` boolean
        mask of the rows to record; all rows are normalised with the updated statistics.
        """
        if np.ndim(update) == 0:
            recorded = x if update else x[:0]
        else:
            mask = np.asarray(update, dtype=bool)
            if mask.shape != (len(x),):
                raise ValueError(f"update mask of shape {mask.shape} for {len(x)} rows")
            recorded = x[mask]
        self.record(recorded)
        out = x - self.rs.mean
        out /= self.rs.std + STD_EPSILON
        # clip((x - mean) / std, -clip, clip) in place (np.clip's dispatch costs more
        # than the arithmetic on one env's row)
        np.minimum(out, self.clip, out=out)
        np.maximum(out, -self.clip, out=out)
        return out.astype(np.float32)

    def record(self, x: np.ndarray) -> None:
        """Record every row of the batch ``x`` as ``self(x)`` does, without normalising
        it (``__call__`` records through this method)."""
        if len(x):
            self._record(x)

    def _record(self, rows: np.ndarray) -> None:
        """Merge ``rows`` into both streams, leaving out those with a NaN or inf (all of
        them if the merged statistics would still not be finite, e.g. overflow); those
        are counted and a warning is logged each time the count passes a power of 2."""
        if self._merge(batch_moments(rows)):  # the common case: one check, on (shape,)
            return
        keep = np.isfinite(np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)).all(axis=1)
        if not (keep.any() and self._merge(batch_moments(rows[keep]))):
            keep[:] = False
        skipped = int(len(keep) - keep.sum())
        self.num_nonfinite_rows_skipped += skipped
        count = self.num_nonfinite_rows_skipped
        if count - skipped < 2 ** (count.bit_length() - 1):
            logger.warning(
                "MeanStdFilter: %d observation rows with NaN or inf not recorded (%d so far); "
                "the running statistics stay finite",
                skipped,
                count,
            )

    def _merge(self, moments: tuple) -> bool:
        """Merge ``moments`` into both streams if the total statistics stay finite."""
        old = self.rs.n, self.rs.mean, self.rs.m2
        with np.errstate(over="ignore", invalid="ignore"):
            self.rs.merge_moments(*moments)
        if np.isfinite(self.rs.mean).all() and np.isfinite(self.rs.m2).all():
            self.buffer.merge_moments(*moments)
            return True
        self.rs.n, self.rs.mean, self.rs.m2 = old  # merge_moments made new arrays
        return False

    def normalization(self) -> tuple[np.ndarray, np.ndarray, float]:
        """``(mean, std + STD_EPSILON, clip)`` of the running statistics (see
        ``NoFilter.normalization``)."""
        return self.rs.mean.copy(), self.rs.std + STD_EPSILON, float(self.clip)

    def frozen(self) -> Callable[[np.ndarray], np.ndarray]:
        """``self(x, update=False)`` with the mean and ``std + STD_EPSILON`` computed once
        (the same arithmetic, bit for bit): calling the filter recomputes the std from
        the moments on every call, which costs more than the normalisation of one row.
        A subclass that overrides ``__call__`` gets the plain call."""
        if type(self).__call__ is not MeanStdFilter.__call__:
            return super().frozen()
        mean, scale, clip = self.normalization()

        def normalize(x: np.ndarray) -> np.ndarray:
            out = x - mean
            out /= scale
            np.minimum(out, clip, out=out)
            np.maximum(out, -clip, out=out)
            return out.astype(np.float32)

        return normalize

    def get_state(self) -> dict[str, Any]:
        """Total statistics (the buffer is transient)."""
        return {"rs": self.rs.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Replace the total statistics, keeping this filter's unsynced buffer.

        Raises:
            ValueError: the statistics are of another observation shape.
        """
        self.rs = self._checked(state["rs"], "statistics")

    def _checked(self, state: dict[str, Any], what: str) -> RunningStat:
        rs = RunningStat.from_state(state)
        if rs.shape != tuple(self.shape):
            raise ValueError(
                f"MeanStdFilter {what} have shape {rs.shape}, this filter {tuple(self.shape)}"
            )
        return rs

    def get_checkpoint_state(self) -> dict[str, Any]:
        """Total statistics and the unsynced buffer."""
        return {"rs": self.rs.get_state(), "buffer": self.buffer.get_state()}

    def set_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``get_checkpoint_state`` (a state without a buffer keeps this one's)."""
        self.set_state(state)
        if "buffer" in state:
            self.buffer = self._checked(state["buffer"], "buffer statistics")

    def flush_buffer(self) -> dict[str, Any]:
        """Return and clear the statistics gathered since the last flush."""
        out = self.buffer.get_state()
        self.buffer = RunningStat(self.shape)
        return out

    def apply_buffer(self, buffer: dict[str, Any]) -> None:
        """Merge another evaluator's flushed buffer into the total statistics."""
        if buffer:
            self.rs.merge(RunningStat.from_state(buffer))


FILTERS = {"NoFilter": NoFilter, "MeanStdFilter": MeanStdFilter}


def make_filter(name: str, shape: tuple[int, ...]) -> NoFilter:
    """Build a filter by name (``NoFilter`` or ``MeanStdFilter``)."""
    if name not in FILTERS:
        raise ValueError(f"unknown observation_filter '{name}'; valid: {', '.join(FILTERS)}")
    return FILTERS[name](shape)
