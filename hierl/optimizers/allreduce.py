"""``allreduce``: gradients computed on the evaluators and averaged among them.

RLlib (ICML 2018) Fig. 4(a) and Table 3 ("Allreduce-based", gradients computed on the
evaluators): every evaluator samples its own batch, computes gradients on it, and the
gradients are averaged with an allreduce so that every replica applies the same update.
Here the evaluators form a ``torch.distributed`` group (gloo on CPU, NCCL on CUDA; see
``hierl.optimizers.collective``) and the averaged gradient never passes through the
driver, which only starts each round and collects small results::

    # driver, one step():
    results = ray.get([e.apply.remote(sample_and_learn, ...) for e in evaluators])
    set_policy_states(local, ray.get(evaluators[0].apply.remote(policy_states)))
    # each evaluator, inside sample_and_learn():
    batch = sample until this rank's share of train_batch_size
    rows = allreduce_min_int(batch.count)          # same number of collectives everywhere
    for each epoch, for each minibatch of batch[:rows]:
        grads = allreduce_mean(policy.compute_gradients(mb, clip=False))
        policy.apply_gradients(grads, clip=True)   # clip the average, like one process

Replicas start from the same weights and apply bit-identical averaged gradients, so they
stay bit-identical; ``check_replicas_every`` verifies it with weight digests.  With no
remote evaluators the local evaluator runs the same function as a group of one.

Losses whose terms are means over rows give exactly the single-process gradient of the
union of the ranks' minibatches.  Statistics computed over a batch inside the loss (e.g.
advantage normalisation) are computed per rank, over its share of each minibatch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pickle
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers import collective
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.task_pool import TaskPool
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch


@dataclasses.dataclass
class AllReduceConfig(OptimizerConfig):
    """Settings of the ``allreduce`` optimizer."""

    num_sgd_iter: int = 1
    """Epochs over each rank's batch."""
    sgd_minibatch_size: int = 0
    """Global minibatch rows, split evenly across the evaluators; 0 = whole batches."""
    seed: int | None = 0
    """Seeds the ranks' minibatch shuffling (None: random)."""
    check_replicas_every: int = 0
    """Every this-many steps compare digests of all replicas' weights (0: never)."""
    group_timeout_s: float = collective.DEFAULT_GROUP_TIMEOUT_S
    """Upper bound on forming the process group and on each collective call."""

    def __post_init__(self) -> None:
        self.check("train_batch_size", self.train_batch_size >= 1, "must be >= 1")
        self.check("num_sgd_iter", self.num_sgd_iter >= 1, "must be >= 1")
        self.check("sgd_minibatch_size", self.sgd_minibatch_size >= 0, "must be >= 0")
        self.check("check_replicas_every", self.check_replicas_every >= 0, "must be >= 0")
        self.check("group_timeout_s", self.group_timeout_s > 0, "must be > 0")


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


class ReplicaDivergenceError(RuntimeError):
    """The evaluators' policy replicas no longer hold identical weights."""


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

    Raises:
        FloatingPointError: on every rank, if any rank's loss or the averaged gradient is
            not finite (weights stay unchanged and identical everywhere).
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
    totals: dict[str, float] = defaultdict(float)
    updates = 0
    for _ in range(num_sgd_iter if rows > 0 else 0):
        if local_size <= 0 or local_size >= rows:
            minibatches: Iterable[SampleBatch] = [batch]
        else:
            minibatches = batch.minibatches(local_size, shuffle=True, rng=rng)
        for mb in minibatches:
            error: FloatingPointError | None = None
            try:
                grads, stats = evaluator.compute_gradients(mb, clip=False)
            except FloatingPointError as e:
                # Still take part in the allreduce (with NaNs) so no rank is left waiting.
                error, stats = e, {}
                weights = evaluator.get_weights()[DEFAULT_POLICY_ID]
                names = evaluator.policy.gradient_names()
                grads = [np.full(weights[n].shape, np.nan) for n in names]
            t0 = time.perf_counter()
            grads = collective.allreduce_mean(grads)
            comm_s += time.perf_counter() - t0
            calls += world > 1
            if error is not None or not all(np.isfinite(g).all() for g in grads):
                cause = error or "a loss or gradient on another rank was not finite"
                raise FloatingPointError(
                    f"allreduce rank {rank}/{world}: averaged gradient of update {updates} is "
                    f"not finite ({cause}); weights left unchanged on every rank"
                )
            # CRUCIAL: clip the *averaged* gradient: it is the same on every rank and
            # equals clipping the single-process gradient of the union of the minibatches.
            stats.update(evaluator.apply_gradients(grads, clip=True))
            for k, v in stats.items():
                totals[k] += float(v)
            updates += 1
    return ShardResult(
        stats={k: v / max(updates, 1) for k, v in totals.items()},
        rows_trained=rows,
        num_updates=updates,
        num_allreduce_calls=calls,
        learn_s=time.perf_counter() - learn_start,
        allreduce_s=comm_s,
        wait_s=wait_s,
    )


