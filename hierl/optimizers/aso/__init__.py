"""``aso``: asynchronous samples (IMPALA / APPO): the optimizer and its aggregation actors."""

from hierl.optimizers.aso.optimizer import ASOConfig, AsyncSamplesOptimizer

__all__ = ["ASOConfig", "AsyncSamplesOptimizer"]
