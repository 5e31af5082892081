"""Minibatch SGD epochs over one batch on one policy, and their settings (shared by the
optimizers that run epochs: ``local``, ``multi_gpu``, ``allreduce`` and ``auto``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from hierl.optimizers.base import OptimizerConfig
from hierl.policy_graph import PolicyGraph, UpdateStats
from hierl.sample_batch import SampleBatch, minibatch_bounds


@dataclasses.dataclass
class SGDConfig(OptimizerConfig):
    """Settings of the optimizers that run SGD epochs over each gathered batch."""

    num_sgd_iter: int = 1
    """Epochs over each gathered batch."""
    sgd_minibatch_size: int = 0
    """Minibatch size; 0 = the whole batch in one update.  A remainder under half a
    minibatch joins the epoch's last minibatch (``hierl.sample_batch.minibatch_bounds``).
    ``allreduce`` splits each minibatch evenly across the evaluators."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("num_sgd_iter", self.num_sgd_iter >= 1, "must be >= 1")
        self.check("sgd_minibatch_size", self.sgd_minibatch_size >= 0, "must be >= 0")


def minibatch_sgd(
    policy: PolicyGraph,
    batch: SampleBatch,
    num_sgd_iter: int,
    minibatch_size: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """``num_sgd_iter`` epochs of shuffled minibatches; returns stats averaged over updates.

    ``minibatch_size <= 0`` or ``>= batch.count`` means one full-batch update per epoch.
    Otherwise a remainder smaller than half a minibatch joins the last minibatch and a
    larger one is its own (``SampleBatch.minibatches``, ``minibatch_bounds``).
    A batch with ``seq_lens`` (recurrent policies) is split between whole sequences, so
    its minibatches may exceed ``minibatch_size`` by less than one sequence.
    A policy on an accelerator gets the batch in device memory once
    (``policy.device_rows``) and its minibatches as views there, with the same
    permutations, so the updates are the ones the host path makes.
    The stats include ``num_updates``, the number of updates applied, and
    ``num_nonfinite_grads_skipped``, the number refused (``UpdateStats``).
    """
    batch.decompress_if_needed()
    rows = policy.device_rows(batch)  # loaded on the policy's accelerator once, or None
    full = minibatch_size <= 0 or minibatch_size >= batch.count
    stats = UpdateStats()
    for _ in range(num_sgd_iter):
        if full:
            minibatches = [batch if rows is None else rows]
        elif rows is None:
            minibatches = batch.minibatches(minibatch_size, shuffle=True, rng=rng)
        else:  # the permutation SampleBatch.minibatches draws, taken on the device
            perm = rng.permutation(batch.count)
            bounds = minibatch_bounds(batch.count, minibatch_size)
            minibatches = [rows.take(perm[start:stop]) for start, stop in bounds]
        for mb in minibatches:
            stats.add(policy.learn_on_batch(mb))
    return {**stats.result(), "num_updates": stats.applied}