def sample_and_learn(
    evaluator: PolicyEvaluator,
    train_batch_size: int,
    num_sgd_iter: int = 1,
    sgd_minibatch_size: int = 0,
    seed: int | None = None,
    global_vars: Mapping[str, Any] | None = None,
    world_size: int | None = None,
    check_replicas: bool = False,
) -> ShardResult:
    """One rank's round: sample its share of ``train_batch_size``, then ``learn_on_shard``.

    ``global_vars`` are set first (every replica sees the same timestep, so learning-rate
    schedules agree).  The share is ``ceil(train_batch_size / world_size)`` rows, sampled
    in whole ``sample()`` calls.  ``world_size``, if given, must match the group.
    """
    group_size = collective.world_size()
    if world_size is not None and world_size != group_size:
        raise RuntimeError(
            f"evaluator {evaluator.worker_index} is in a group of {group_size}, but the "
            f"driver runs a round over {world_size} evaluators"
        )
    if global_vars:
        evaluator.set_global_vars(global_vars)
    start = time.perf_counter()
    share = math.ceil(train_batch_size / group_size)
    batches: list[SampleBatch] = []
    count = 0
    while count < share:
        batches.append(evaluator.sample())
        count += batches[-1].count
    sample_s = time.perf_counter() - start
    batch = batches[0] if len(batches) == 1 else SampleBatch.concat_samples(batches)
    result = learn_on_shard(evaluator, batch, num_sgd_iter, sgd_minibatch_size, seed)
    result.rows_sampled, result.sample_s = count, sample_s
    if check_replicas:
        result.weights_digest = weights_digest(evaluator)
    return result


def weights_digest(evaluator: PolicyEvaluator) -> str:
    """SHA-256 over the evaluator's weights (policy ids, names, dtypes, shapes and bytes)."""
    h = hashlib.sha256()
    for pid, weights in sorted(evaluator.get_weights().items()):
        for name, w in sorted(weights.items()):
            w = np.ascontiguousarray(w)
            h.update(f"{pid}/{name}:{w.dtype.str}:{w.shape};".encode())
            h.update(w.tobytes())
    return h.hexdigest()


def policy_states(evaluator: PolicyEvaluator) -> dict[str, Any]:
    """Every policy's full state (weights, optimizer moments, counters) by policy id."""
    return dict(evaluator.foreach_policy(lambda p, pid: (pid, p.get_state())))


def set_policy_states(evaluator: PolicyEvaluator, states: Mapping[str, Any]) -> None:
    """Load states produced by ``policy_states`` (by policy id)."""
    # CRUCIAL: copy first.  Arrays from the Ray object store are read-only views of shared
    # memory; a policy that wraps them without copying (TorchPolicyGraph.set_state does for
    # optimizer moments) would have every replica on the node update the SAME moments.
    states = _map_arrays(states, np.array)
    evaluator.foreach_policy(lambda p, pid: p.set_state(states[pid]) if pid in states else None)


def _map_arrays(tree: Any, fn: Callable[[np.ndarray], Any]) -> Any:
    """``tree`` (dicts, lists, tuples) with ``fn`` applied to every numpy array leaf."""
    if isinstance(tree, np.ndarray):
        return fn(tree)
    if isinstance(tree, Mapping):
        return {k: _map_arrays(v, fn) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_arrays(v, fn) for v in tree)
    return tree


def _nbytes(tree: Any) -> int:
    sizes: list[int] = []
    _map_arrays(tree, lambda a: sizes.append(a.nbytes))
    return sum(sizes)


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


