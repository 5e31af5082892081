"""What one rank (evaluator) of the ``allreduce`` optimizer does in a round.

Evaluator side, run through ``evaluator.apply``: ``group_endpoint``, ``join_group`` and
``leave_group`` manage this process's membership of the evaluators' process group;
``sample_and_learn`` samples this rank's share of ``train_batch_size`` and hands it to
``learn_on_shard``, which agrees with the other ranks on a common row count, then runs
SGD epochs in which every minibatch's gradient is averaged over the group
(``collective.allreduce_mean``) and the *average* is clipped and applied, so that every
replica applies the same update.  The result is a small ``ShardResult``.

Losses whose terms are means over rows give exactly the single-process gradient of the
union of the ranks' minibatches.  Statistics computed over a batch inside the loss (e.g.
advantage normalisation) are computed per rank, over its share of each minibatch.

Driver side: ``form_group`` turns remote evaluators into a process group (actor ``i`` is
rank ``i``); ``disband_group`` makes them leave it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.allreduce import collective
from hierl.optimizers.allreduce.replica_state import weights_digest
from hierl.policy_graph import GlobalVars, UpdateStats
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class ShardResult:
    """What one evaluator reports after a round (small: no weights, no gradients)."""

    stats: dict[str, float]
    """Learner statistics averaged over this rank's updates."""
    rows_trained: int
    """Rows per epoch after trimming to the count common to all ranks."""
    num_updates: int
    """Gradient updates applied."""
    num_allreduce_calls: int
    """Collective calls made (0 in a group of one)."""
    learn_s: float
    """Seconds spent in SGD epochs, gradient allreduces included."""
    allreduce_s: float
    """Seconds inside the gradient allreduces (including waiting for slower ranks)."""
    wait_s: float
    """Seconds inside the first collective (agreeing on rows): waiting for the slowest
    rank to finish sampling, when called from ``sample_and_learn``."""
    rows_sampled: int = 0
    """Environment steps sampled this round (0 when given a batch)."""
    sample_s: float = 0.0
    """Seconds spent sampling."""
    weights_digest: str | None = None
    """Digest of the weights after the round, when asked for."""


# -- evaluator side (run through ``evaluator.apply``) ------------------------------------
def group_endpoint(evaluator: PolicyEvaluator) -> tuple[str, str]:
    """``("node_ip:free_port", backend)`` of this evaluator's process.

    The backend is ``nccl`` when the policy lives on a CUDA device, else ``gloo``.
    """
    import ray

    device = getattr(evaluator.policy, "device", None)
    backend = "nccl" if getattr(device, "type", "cpu") == "cuda" else "gloo"
    return f"{ray.util.get_node_ip_address()}:{collective.free_port()}", backend


def join_group(
    evaluator: PolicyEvaluator,
    rank: int,
    world_size: int,
    address: str,
    backend: str = "gloo",
    timeout_s: float = collective.DEFAULT_GROUP_TIMEOUT_S,
) -> None:
    """Join the evaluators' process group as ``rank`` (see ``collective.init_group``)."""
    collective.init_group(rank, world_size, address, backend, timeout_s)


def leave_group(evaluator: PolicyEvaluator) -> None:
    """Leave the process group, if this evaluator's process is in one."""
    collective.destroy_group()


def learn_on_shard(
    evaluator: PolicyEvaluator,
    batch: SampleBatch,
    num_sgd_iter: int = 1,
    sgd_minibatch_size: int = 0,
    seed: int | None = None,
) -> ShardResult:
    """SGD epochs on this rank's ``batch`` with gradients averaged over the group.

    Every rank of the group must call this concurrently (with the same settings).  Rows
    beyond the smallest rank's count are dropped; ``sgd_minibatch_size`` is the global
    minibatch size, so each rank uses ``ceil(sgd_minibatch_size / world_size)`` rows of
    its own batch, shuffled with ``np.random.default_rng([seed, rank])``.  Outside a
    group this is plain minibatch SGD.  This is the function to time for SGD throughput.

    An update whose averaged gradient is not finite (a NaN or inf loss or gradient on
    any rank makes it so) is refused on every rank alike: weights and optimizer moments
    stay unchanged and identical everywhere, the stats count it
    (``num_nonfinite_grads_skipped``) and the epochs go on.
    """
    start = time.perf_counter()
    world, rank = collective.world_size(), collective.rank()
    batch.decompress_if_needed()
    # CRUCIAL: every rank must issue the same collective calls in the same order or the
    # group deadlocks, so all ranks train on the same number of rows (and minibatches).
    rows = collective.allreduce_min_int(batch.count)
    learn_start = time.perf_counter()
    wait_s = learn_start - start
    calls, comm_s = int(world > 1), 0.0
    if rows < batch.count:
        batch = batch.slice(0, rows)
    local_size = math.ceil(sgd_minibatch_size / world) if sgd_minibatch_size > 0 else 0
    rng = np.random.default_rng(None if seed is None else [seed, rank])
    totals = UpdateStats()
    for _ in range(num_sgd_iter if rows > 0 else 0):
        if local_size <= 0 or local_size >= rows:
            minibatches: Iterable[SampleBatch] = [batch]
        else:
            minibatches = batch.minibatches(local_size, shuffle=True, rng=rng)
        for mb in minibatches:
            # A non-finite gradient still takes part in the allreduce (no rank is left
            # waiting); the mean is then not finite on every rank, and every rank's
            # apply_gradients refuses it.
            grads, stats = evaluator.compute_gradients(mb, clip=False)
            t0 = time.perf_counter()
            grads = collective.allreduce_mean(grads)
            comm_s += time.perf_counter() - t0
            calls += world > 1
            # CRUCIAL: clip the *averaged* gradient: it is the same on every rank and
            # equals clipping the single-process gradient of the union of the minibatches.
            stats.update(evaluator.apply_gradients(grads, clip=True))
            totals.add(stats)
    return ShardResult(
        stats=totals.result(),
        rows_trained=rows,
        num_updates=totals.applied,
        num_allreduce_calls=calls,
        learn_s=time.perf_counter() - learn_start,
        allreduce_s=comm_s,
        wait_s=wait_s,
    )


