"""Algorithms: a Trainer (config + evaluators + named optimizer) per algorithm.

Names are imported lazily so that the registry (and ``hierl --help``) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BaseConfig": "hierl.algorithms.trainer_base",
    "BaseTrainer": "hierl.algorithms.trainer_base",
    "Trainer": "hierl.algorithms.trainer",
    "TrainerConfig": "hierl.algorithms.trainer",
    "get_trainer_class": "hierl.algorithms.registry",
    "register_trainer": "hierl.algorithms.registry",
    "trainer_names": "hierl.algorithms.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hierl.algorithms' has no attribute '{name}'")
