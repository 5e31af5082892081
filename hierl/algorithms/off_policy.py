"""What off-policy algorithms (DQN, DDPG and their Ape-X presets) share: n-step targets.

Their replay settings (buffer, prioritization, warm-up, replay ratio) belong to the
``replay`` and ``apex`` optimizers and are declared only in those optimizers' configs;
each algorithm states its own values for them in ``optimizer_defaults``.
"""

from __future__ import annotations

import dataclasses

from hierl.algorithms.trainer import TrainerConfig


@dataclasses.dataclass
class OffPolicyConfig(TrainerConfig):
    """TrainerConfig plus n-step targets; the replay optimizers by default."""

    supported_optimizers = ("replay", "apex")
    default_optimizer = "replay"

    n_step: int = 1
    """Rewards summed in each target before bootstrapping (1: one-step targets)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("n_step", self.n_step >= 1, "must be >= 1")