@register_optimizer
class AllReduceOptimizer(PolicyOptimizer):
    """Evaluators sample, allreduce their gradients among themselves, apply the same update.

    The process group is formed on the first ``step()`` (remote evaluator ``i`` is rank
    ``i``) and left in ``stop()``.  After each step the driver's local policy receives
    rank 0's full policy state (weights and optimizer moments), so checkpoints and
    ``compute_single_action`` use the current policy and a restored checkpoint resumes
    exactly (``restore`` pushes the state back to every replica).

    ``stats()`` adds ``world_size``, ``num_allreduce_calls`` (total collective calls of
    one rank), ``bytes_through_driver`` (of the last step: the fetched policy state plus
    the ranks' results) and, once checked, ``replicas_identical`` (1 or 0).
    """

    name = "allreduce"
    config_class = AllReduceConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rng = np.random.default_rng(self.config.seed)
        self.group: collective.GroupInfo | None = None
        self._members: list[Any] = []
        self._steps = 0
        self.num_allreduce_calls = 0
        self.bytes_through_driver = 0
        self.replicas_identical: int | None = None

    @property
    def world_size(self) -> int:
        """Evaluators taking part in each round (the local one alone when no remotes)."""
        return max(1, len(self.remote_evaluators))

    def _ensure_group(self) -> None:
        remotes = list(self.remote_evaluators)
        if self.group is not None and self._members == remotes:
            return
        if self._members:
            disband_group(self._members)
        with self.timer("group"):
            self.group = form_group(remotes, self.config.group_timeout_s)
        self._members = remotes

    def _run_round(self, kwargs: dict[str, Any]) -> list[ShardResult]:
        pool = TaskPool()
        for rank, e in enumerate(self.remote_evaluators):
            pool.add(e, e.apply.remote(sample_and_learn, **kwargs), tag=rank)
        results: list[Any] = [None] * self.world_size
        while len(pool):
            for done in pool.wait_any(self.evaluators.get_timeout_s):
                if done.error is not None:
                    # Other ranks may still be blocked in a collective: form a new group
                    # next step (they time out after group_timeout_s).
                    self.group = None
                    raise done.error
                results[done.tag] = done.value
        return results

    def step(self) -> dict[str, float]:
        """One round: every evaluator samples, learns with allreduced gradients; sync driver."""
        cfg = self.config
        self._steps += 1
        check = cfg.check_replicas_every > 0 and self._steps % cfg.check_replicas_every == 0
        kwargs = {
            "train_batch_size": cfg.train_batch_size,
            "num_sgd_iter": cfg.num_sgd_iter,
            "sgd_minibatch_size": cfg.sgd_minibatch_size,
            "seed": int(self.rng.integers(2**31)),
            "global_vars": {"timestep": self.num_steps_sampled},
            "world_size": self.world_size,
            "check_replicas": check,
        }
        if self.remote_evaluators:
            self._ensure_group()
            results = self._run_round(kwargs)
        else:
            results = [sample_and_learn(self.local_evaluator, **kwargs)]
        # Ranks run in parallel: a phase takes as long as its slowest rank.
        for phase in ("sample", "learn", "wait", "allreduce"):
            self.timer(phase).push(max(getattr(r, f"{phase}_s") for r in results))
        self.num_steps_sampled += sum(r.rows_sampled for r in results)
        self.num_steps_trained += sum(r.rows_trained for r in results) * cfg.num_sgd_iter
        self.num_allreduce_calls += results[0].num_allreduce_calls
        self.num_updates += results[0].num_updates  # the same updates on every replica
        self.learner_stats = {
            k: float(np.mean([r.stats[k] for r in results])) for k in results[0].stats
        }
        with self.timer("sync"):
            if self.remote_evaluators:
                ref = self.remote_evaluators[0].apply.remote(policy_states)
                states = self.evaluators.get(ref)
                self.bytes_through_driver = _nbytes(states) + len(pickle.dumps(results))
                set_policy_states(self.local_evaluator, states)
            self.local_evaluator.set_global_vars({"timestep": self.num_steps_sampled})
        if check:
            self._check_replicas(results)
        return self.learner_stats

    def _check_replicas(self, results: list[ShardResult]) -> None:
        digests = [r.weights_digest for r in results]
        local = weights_digest(self.local_evaluator)
        self.replicas_identical = int(len(set(digests)) == 1 and digests[0] == local)
        if not self.replicas_identical:
            listing = ", ".join(f"rank {i}: {d[:12]}" for i, d in enumerate(digests))
            raise ReplicaDivergenceError(
                f"allreduce replicas diverged at step {self._steps}: weight digests {listing}; "
                f"driver: {local[:12]}. Replicas must start from the same weights and apply "
                "every averaged update (weights set on one replica only, or non-deterministic "
                "kernels, break this)"
            )

    def stats(self) -> dict[str, float]:
        """Base counters and timers plus the allreduce figures (see the class docstring)."""
        out = {
            **super().stats(),
            "world_size": self.world_size,
            "num_allreduce_calls": self.num_allreduce_calls,
            "bytes_through_driver": self.bytes_through_driver,
        }
        if self.replicas_identical is not None:
            out["replicas_identical"] = self.replicas_identical
        return out

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restore counters and give every replica the local policy's full state."""
        super().restore(state)
        if self.remote_evaluators:
            import ray

            ref = ray.put(policy_states(self.local_evaluator))
            remotes = self.remote_evaluators
            self.evaluators.get([e.apply.remote(set_policy_states, ref) for e in remotes])

    def stop(self) -> None:
        """Leave the process group (best effort); the evaluators stay."""
        if self._members:
            disband_group(self._members)
        self.group, self._members = None, []
