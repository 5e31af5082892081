"""``sharded_ps``: the optimizer, parameter shards, sharding and the gradient pipeline."""

from hierl.optimizers.sharded_ps.optimizer import ShardedPSConfig, ShardedPSOptimizer

__all__ = ["ShardedPSConfig", "ShardedPSOptimizer"]
