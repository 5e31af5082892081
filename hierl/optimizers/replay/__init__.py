"""``replay``: the optimizer, and the replay buffers it shares with ``apex`` and AlphaZero."""

from hierl.optimizers.replay.optimizer import ReplayConfig, ReplayOptimizer

__all__ = ["ReplayConfig", "ReplayOptimizer"]
