"""``apex``: the optimizer, its replay shards and sampling evaluators."""

from hierl.optimizers.apex.optimizer import ApexConfig, ApexOptimizer

__all__ = ["ApexConfig", "ApexOptimizer"]
