"""Algorithms: a Trainer (config + evaluators + named optimizer) per algorithm.

Names are imported lazily so that the registry (and ``hierl --help``) loads no torch.
"""

from __future__ import annotations

from hierl._lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports("hierl.algorithms", globals(), _EXPORTS)
