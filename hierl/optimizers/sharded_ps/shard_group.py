"""The driver's handle on the K ``ParameterShard`` servers of the ``sharded_ps`` optimizer.

``ShardGroup`` makes the shards (in process, or as Ray actors when given a ``get`` to
wait on their results), calls a method on all of them and moves whole weight vectors in
and out through a ``ShardSpec``.  It also keeps the local evaluator in step with them: a
``version`` is bumped whenever the shards' weights change, and ``local_version`` is the
version the local evaluator holds.  For actors it keeps refs to the latest weights and
counts the array bytes that pass through the driver.

A shard actor that dies is recreated from the driver's latest copy of the weights
(``synced``: the local evaluator's trainable weights as last pushed or pulled) with a
fresh Adam for its slice (its moments are lost); ``restore_lost`` does it, and every
call that meets a dead shard calls it and retries once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.sharded_ps.param_server import (
    ParameterShard,
    gather_adam_state,
    load_weight_shards,
    split_adam_state,
)
from hierl.optimizers.sharded_ps.sharding import ShardSpec
from hierl.optimizers.task_pool import is_actor_death
from hierl.sample_batch import DEFAULT_POLICY_ID


class ShardGroup:
    """K ``ParameterShard``s holding the trainable weights of ``local``'s default policy.

    Args:
        spec: the layout of the trainable weights over the shards.
        local: the driver's evaluator, which mirrors the shards between steps.
        trainable: its trainable weights now, one array per ``spec.names``.
        lr: Adam's learning rate.
        get: None for in-process shards; otherwise the shards are Ray actors and ``get``
            waits for their results (e.g. ``EvaluatorSet.get``, with the set's timeout).
        num_cpus: CPUs each shard actor reserves (its torch threads: at least 1).
    """

    def __init__(
        self,
        spec: ShardSpec,
        local: PolicyEvaluator,
        trainable: list[np.ndarray],
        lr: float,
        get: Callable[[list[Any]], list[Any]] | None = None,
        num_cpus: float = 0.0,
    ):
        self.spec = spec
        self.local = local
        self.lr = lr
        self.remote = get is not None
        self._get = get
        self.version = 0
        """Bumped whenever the shards' weights change."""
        self.local_version = 0
        """The version the local evaluator holds."""
        self.synced = trainable
        """The local evaluator's trainable weights as last pushed or pulled."""
        self.bytes_through_driver = 0
        """Weight, gradient and Adam-moment bytes the driver sent to or fetched from the
        shard actors (in-process shards count nothing)."""
        self.weight_refs: list[Any] = []
        """Actors: refs to the shards' latest weights (handed on to the evaluators)."""
        self.num_shard_restarts = 0
        """Shard actors recreated after they died."""
        initial = spec.split(trainable)
        if not self.remote:
            self.shards: list[Any] = [ParameterShard(w, lr) for w in initial]
            return
        import ray

        self._actor_class = ray.remote(num_cpus=num_cpus)(ParameterShard)
        self._threads = max(1, int(num_cpus))
        self.shards = [self._actor_class.remote(w, self.lr, self._threads) for w in initial]
        self._count(initial)
        self.weight_refs = [s.get_weights.remote() for s in self.shards]

    def _count(self, arrays: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
        """Add ``arrays`` (sent to or fetched from the actors) to ``bytes_through_driver``."""
        self.bytes_through_driver += sum(a.nbytes for a in arrays)
        return arrays

    def call(self, method: str, *per_shard: Sequence[Any]) -> list[Any]:
        """``shard_k.method(per_shard[0][k], ...)`` on every shard, waiting for the results."""
        args = list(zip(*per_shard, strict=True)) if per_shard else [()] * len(self.shards)
        if not self.remote:
            return [getattr(s, method)(*a) for s, a in zip(self.shards, args, strict=True)]
        for attempt in range(2):
            refs = [getattr(s, method).remote(*a) for s, a in zip(self.shards, args, strict=True)]
            try:
                return self._get(refs)
            except Exception as e:
                if attempt or not is_actor_death(e) or not self.restore_lost():
                    raise
        raise AssertionError("unreachable")

    def restore_lost(self) -> list[int]:
        """Recreate every shard actor that died, from the driver's latest weights
        (``synced``); returns their indices.  Their weights become a new version."""
        if not self.remote:
            return []
        lost = []
        for k, ref in enumerate([s.stats.remote() for s in self.shards]):
            try:
                self._get(ref)
            except Exception as e:
                if not is_actor_death(e):
                    raise
                lost.append(k)
        if lost:
            initial = self.spec.split(self.synced)
            for k in lost:
                weights = self._count([initial[k]])[0]
                shard = self._actor_class.remote(weights, self.lr, self._threads)
                self.shards[k] = shard
                self.weight_refs[k] = shard.get_weights.remote()
            self.version += 1
            self.num_shard_restarts += len(lost)
        return lost

    # -- weights -----------------------------------------------------------------------
    def apply_gradients(self, grad_shards: Sequence[Any]) -> list[Any]:
        """One Adam step per shard with gradient shard k (array or ref) on shard k.

        Returns the new weight shards: arrays in process; for actors, refs to them (also
        kept in ``weight_refs``), so the bulk data never passes through the driver.
        """
        if self.remote:
            pairs = zip(self.shards, grad_shards, strict=True)
            self.weight_refs = [s.apply_gradients.remote(g) for s, g in pairs]
            new = self.weight_refs
        else:
            new = [s.apply_gradients(g) for s, g in zip(self.shards, grad_shards, strict=True)]
        self.version += 1
        return new

    def local_trainable(self) -> list[np.ndarray]:
        """The local evaluator's trainable weights now (default policy, ``spec`` order)."""
        weights = self.local.get_weights()[DEFAULT_POLICY_ID]
        return [weights[n] for n in self.spec.names]

    def local_changed(self, trainable: list[np.ndarray]) -> bool:
        """Whether ``trainable`` differs from ``synced`` (set behind the optimizer's back)."""
        pairs = zip(trainable, self.synced, strict=True)
        return not all(np.array_equal(a, b, equal_nan=True) for a, b in pairs)

    def push(self, trainable: list[np.ndarray]) -> None:
        """Overwrite the shards with the local evaluator's ``trainable`` weights (Adam's
        moments are kept); they become a new version, already held locally."""
        shards = self.spec.split(trainable)
        self.call("set_weights", shards)
        self.synced = trainable
        self.version += 1
        self.local_version = self.version
        if self.remote:
            self._count(shards)
            self.weight_refs = [s.get_weights.remote() for s in self.shards]

    def pull(self, shards: list[np.ndarray] | None = None) -> None:
        """Load weight shards into the local evaluator, which then holds ``version``.

        ``shards`` defaults to (actors) the ones behind ``weight_refs``, fetched here.
        """
        if shards is None:
            try:
                shards = self._get(self.weight_refs)
            except Exception as e:
                if not is_actor_death(e) or not self.restore_lost():
                    raise
                shards = self._get(self.weight_refs)
            self._count(shards)
        load_weight_shards(self.local, self.spec, shards)
        self.synced = self.spec.concat(shards)
        self.local_version = self.version

    def get_weights(self) -> dict[str, np.ndarray]:
        """The trainable weights as the shards hold them now (fetched and concatenated)."""
        shards = self.call("get_weights")
        if self.remote:
            self._count(shards)
        return dict(zip(self.spec.names, self.spec.concat(shards), strict=True))

    # -- Adam --------------------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        """Change every shard's Adam learning rate (no call if it is unchanged)."""
        if lr != self.lr:
            self.call("set_lr", [lr] * len(self.shards))
            self.lr = lr

    def get_adam_state(self) -> dict[str, Any]:
        """The shards' Adam moments per parameter (``gather_adam_state``)."""
        states = self.call("get_optimizer_state")
        if self.remote:
            self.bytes_through_driver += 2 * sum(s["exp_avg"].nbytes for s in states)
        return gather_adam_state(self.spec, states)

    def set_adam_state(self, adam: Mapping[str, Any]) -> None:
        """Inverse of ``get_adam_state``; ValueError if it does not fit ``spec``."""
        self.call("set_optimizer_state", split_adam_state(self.spec, adam))

    def stats(self) -> list[dict[str, float]]:
        """Each shard's ``stats()``."""
        return self.call("stats")

    def kill(self) -> None:
        """Kill the shard actors (if any) and forget every shard."""
        if self.remote:
            import ray

            for shard in self.shards:
                ray.kill(shard)
        self.shards = []
