"""``multi_gpu``: the optimizer, its multi-device learner and the device towers."""

from hierl.optimizers.multi_gpu.optimizer import MultiGPUConfig, MultiGPUOptimizer

__all__ = ["MultiGPUConfig", "MultiGPUOptimizer"]
