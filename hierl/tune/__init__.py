"""Ray Tune integration: every registered Trainer as a Tune Trainable.

Importing this package registers ``hierl/<NAME>`` for every algorithm, so
``tune.Tuner("hierl/PPO", param_space=...)`` works; ``trainable("PPO")`` gives the class.
A trial that can never be placed fails ``Tuner.fit()`` at once; pass
``tune.RunConfig(callbacks=[ResourceWaitLogger()])`` to get a log line for a trial that
fits but waits for busy resources (``hierl tune`` installs it).
Only ``hierl.tune`` and the CLI import this package (it imports Ray Tune).
"""

from __future__ import annotations

from hierl.tune.experiments import ResourceWaitLogger
from hierl.tune.trainable import (
    DEFAULT_METRIC,
    DEFAULT_MODE,
    TrainerTrainable,
    register_trainables,
    trainable,
    validate_param_space,
)

register_trainables()

__all__ = [
    "DEFAULT_METRIC",
    "DEFAULT_MODE",
    "ResourceWaitLogger",
    "TrainerTrainable",
    "register_trainables",
    "trainable",
    "validate_param_space",
]
