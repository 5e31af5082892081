"""``sharded_ps``: a sharded parameter server fed by pipelined, actor-to-actor gradients.

RLlib (ICML 2018, https://arxiv.org/abs/1712.09381) Fig. 4(d) "Sharded Param-server", with
the pipelining the paper mentions but does not show, after Li et al. 2014 ("Scaling
Distributed Machine Learning with the Parameter Server", OSDI).  A3C-style: every
evaluator clips its own gradient and the servers apply it as it arrives.

The trainable weights are cut into K flat shards (``sharding``), each held by a
``ParameterShard`` actor with its own Adam (``param_server``, driven as a ``ShardGroup``;
evaluator tasks in flight: ``GradientPipeline``).  One gradient's journey:

    evaluator i   [load the K weight shards it was handed] → sample() →
                  compute_gradients(clip=True) → split → K gradient-shard refs + GradientInfo
    driver        waits on the small GradientInfo only; hands gradient ref k to shard k
                  (→ new weight-shard ref k) and relaunches evaluator i with the K new
                  weight-shard refs, so gradients and weights go actor to actor
    shard k       one Adam step on its slice; returns its new weights

Adam is elementwise, so K shards of ``Adam(lr, eps=1e-5)`` update exactly as one Adam
over all the weights; ``save()`` keeps the moments per parameter, so a run resumes with
any number of shards.  Up to ``max_in_flight_per_evaluator`` tasks run per evaluator,
across steps, so gradients may be a few updates stale.  Each step ends by loading the
shards into the local evaluator, the source of truth between steps: weights set on it
reach the shards through ``push_local_weights`` or at the start of the next step, and
gradients in flight on the replaced weights are dropped.  With no remote evaluators the
local evaluator computes the gradients and in-process shards apply them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hierl.config import ConfigError
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer, single_policy_stats
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.sharded_ps.gradient_pipeline import GradientPipeline
from hierl.optimizers.sharded_ps.param_server import GradientInfo, compute_gradient_shards
from hierl.optimizers.sharded_ps.shard_group import ShardGroup
from hierl.optimizers.sharded_ps.sharding import ShardSpec
from hierl.policy_graph import GlobalVars, LearnerStats, UpdateStats


@dataclasses.dataclass
class ShardedPSConfig(OptimizerConfig):
    """Settings of the ``sharded_ps`` optimizer."""

    num_shards: int = 2
    """Parameter-server actors; the trainable weights are split evenly over them."""
    max_in_flight_per_evaluator: int = 2
    """Gradient tasks kept running per remote evaluator (pipelining; 1 = plain A3C)."""
    grads_per_step: int = 0
    """Gradients applied per ``step()``; 0 = as many as it takes to apply gradients of at
    least ``train_batch_size`` sampled rows."""
    num_cpus_per_shard: float = 0.0
    """CPUs reserved by each shard actor (an Adam step on a slice is cheap).  The shards'
    Adam learning rate is the policy's (``PolicyGraph.learning_rate``, read each step)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("num_shards", self.num_shards >= 1, "must be >= 1")
        self.check("max_in_flight_per_evaluator", self.max_in_flight_per_evaluator >= 1, ">= 1")
        self.check("grads_per_step", self.grads_per_step >= 0, "must be >= 0 (0 = by rows)")
        self.check("num_cpus_per_shard", self.num_cpus_per_shard >= 0, "must be >= 0")


