"""Policy optimizers, chosen by name (``get_optimizer_class("local")``)."""

from hierl.optimizers.async_grads import AsyncGradientsOptimizer
from hierl.optimizers.auto import AutoOptimizer
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer, TimerStat
from hierl.optimizers.local import LocalOptimizer
from hierl.optimizers.registry import get_optimizer_class, optimizer_names, register_optimizer

__all__ = [
    "AsyncGradientsOptimizer",
    "AutoOptimizer",
    "LocalOptimizer",
    "OptimizerConfig",
    "PolicyOptimizer",
    "TimerStat",
    "get_optimizer_class",
    "optimizer_names",
    "register_optimizer",
]
