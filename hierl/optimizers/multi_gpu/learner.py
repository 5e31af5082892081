"""MultiDeviceLearner: load a batch once onto K device towers, then SGD epochs across them.

RLlib (ICML 2018) Fig. 4(b) and §3.4 ("pins data into local GPU memory"), the local
multi-GPU strategy of the original ``LocalMultiGPUOptimizer``: the train batch is copied
to the devices once, split into equal per-tower shards, and every minibatch is evaluated
data-parallel (each tower takes an equal slice of its own shard), so many SGD epochs cost
no further host-to-device traffic.  Tower gradients are averaged into the master model,
which takes the optimizer step; the other towers then copy its parameters.

Typical use (one call of each per train batch):

    learner = MultiDeviceLearner(policy, num_towers=2)
    rows = learner.load(batch)                      # rows % num_towers are dropped
    stats = learner.optimize(num_sgd_iter=10, minibatch_size=256, rng=rng)
    learner.close()                                 # when done: stops the tower threads

Tower 0 is the policy's own model and torch optimizer (the "master"), so the policy
always holds the current weights and optimizer moments.  Towers 1..K-1 are deep copies
of the model on their devices: CUDA devices when the policy itself lives on CUDA (i.e.
``num_gpus > 0`` was requested and a GPU is visible), otherwise CPU towers, which run in
a thread pool (torch releases the GIL in its kernels) so the multi-device code path is
exercised -- and parallel -- on any machine.

This module holds the loading and the SGD schedule; what one tower is and how towers are
kept in step (device choice, policy and minibatch views, gradient averaging, weight
copies) lives in ``hierl.optimizers.multi_gpu.towers``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import nn

from hierl.optimizers.multi_gpu.towers import (
    average_grads,
    resolve_devices,
    sync_towers,
    tower_backward,
    tower_view,
)
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, UpdateStats
from hierl.sample_batch import SampleBatch, minibatch_bounds
from hierl.torch_policy_graph import LazyRows, TensorBatch, TorchPolicyGraph


class MultiDeviceLearner:
    """Data-parallel minibatch SGD of one TorchPolicyGraph over K device towers.

    Args:
        policy: the policy to train; its ``model`` and ``optimizer`` are tower 0.
        devices: one device per tower; ``devices[0]`` must be the policy's device.
            Default: the policy's device for every tower on CPU; on CUDA, the visible
            GPUs round-robin starting with the policy's.
        num_towers: number of towers when ``devices`` is not given (or its length when
            it is); 0 = one per visible CUDA device when the policy is on CUDA, else 1.

    The result of K towers on minibatch size M equals one update on the K * (M // K)
    rows they cover (up to float rounding), provided the loss has no statistics over
    the batch (such as per-minibatch advantage normalisation, which becomes
    per-tower).  With one tower the updates are identical to ``minibatch_sgd``.
    """

    def __init__(
        self,
        policy: TorchPolicyGraph,
        devices: Sequence[torch.device | str] | None = None,
        num_towers: int = 0,
    ):
        if not isinstance(policy, TorchPolicyGraph):
            raise TypeError(
                f"MultiDeviceLearner needs a TorchPolicyGraph, got {type(policy).__name__}"
            )
        if num_towers < 0:
            raise ValueError(f"num_towers must be >= 0, got {num_towers}")
        if getattr(policy, "is_recurrent", False):
            # Shards and minibatches here are row ranges/permutations: they would cut the
            # sequences a recurrent loss unrolls over.
            raise ValueError(
                f"MultiDeviceLearner (optimizer 'multi_gpu') does not support recurrent "
                f"policies ({type(policy).__name__} with model.use_lstm=True); use the "
                "'local' optimizer"
            )
        self.policy = policy
        self.devices = resolve_devices(policy.device, devices, num_towers)
        self.towers: list[nn.Module] = [policy.model] + [
            copy.deepcopy(policy.model).to(d) for d in self.devices[1:]
        ]
        self._pool: ThreadPoolExecutor | None = None
        self._shards: list[TensorBatch] = []
        self.shard_rows = 0

    @property
    def num_towers(self) -> int:
        """K, the number of towers."""
        return len(self.devices)

    def load(self, batch: SampleBatch) -> int:
        """Convert ``batch`` to tensors once and give each tower a contiguous shard.

        The first ``K * (count // K)`` rows are split into K equal shards, shard i on
        tower i's device; the ``count % K`` rows left over are dropped.  Returns the
        number of rows loaded.  On CPU the shards share memory with ``batch``.
        """
        if batch.get(SampleBatch.SEQ_LENS) is not None:
            raise ValueError(
                "MultiDeviceLearner cannot shard a batch with a 'seq_lens' column: "
                "recurrent (sequence) batches are not supported"
            )
        k = self.num_towers
        n = batch.count // k
        if n == 0:
            raise ValueError(f"batch of {batch.count} rows is too small for {k} towers")
        columns = self.policy.to_tensors(batch)
        self._shards = [
            {key: col[i * n : (i + 1) * n].to(d, non_blocking=True) for key, col in columns.items()}
            for i, d in enumerate(self.devices)
        ]
        self.shard_rows = n
        return n * k

    def optimize(
        self, num_sgd_iter: int, minibatch_size: int, rng: np.random.Generator
    ) -> dict[str, float]:
        """``num_sgd_iter`` epochs of minibatch SGD on the loaded rows; mean stats per update.

        Each epoch draws one permutation of the shard length from ``rng``; every
        minibatch takes the next ``minibatch_size // K`` permuted rows of each tower's
        shard, cut by ``minibatch_bounds`` (a remainder under half a minibatch joins the
        epoch's last minibatch, a larger one is its own).  ``minibatch_size <= 0`` or
        ``>=`` the rows loaded means one full-batch update per epoch (no permutation is
        drawn), exactly like ``minibatch_sgd``.  Stats have ``minibatch_sgd``'s keys: the
        loss stats and ``total_loss`` (averaged over towers and applied updates),
        ``grad_gnorm`` when the policy clips gradients, ``num_updates`` applied and
        ``num_nonfinite_grads_skipped`` refused.
        """
        if not self._shards:
            raise RuntimeError("MultiDeviceLearner.optimize called before load()")
        k, n = self.num_towers, self.shard_rows
        full_batch = minibatch_size <= 0 or minibatch_size >= k * n
        per_tower = n if full_batch else minibatch_size // k
        if per_tower == 0:
            raise ValueError(
                f"minibatch_size={minibatch_size} is smaller than the number of towers ({k})"
            )
        self._sync_towers()
        stats = UpdateStats()
        for _ in range(num_sgd_iter):
            if full_batch:
                minibatches: list[Sequence[Mapping[str, torch.Tensor]]] = [self._shards]
            else:
                # CRUCIAL: one permutation of the shard length per epoch, drawn exactly as
                # SampleBatch.minibatches draws it, so one tower reproduces minibatch_sgd.
                perm = rng.permutation(n)
                minibatches = [
                    [
                        LazyRows(shard, perm[start:stop], d)
                        for shard, d in zip(self._shards, self.devices, strict=True)
                    ]
                    for start, stop in minibatch_bounds(n, per_tower)
                ]
            for tower_batches in minibatches:
                stats.add(self._update(tower_batches))
        return {**stats.result(), "num_updates": stats.applied}

    def _update(self, batches: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, float]:
        """One synchronous data-parallel step: tower grads → mean → clip → step (refused
        if a loss or the averaged gradient is not finite) → copy.

        CRUCIAL for losses with running state (MARWIL's ``c^2``): every tower evaluates
        the loss on a view made now, so it reads the policy's state as the last update
        left it, and the policy's ``after_update`` sees the stats averaged over the
        towers, so the state moves once per update, from every tower's rows.
        """
        policy = self.policy
        views = [policy] + [
            tower_view(policy, m, d) for m, d in zip(self.towers[1:], self.devices[1:], strict=True)
        ]
        futures = [  # towers 1..K-1 in threads; none for K = 1, which is learn_on_batch
            self._thread_pool().submit(tower_backward, v, b, v.model.zero_grad)
            for v, b in zip(views[1:], batches[1:], strict=True)
        ]
        results = [tower_backward(policy, batches[0], policy.optimizer.zero_grad)]
        results += [f.result() for f in futures]
        if len(views) > 1:  # master .grad = mean of the towers' (equal slice sizes)
            average_grads(self.policy.model, self.towers[1:])
        values: dict[str, Any] = {}
        for loss, tower_stats in results:  # means over the towers (equal slice sizes)
            for key, value in {**tower_stats, "total_loss": loss}.items():
                if torch.is_tensor(value):  # read with the master's stats, one transfer
                    value = value.detach().to(policy.device, non_blocking=True)
                values[key] = values.get(key, 0.0) + value / len(results)
        values.update(policy._clipped_norm())
        stats = policy.step_if_finite(values)
        if len(views) > 1 and not stats[NONFINITE_GRADS_SKIPPED]:
            self._sync_towers()
        return stats

    def _sync_towers(self) -> None:
        """Copy the master's parameters and buffers into every other tower."""
        sync_towers(self.policy.model, self.devices[0], self.towers[1:], self.devices[1:])

    def _thread_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.num_towers - 1, thread_name_prefix="hierl-tower"
            )
        return self._pool

    def close(self) -> None:
        """Stop the tower threads and release the loaded shards."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._shards = []
        self.shard_rows = 0
