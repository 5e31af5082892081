"""``es``: the optimizer, its rollouts, aggregation tree, noise table and update numerics."""

from hierl.optimizers.es.optimizer import ESOptimizer, ESOptimizerConfig

__all__ = ["ESOptimizer", "ESOptimizerConfig"]