@register_optimizer
class ShardedPSOptimizer(PolicyOptimizer):
    """Sharded parameter server: pipelined gradients pushed to K Adam shards, weights pulled.

    ``stats()`` adds ``num_gradients_applied``, ``num_weight_pulls`` (weight shards sent
    to evaluators), ``num_shards``, ``bytes_through_driver`` (weight and gradient array
    bytes the driver sends or receives; the small GradientInfo records are not counted),
    ``in_flight``, ``num_dropped_gradients`` (computed on weights that
    ``push_local_weights`` replaced) and ``num_healthy_evaluators``.

    Timers: ``sample`` and ``grad`` (reported by the evaluators), ``wait``, ``apply``
    (dispatching to the shards; in-process: the Adam steps), ``learn`` (the whole
    gradient loop of a step) and ``sync`` (loading the shards into the local evaluator).
    A failed evaluator is recreated (or dropped) by the evaluator set; a lost parameter
    shard is restored from the driver's weights (``num_shard_restarts``).  Only the
    default policy is trained.
    """

    name = "sharded_ps"
    config_class = ShardedPSConfig
    # the shards run Adam at the policy's learning rate
    required_policy_methods = ("compute_gradients", "gradient_names", "learning_rate")
    learns_on = "servers"
    samples_to_driver = False

    @classmethod
    def actor_groups(cls, config: ShardedPSConfig, num_evaluators: int) -> list[ActorGroup]:
        """The parameter-shard actors (in-process shards without remote evaluators)."""
        if not num_evaluators:
            return []
        return [
            ActorGroup.from_settings("parameter shard", config, "num_shards", "num_cpus_per_shard")
        ]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        if len(self.local_evaluator.policy_map) != 1:
            raise ConfigError(
                f"sharded_ps trains one (the default) policy; the evaluator has policies "
                f"{sorted(self.local_evaluator.policy_map)}"
            )
        policy = self.local_evaluator.policy
        names = policy.gradient_names()
        weights = policy.get_weights()
        total = sum(int(np.size(weights[n])) for n in names)
        cfg.check("num_shards", cfg.num_shards <= total, f"at most {total} (the trainable weights)")
        self.spec = ShardSpec.from_arrays(names, [weights[n] for n in names], cfg.num_shards)
        self._remote = bool(self.remote_evaluators)
        self.num_gradients_applied = 0
        self.servers = ShardGroup(
            self.spec,
            self.local_evaluator,
            [weights[n] for n in names],
            self._scheduled_lr(),
            get=self.evaluators.get if self._remote else None,
            num_cpus=cfg.num_cpus_per_shard,
        )
        self.tasks = GradientPipeline(
            self.evaluators, self.servers, cfg.max_in_flight_per_evaluator
        )

    @property
    def shards(self) -> list[Any]:
        """The ``ParameterShard``s (in process) or their actor handles."""
        return self.servers.shards

    # -- helpers -----------------------------------------------------------------------
    def _scheduled_lr(self) -> float:
        return self.local_evaluator.policy.learning_rate(self.num_steps_sampled)

    def _record(self, info: GradientInfo, totals: UpdateStats) -> None:
        self.num_gradients_applied += 1
        self.num_updates += 1
        self.num_steps_sampled += info.count
        self.num_steps_trained += info.count
        self.timer("sample").push(info.sample_time_s)
        self.timer("grad").push(info.grad_time_s)
        totals.add(info.stats)

    def _step_done(self, grads: int, rows: int) -> bool:
        if self.config.grads_per_step > 0:
            return grads >= self.config.grads_per_step
        return grads > 0 and rows >= self.config.train_batch_size

    def _push_to_shards(self, current: list[np.ndarray]) -> None:
        self.drop_in_flight()  # CRUCIAL: they were computed on the replaced weights
        self.servers.push(current)  # a new version: every evaluator pulls it next task

    def push_local_weights(self, global_vars: GlobalVars | None = None) -> None:
        """Load the local policy's trainable weights into the shards (Adam moments kept).

        Gradients still in flight were computed on the old weights and are dropped; each
        remote evaluator receives the new weights with its next task.
        """
        if global_vars is not None:
            self.local_evaluator.set_global_vars(global_vars)
        self._push_to_shards(self.servers.local_trainable())

    # -- step --------------------------------------------------------------------------
    def step(self) -> LearnerStats:
        """Apply gradients until the step's budget (``grads_per_step`` or rows) is met."""
        current = self.servers.local_trainable()  # changed outside step() without a push?
        if self.servers.local_changed(current):
            self._push_to_shards(current)
        self.servers.set_lr(self._scheduled_lr())
        totals = UpdateStats()
        grads, rows = 0, 0
        with self.timer("learn"):
            while not self._step_done(grads, rows):
                info = self._next_local(totals) if not self._remote else self._next_remote(totals)
                grads, rows = grads + 1, rows + info.count
        with self.timer("sync"):
            if self._remote and self.servers.local_version != self.servers.version:
                self.servers.pull()  # the K latest weight shards, fetched once per step
            self.evaluators.set_global_vars(self.global_vars())
        self.learner_stats = single_policy_stats(totals.result())
        return self.learner_stats

    def _next_local(self, totals: UpdateStats) -> GradientInfo:
        """In-process: gradient on the local evaluator → shards → weights back into it."""
        *grad_shards, info = compute_gradient_shards(
            self.local_evaluator, self.spec, self.global_vars()
        )
        with self.timer("apply"):
            new = self.servers.apply_gradients(grad_shards)
        self.servers.pull(new)
        self._record(info, totals)
        return info

    def _next_remote(self, totals: UpdateStats) -> GradientInfo:
        """Wait for one gradient, route its shards to the servers, relaunch its evaluator."""
        done = self.tasks.next(self.global_vars(), self.timer)
        with self.timer("apply"):
            # CRUCIAL: gradient ref k goes to shard k, so the bulk data moves actor to
            # actor; the evaluator's next task gets the new weight refs the same way.
            self.servers.apply_gradients(done.tag)
        self.tasks.launch(self.global_vars())
        self._record(done.value, totals)
        return done.value

    # -- stats, state, shutdown ---------------------------------------------------------
    def get_shard_weights(self) -> dict[str, np.ndarray]:
        """The trainable weights as the shards hold them now (fetched and concatenated)."""
        return self.servers.get_weights()

    def stats(self) -> dict[str, float]:
        """Base counters and timers plus the parameter-server counters."""
        pool = self.tasks.pool
        return {
            **super().stats(),
            "num_gradients_applied": self.num_gradients_applied,
            "num_weight_pulls": self.tasks.num_weight_pulls,
            "num_shards": self.spec.num_shards,
            "bytes_through_driver": self.servers.bytes_through_driver,
            "in_flight": len(pool),
            "num_dropped_gradients": self.tasks.num_dropped_gradients,
            "num_healthy_evaluators": self.evaluators.num_healthy_evaluators,
            "num_shard_restarts": self.servers.num_shard_restarts,
        }

    def save(self) -> dict[str, Any]:
        """Counters plus the shards' Adam moments (per parameter, so any ``num_shards`` can
        restore them); the weights themselves are in the local evaluator's checkpoint."""
        adam = self.servers.get_adam_state()
        return {**super().save(), "num_gradients_applied": self.num_gradients_applied, "adam": adam}

    def restore(self, state: dict[str, Any]) -> None:
        """Counters and Adam moments from ``save``; the shards take the local weights at
        the next step.  A state without moments (another optimizer's) starts Adam afresh."""
        super().restore(state)
        self.num_gradients_applied = int(state.get("num_gradients_applied", 0))
        if state.get("adam") is not None:
            self.servers.set_adam_state(state["adam"])

    def drop_in_flight(self) -> None:
        """Cancel in-flight gradient tasks (computed on weights that will be stale)."""
        self.tasks.drop()

    def stop(self) -> None:
        """Cancel in-flight gradient tasks and kill the shard actors."""
        self.drop_in_flight()
        self.servers.kill()
