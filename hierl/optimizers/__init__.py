"""Policy optimizers, chosen by name (``get_optimizer_class("local")``).

``base`` and ``registry`` define the contract and the names; one-file strategies
(``local``, ``async_grads``, ``auto``) sit beside them with the helpers several strategies
share (``task_pool``, ``failures``, ``sgd``, ``learner_thread``); every other strategy is a
package holding its optimizer (``optimizer.py``) and the parts only it uses: ``multi_gpu/``,
``allreduce/``, ``sharded_ps/``, ``apex/``, ``aso/``, ``es/`` and ``replay/`` (whose buffers
``apex`` and AlphaZero share).  Importing this package imports every strategy, so all of them
are registered.
"""

from hierl.optimizers.allreduce import AllReduceOptimizer
from hierl.optimizers.apex import ApexOptimizer
from hierl.optimizers.aso import AsyncSamplesOptimizer
from hierl.optimizers.async_grads import AsyncGradientsOptimizer
from hierl.optimizers.auto import AutoOptimizer
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer
from hierl.optimizers.es import ESOptimizer
from hierl.optimizers.local import LocalOptimizer
from hierl.optimizers.multi_gpu import MultiGPUOptimizer
from hierl.optimizers.registry import (
    get_optimizer_class,
    optimizer_names,
    optimizer_settings,
    register_optimizer,
)
from hierl.optimizers.replay import ReplayOptimizer
from hierl.optimizers.sharded_ps import ShardedPSOptimizer
from hierl.optimizers.timers import TimerStat

__all__ = [
    "AllReduceOptimizer",
    "ApexOptimizer",
    "AsyncGradientsOptimizer",
    "AsyncSamplesOptimizer",
    "AutoOptimizer",
    "ESOptimizer",
    "LocalOptimizer",
    "MultiGPUOptimizer",
    "OptimizerConfig",
    "PolicyOptimizer",
    "ReplayOptimizer",
    "ShardedPSOptimizer",
    "TimerStat",
    "get_optimizer_class",
    "optimizer_names",
    "optimizer_settings",
    "register_optimizer",
]
