"""The replay settings shared by off-policy algorithms (DQN, DDPG and their Ape-X forms).

They carry the names of the ``replay`` optimizer's config (``ReplayConfig``, and so of
``apex``'s) and reach it the way every same-named trainer field reaches its optimizer
(``Trainer._make_optimizer``); ``train_batch_size`` is the number of rows per replayed
batch.  Algorithms override the defaults that suit them.
"""

from __future__ import annotations

import dataclasses

from hierl.algorithms.trainer import TrainerConfig


@dataclasses.dataclass
class OffPolicyConfig(TrainerConfig):
    """TrainerConfig plus the replay buffer and prioritization settings."""

    train_batch_size: int = 32
    """Rows per replayed batch (one learner update each)."""
    buffer_size: int = 50_000
    """Rows kept in replay (over all shards with ``apex``), oldest overwritten first."""
    prioritized_replay: bool = True
    """Proportional prioritized replay by |TD error| (else uniform)."""
    prioritized_replay_alpha: float = 0.6
    """Prioritization exponent alpha: P(i) ∝ p_i^alpha."""
    prioritized_replay_beta: float = 0.4
    """Initial importance-sampling exponent beta."""
    final_prioritized_replay_beta: float = 1.0
    """Beta after annealing (1 fully corrects the sampling bias)."""
    prioritized_replay_beta_annealing_timesteps: int = 20_000
    """Sampled env steps over which beta goes linearly to its final value."""
    prioritized_replay_eps: float = 1e-6
    """Added to |TD error| so that no priority is 0 (also for initial priorities)."""
    learning_starts: int = 1000
    """Stored rows needed before the first update."""
    replay_ratio: float = 1.0
    """Rows replayed per env step sampled."""
    n_step: int = 1
    """Rewards summed in each target before bootstrapping (1: one-step targets)."""
    checkpoint_replay_buffer: bool = False
    """Checkpoints include the replay buffer's rows, priorities and sampling RNG (the
    ``replay`` optimizer; needed for an exact resume; can be large)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("buffer_size", self.buffer_size >= 1, "must be >= 1")
        self.check(
            "learning_starts",
            1 <= self.learning_starts <= self.buffer_size,
            f"must be in [1, buffer_size={self.buffer_size}]",
        )
        self.check("replay_ratio", self.replay_ratio > 0, "must be > 0")
        self.check("prioritized_replay_eps", self.prioritized_replay_eps > 0, "must be > 0")
        self.check("n_step", self.n_step >= 1, "must be >= 1")
