"""Algorithms: a Trainer (config + evaluators + named optimizer) per algorithm."""

from hierl.algorithms.registry import get_trainer_class, register_trainer, trainer_names
from hierl.algorithms.trainer import Trainer, TrainerConfig

__all__ = ["Trainer", "TrainerConfig", "get_trainer_class", "register_trainer", "trainer_names"]