@dataclasses.dataclass(frozen=True)
class RoundSpec:
    """What the driver sends every rank for one round (``sample_and_learn``)."""

    train_batch_size: int
    """Rows sampled over all ranks: each samples ``ceil(train_batch_size / world size)``."""
    num_sgd_iter: int = 1
    """Epochs over each rank's batch."""
    sgd_minibatch_size: int = 0
    """Global minibatch rows, split evenly across the ranks; 0 = whole batches."""
    seed: int | None = None
    """Seeds the round's minibatch shuffling (the same on every rank)."""
    global_vars: GlobalVars | None = None
    """Set on every replica first (the same timestep everywhere, so learning-rate
    schedules agree)."""
    world_size: int | None = None
    """The group size the driver expects; a rank in a group of another size refuses the
    round.  None: not checked."""
    check_replicas: bool = False
    """Return a digest of the rank's weights after the round."""


def sample_and_learn(evaluator: PolicyEvaluator, spec: RoundSpec) -> ShardResult:
    """One rank's round: sample its share of ``spec.train_batch_size``, then
    ``learn_on_shard``.

    ``spec.global_vars`` are set first.  The share is ``ceil(train_batch_size /
    world_size)`` rows, sampled in whole ``sample()`` calls.  ``spec.world_size``, if
    given, must match the group.
    """
    group_size = collective.world_size()
    if spec.world_size is not None and spec.world_size != group_size:
        raise RuntimeError(
            f"evaluator {evaluator.worker_index} is in a group of {group_size}, but the "
            f"driver runs a round over {spec.world_size} evaluators"
        )
    if spec.global_vars is not None:
        evaluator.set_global_vars(spec.global_vars)
    start = time.perf_counter()
    share = math.ceil(spec.train_batch_size / group_size)
    batches: list[SampleBatch] = []
    count = 0
    while count < share:
        batches.append(evaluator.sample())
        count += batches[-1].count
    sample_s = time.perf_counter() - start
    batch = batches[0] if len(batches) == 1 else SampleBatch.concat_samples(batches)
    result = learn_on_shard(evaluator, batch, spec.num_sgd_iter, spec.sgd_minibatch_size, spec.seed)
    result.rows_sampled, result.sample_s = count, sample_s
    if spec.check_replicas:
        result.weights_digest = weights_digest(evaluator)
    return result


# -- driver side -------------------------------------------------------------------------
def form_group(
    actors: Sequence[Any], timeout_s: float = collective.DEFAULT_GROUP_TIMEOUT_S
) -> collective.GroupInfo:
    """Make remote evaluators ``actors`` a process group; actor ``i`` becomes rank ``i``.

    Rank 0's node IP and a port free there are the rendezvous address, so the group
    works across nodes.  Returns the group as rank 0 sees it.
    """
    import ray

    endpoints = ray.get([a.apply.remote(group_endpoint) for a in actors], timeout=timeout_s)
    backends = [b for _, b in endpoints]
    if len(set(backends)) != 1:
        raise RuntimeError(
            f"evaluators need different collective backends {backends} (gloo for CPU "
            "policies, nccl for CUDA ones): put every evaluator's policy on the same kind "
            "of device"
        )
    address, backend, n = endpoints[0][0], backends[0], len(actors)
    refs = [
        a.apply.remote(join_group, i, n, address, backend, timeout_s) for i, a in enumerate(actors)
    ]
    ray.get(refs, timeout=timeout_s + 30)
    return collective.GroupInfo(0, n, address, backend)


def disband_group(actors: Sequence[Any], timeout_s: float = 10.0) -> None:
    """Ask every actor to leave its group; best effort (dead or stuck actors are skipped)."""
    import ray

    refs = [a.apply.remote(leave_group) for a in actors]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
