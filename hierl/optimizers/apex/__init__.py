"""``apex``: the optimizer, its learner thread, replay shards and sampling evaluators."""

from hierl.optimizers.apex.optimizer import ApexConfig, ApexOptimizer

__all__ = ["ApexConfig", "ApexOptimizer"]
