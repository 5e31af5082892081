"""``allreduce``: gradients computed on the evaluators and averaged among them.

RLlib (ICML 2018) Fig. 4(a) and Table 3 ("Allreduce-based", gradients computed on the
evaluators): every evaluator samples its own batch, computes gradients on it, and the
gradients are averaged with an allreduce so that every replica applies the same update.
Here the evaluators form a ``torch.distributed`` group (gloo on CPU, NCCL on CUDA; see
``hierl.optimizers.allreduce.collective``) and the averaged gradient never passes through the
driver, which only starts each round and collects small results:

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

A failed evaluator (process or node lost, env error) breaks the round for every rank
(the survivors' collectives fail or time out after ``group_timeout_s``).  The driver
waits for all ranks, hands the failure to the evaluator set (recreate or drop), resets
every replica to the driver's policy state (rank 0's after the last good step: the
survivors may have applied part of the broken round), forms the group again with the
current members and reruns the round; the broken round's samples are discarded.  What one
rank does in a round (and group formation) lives in ``hierl.optimizers.allreduce.rank``;
digests and full policy states in ``hierl.optimizers.allreduce.replica_state``.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.evaluators.evaluator_set import is_evaluator_failure
from hierl.optimizers.allreduce import collective
from hierl.optimizers.allreduce.rank import (
    RoundSpec,
    ShardResult,
    disband_group,
    form_group,
    sample_and_learn,
)
from hierl.optimizers.allreduce.replica_state import (
    policy_states,
    set_policy_states,
    state_nbytes,
    weights_digest,
)
from hierl.optimizers.base import PolicyOptimizer, single_policy_stats
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.sgd import SGDConfig
from hierl.optimizers.task_pool import TaskPool
from hierl.policy_graph import LearnerStats


@dataclasses.dataclass
class AllReduceConfig(SGDConfig):
    """Settings of the ``allreduce`` optimizer (the SGD epochs' plus its own)."""

    check_replicas_every: int = 0
    """Every this-many steps compare digests of all replicas' weights (0: never)."""
    group_timeout_s: float = collective.DEFAULT_GROUP_TIMEOUT_S
    """Upper bound on forming the process group and on each collective call."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("check_replicas_every", self.check_replicas_every >= 0, "must be >= 0")
        self.check("group_timeout_s", self.group_timeout_s > 0, "must be > 0")


class ReplicaDivergenceError(RuntimeError):
    """The evaluators' policy replicas no longer hold identical weights."""


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
    required_policy_methods = ("compute_gradients", "apply_gradients", "gradient_names")
    learns_on = "evaluators"
    samples_to_driver = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rng = np.random.default_rng(self.seed)
        self.group: collective.GroupInfo | None = None
        self._members: list[Any] = []
        self._steps = 0
        self.num_allreduce_calls = 0
        self.bytes_through_driver = 0
        self.replicas_identical: int | None = None

    @property
    def world_size(self) -> int:
        """Evaluators taking part in each round (the local one alone when no remotes)."""
        return max(1, self.evaluators.num_healthy_evaluators)

    def _ensure_group(self) -> None:
        remotes = self.evaluators.healthy_evaluators()
        if self.group is not None and self._members == remotes:
            return
        if self._members:
            disband_group(self._members)
        with self.timer("group"):
            self.group = form_group(remotes, self.config.group_timeout_s)
        self._members = remotes

    def _run_round(self, spec: RoundSpec) -> list[ShardResult] | None:
        """Every rank's result, or None after a failed evaluator was handled (rerun)."""
        pool = TaskPool()
        for rank, e in enumerate(self._members):
            pool.add(e, e.apply.remote(sample_and_learn, spec), tag=rank)
        results: list[Any] = [None] * self.world_size
        errors = []
        while len(pool):  # all ranks, even after an error: it may be a peer's failure
            for done in pool.wait_any(self.evaluators.get_timeout_s):
                if done.error is not None:
                    errors.append(done)
                results[done.tag] = done.value
        if not errors:
            return results
        self.group = None  # form a new group next round
        failed = [d for d in errors if is_evaluator_failure(d.error)]
        if not failed:
            raise errors[0].error
        for done in failed:
            self.evaluators.handle_failure(done.actor, done.error)
        # CRUCIAL: survivors may have applied part of the broken round's updates.
        self._push_policy_states()
        return None

    def _push_policy_states(self) -> None:
        """Give every replica the local policy's full state (weights, optimizer moments)."""
        import ray

        ref = ray.put(policy_states(self.local_evaluator))
        self.evaluators.call_remotes(lambda e: e.apply.remote(set_policy_states, ref))

    def step(self) -> LearnerStats:
        """One round: every evaluator samples, learns with allreduced gradients; sync driver."""
        cfg = self.config
        self._steps += 1
        check = cfg.check_replicas_every > 0 and self._steps % cfg.check_replicas_every == 0
        spec = RoundSpec(
            train_batch_size=cfg.train_batch_size,
            num_sgd_iter=cfg.num_sgd_iter,
            sgd_minibatch_size=cfg.sgd_minibatch_size,
            seed=int(self.rng.integers(2**31)),
            global_vars=self.global_vars(),
            world_size=self.world_size,
            check_replicas=check,
        )
        if self.remote_evaluators:
            results = None
            while results is None:  # bounded: the set ends training after too many failures
                self._ensure_group()
                results = self._run_round(dataclasses.replace(spec, world_size=self.world_size))
        else:
            results = [sample_and_learn(self.local_evaluator, spec)]
        # Ranks run in parallel: a phase takes as long as its slowest rank.
        for phase in ("sample", "learn", "wait", "allreduce"):
            self.timer(phase).push(max(getattr(r, f"{phase}_s") for r in results))
        self.num_steps_sampled += sum(r.rows_sampled for r in results)
        self.num_steps_trained += sum(r.rows_trained for r in results) * cfg.num_sgd_iter
        self.num_allreduce_calls += results[0].num_allreduce_calls
        self.num_updates += results[0].num_updates  # the same updates on every replica
        self.learner_stats = single_policy_stats(
            {k: float(np.mean([r.stats[k] for r in results])) for k in results[0].stats}
        )
        with self.timer("sync"):
            if self.remote_evaluators:
                ref = self._members[0].apply.remote(policy_states)
                states = self.evaluators.get(ref)
                self.bytes_through_driver = state_nbytes(states) + len(pickle.dumps(results))
                set_policy_states(self.local_evaluator, states)
            self.evaluators.set_global_vars(self.global_vars())
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
            self._push_policy_states()

    def stop(self) -> None:
        """Leave the process group (best effort); the evaluators stay."""
        if self._members:
            disband_group(self._members)
        self.group, self._members = None, []
