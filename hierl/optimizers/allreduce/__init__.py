"""``allreduce``: the optimizer, what each rank does, collectives and replica state."""

from hierl.optimizers.allreduce.optimizer import AllReduceConfig, AllReduceOptimizer

__all__ = ["AllReduceConfig", "AllReduceOptimizer"]
