"""``sharded_ps``: a sharded parameter server fed by pipelined, actor-to-actor gradients.

RLlib (Liang et al., ICML 2018, https://arxiv.org/abs/1712.09381), Fig. 4(d) "Sharded
Param-server", with the pipelining the paper mentions but does not show; the parameter
server design follows Li et al. 2014, "Scaling Distributed Machine Learning with the
Parameter Server" (OSDI).  A3C-style: every evaluator clips its own gradient
(``compute_gradients(clip=True)``) and the servers apply it as it arrives.

The trainable weights are cut into K flat shards (``hierl.optimizers.sharding``), each
held by a ``ParameterShard`` actor with its own Adam.  One gradient's journey::

    evaluator i   [load the K weight shards it was handed] → sample() →
                  compute_gradients(clip=True) → split → K gradient-shard refs + GradientInfo
    driver        waits on the small GradientInfo only; hands gradient ref k to shard k
                  (→ new weight-shard ref k) and relaunches evaluator i with the K new
                  weight-shard refs, so gradients and weights go actor to actor
    shard k       one Adam step on its slice; returns its new weights

Adam is elementwise, so K shards of ``Adam(lr, eps=1e-5)`` (what ``TorchPolicyGraph``
builds) update exactly as one Adam over all the weights would; ``save()`` checkpoints
their moments per parameter, so a run resumes with any number of shards.  Up to
``max_in_flight_per_evaluator`` tasks run per evaluator, across ``step()`` calls, so
gradients may be a few updates stale, as in any asynchronous optimizer.  At the end of
each step the driver fetches the K shards once and loads them into its local evaluator,
which the Trainer checkpoints and serves from.  The local evaluator is the source of
truth for the weights between steps: weights set on it from outside reach the shards
through ``push_local_weights`` (``Trainer.set_weights``, ``restore``) or, if set behind
the optimizer's back, at the start of the next step; gradients still in flight, computed
on the replaced weights, are dropped.  With no remote evaluators the local evaluator
computes the gradients and in-process shards apply them.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hierl.config import ConfigError
from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.sharding import ShardSpec
from hierl.optimizers.task_pool import Finished, TaskPool, is_actor_death
from hierl.sample_batch import DEFAULT_POLICY_ID
from hierl.torch_policy_graph import piecewise_linear


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
    """CPUs reserved by each shard actor (an Adam step on a slice is cheap)."""
    lr: float = 5e-4
    """Adam learning rate of the shards (copied from the trainer config)."""
    lr_schedule: tuple[tuple[float, float], ...] | None = None
    """Piecewise-linear ``[[timestep, lr], ...]`` overriding ``lr``, evaluated at the start
    of each step (copied from the trainer config)."""

    def __post_init__(self) -> None:
        self.check("num_shards", self.num_shards >= 1, "must be >= 1")
        self.check("max_in_flight_per_evaluator", self.max_in_flight_per_evaluator >= 1, ">= 1")
        self.check("grads_per_step", self.grads_per_step >= 0, "must be >= 0 (0 = by rows)")
        self.check("num_cpus_per_shard", self.num_cpus_per_shard >= 0, "must be >= 0")
        self.check("lr", self.lr > 0, "must be > 0")


def _adam(params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    # CRUCIAL: the same Adam as TorchPolicyGraph.make_optimizer (eps=1e-5, fused when
    # available), so sharded updates equal unsharded ones.
    try:
        return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=1e-5, foreach=True)


class ParameterShard:
    """One flat slice of the weights and the Adam that updates it.

    A plain class: the in-process path uses instances directly, and
    ``ray.remote(num_cpus=...)(ParameterShard)`` makes the server actor.

    Args:
        weights: the initial flat slice (1-d float array).
        lr: Adam's learning rate.
        num_threads: torch intra-op threads for this process (actors: their CPUs).
    """

    def __init__(self, weights: np.ndarray, lr: float, num_threads: int | None = None):
        if num_threads:
            torch.set_num_threads(num_threads)
        weights = np.asarray(weights)
        if weights.ndim != 1:
            raise ValueError(f"a shard is a flat vector, got shape {weights.shape}")
        self.param = torch.nn.Parameter(torch.tensor(weights))
        self.optimizer = _adam([self.param], lr)
        self.num_updates = 0
        self.apply_time_s = 0.0

    def _tensor(self, array: np.ndarray, what: str) -> torch.Tensor:
        value = torch.tensor(
            np.asarray(array), dtype=self.param.dtype
        )  # a copy: Ray's are read-only
        if value.shape != self.param.shape:
            raise ValueError(
                f"{what} has shape {tuple(value.shape)}, this shard holds {tuple(self.param.shape)}"
            )
        return value

    def apply_gradients(self, grad_shard: np.ndarray) -> np.ndarray:
        """One Adam step with ``grad_shard``; returns the new weights of this shard."""
        start = time.perf_counter()
        self.param.grad = self._tensor(grad_shard, "gradient shard")
        self.optimizer.step()
        self.num_updates += 1
        self.apply_time_s += time.perf_counter() - start
        return self.get_weights()

    def get_weights(self) -> np.ndarray:
        """A copy of this shard's weights."""
        return self.param.detach().numpy().copy()

    def set_weights(self, shard: np.ndarray) -> None:
        """Overwrite the weights (Adam's moments are kept)."""
        with torch.no_grad():
            self.param.copy_(self._tensor(shard, "weight shard"))

    def set_lr(self, lr: float) -> None:
        """Change Adam's learning rate (for ``lr_schedule``)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def get_optimizer_state(self) -> dict[str, Any]:
        """Adam's moments (flat arrays, zeros before the first step) and its step count."""
        state = self.optimizer.state.get(self.param) or {}
        zeros = np.zeros(self.param.shape, dtype=self.get_weights().dtype)
        return {
            "exp_avg": state["exp_avg"].numpy().copy() if state else zeros,
            "exp_avg_sq": state["exp_avg_sq"].numpy().copy() if state else zeros.copy(),
            "step": float(state["step"]) if state else 0.0,
        }

    def set_optimizer_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``get_optimizer_state``."""
        if float(state["step"]) == 0.0:
            self.optimizer.state.pop(self.param, None)
            return
        self.optimizer.state[self.param] = {
            "step": torch.tensor(float(state["step"]), dtype=torch.float32),
            "exp_avg": self._tensor(state["exp_avg"], "exp_avg"),
            "exp_avg_sq": self._tensor(state["exp_avg_sq"], "exp_avg_sq"),
        }

    def stats(self) -> dict[str, float]:
        """Size, updates applied and mean Adam step time of this shard."""
        return {
            "size": float(self.param.numel()),
            "num_updates": float(self.num_updates),
            "apply_time_ms": 1000.0 * self.apply_time_s / max(self.num_updates, 1),
        }


@dataclasses.dataclass
class GradientInfo:
    """What an evaluator reports with each gradient (its K shards travel separately)."""

    count: int
    """Rows of the sampled batch the gradient was computed on."""
    stats: dict[str, float]
    """``compute_gradients`` statistics (losses, gradient norm)."""
    sample_time_s: float
    """Seconds the evaluator spent in ``sample()``."""
    grad_time_s: float
    """Seconds the evaluator spent in ``compute_gradients``."""


def load_weight_shards(
    evaluator: PolicyEvaluator, spec: ShardSpec, shards: Sequence[np.ndarray]
) -> None:
    """Load trainable weights from ``shards`` into the default policy (other entries kept).

    Goes through the evaluator's own (locked) methods, safe beside background sampling.
    """
    weights = evaluator.get_weights()[DEFAULT_POLICY_ID]
    weights.update(zip(spec.names, spec.concat(shards), strict=True))
    evaluator.set_weights({DEFAULT_POLICY_ID: weights})


def compute_gradient_shards(
    evaluator: PolicyEvaluator,
    spec: ShardSpec,
    global_vars: dict[str, Any],
    *weight_shards: np.ndarray,
) -> tuple[Any, ...]:
    """Evaluator-side task: [load weight shards] → sample → clipped gradients → K shards.

    Returns ``(*gradient_shards, GradientInfo)``.  Run remotely as
    ``evaluator.apply.options(num_returns=K + 1).remote(compute_gradient_shards, ...)``
    so that each gradient shard is its own object ref, and pass the weight shards as
    top-level refs so Ray moves them from the shard actors straight to the evaluator.
    """
    if weight_shards:
        load_weight_shards(evaluator, spec, weight_shards)
    evaluator.set_global_vars(global_vars)
    start = time.perf_counter()
    batch = evaluator.sample()
    sampled = time.perf_counter()
    grads, stats = evaluator.compute_gradients(batch, clip=True)
    info = GradientInfo(batch.count, stats, sampled - start, time.perf_counter() - sampled)
    return (*spec.split(grads), info)


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
    A dead evaluator is skipped; if all die, ``step()`` raises RuntimeError.  Only the
    default policy is trained.
    """

    name = "sharded_ps"
    config_class = ShardedPSConfig

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
        self._synced = [weights[n] for n in names]  # the local policy's trainable weights
        self._remote = bool(self.remote_evaluators)
        self._lr = self._scheduled_lr()
        self.pool = TaskPool(cfg.max_in_flight_per_evaluator)
        self._backlog: deque[Finished] = deque()  # finished gradients not yet applied
        self._version = 0  # bumped whenever the shards' weights change
        self._local_version = 0  # the version the local policy holds
        self._evaluator_version: dict[Any, int] = {}
        self.num_gradients_applied = 0
        self.num_weight_pulls = 0
        self.num_dropped_gradients = 0
        self.bytes_through_driver = 0
        initial = self.spec.split(self._synced)
        if self._remote:
            import ray

            actor_class = ray.remote(num_cpus=cfg.num_cpus_per_shard)(ParameterShard)
            threads = max(1, int(cfg.num_cpus_per_shard))
            self.shards: list[Any] = [actor_class.remote(w, self._lr, threads) for w in initial]
            self.bytes_through_driver += sum(w.nbytes for w in initial)
            self._weight_refs = [s.get_weights.remote() for s in self.shards]
            self._spec_ref = ray.put(self.spec)
        else:
            self.shards = [ParameterShard(w, self._lr) for w in initial]

    # -- helpers -----------------------------------------------------------------------
    def _scheduled_lr(self) -> float:
        if self.config.lr_schedule:
            return piecewise_linear(self.config.lr_schedule, self.num_steps_sampled)
        return self.config.lr

    def _on_shards(self, method: str, *per_shard: list[Any]) -> list[Any]:
        """``shard_k.method(per_shard[0][k], ...)`` on every shard, waiting for the results."""
        args = list(zip(*per_shard, strict=True)) if per_shard else [()] * len(self.shards)
        if not self._remote:
            return [getattr(s, method)(*a) for s, a in zip(self.shards, args, strict=True)]
        refs = [getattr(s, method).remote(*a) for s, a in zip(self.shards, args, strict=True)]
        return self.evaluators.get(refs)

    def _global_vars(self) -> dict[str, Any]:
        return {"timestep": self.num_steps_sampled}

    def _record(self, info: GradientInfo, totals: dict[str, float]) -> None:
        self.num_gradients_applied += 1
        self.num_updates += 1
        self.num_steps_sampled += info.count
        self.num_steps_trained += info.count
        self.timer("sample").push(info.sample_time_s)
        self.timer("grad").push(info.grad_time_s)
        for k, v in info.stats.items():
            totals[k] += v

    def _step_done(self, grads: int, rows: int) -> bool:
        if self.config.grads_per_step > 0:
            return grads >= self.config.grads_per_step
        return grads > 0 and rows >= self.config.train_batch_size

    def _local_trainable(self) -> list[np.ndarray]:
        weights = self.local_evaluator.get_weights()[DEFAULT_POLICY_ID]
        return [weights[n] for n in self.spec.names]

    def _drop_in_flight(self) -> None:
        """Forget unapplied gradients; queued tasks are cancelled, a running one ends unseen."""
        refs = self.pool.drain()
        self.num_dropped_gradients += len(refs) + len(self._backlog)
        self._backlog.clear()
        if refs:
            import ray

            for ref in refs:
                ray.cancel(ref)

    def _push_to_shards(self, current: list[np.ndarray]) -> None:
        # CRUCIAL: gradients in flight were computed on the replaced weights; drop them.
        self._drop_in_flight()
        shards = self.spec.split(current)
        self._on_shards("set_weights", shards)
        self._synced = current
        self._version += 1  # every evaluator pulls the new weights with its next task
        self._local_version = self._version
        if self._remote:
            self.bytes_through_driver += sum(s.nbytes for s in shards)
            self._weight_refs = [s.get_weights.remote() for s in self.shards]

    def push_local_weights(self, global_vars: Mapping[str, Any] | None = None) -> None:
        """Load the local policy's trainable weights into the shards (Adam moments kept).

        Gradients still in flight were computed on the old weights and are dropped; each
        remote evaluator receives the new weights with its next task.
        """
        if global_vars:
            self.local_evaluator.set_global_vars(global_vars)
        self._push_to_shards(self._local_trainable())

    def _update_lr(self) -> None:
        lr = self._scheduled_lr()
        if lr != self._lr:
            self._on_shards("set_lr", [lr] * len(self.shards))
            self._lr = lr

    def _load_local(self, shards: list[np.ndarray]) -> None:
        load_weight_shards(self.local_evaluator, self.spec, shards)
        self._synced = self.spec.concat(shards)
        self._local_version = self._version

    # -- step --------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """Apply gradients until the step's budget (``grads_per_step`` or rows) is met."""
        current = self._local_trainable()  # changed outside step() without a push?
        if not all(
            np.array_equal(a, b, equal_nan=True) for a, b in zip(current, self._synced, strict=True)
        ):
            self._push_to_shards(current)
        self._update_lr()
        totals: dict[str, float] = defaultdict(float)
        grads, rows = 0, 0
        with self.timer("learn"):
            while not self._step_done(grads, rows):
                info = self._next_local(totals) if not self._remote else self._next_remote(totals)
                grads, rows = grads + 1, rows + info.count
        with self.timer("sync"):
            if self._remote and self._local_version != self._version:
                shards = self.evaluators.get(self._weight_refs)
                self.bytes_through_driver += sum(s.nbytes for s in shards)
                self._load_local(shards)
            self.local_evaluator.set_global_vars(self._global_vars())
        self.learner_stats = {k: v / grads for k, v in totals.items()}
        return self.learner_stats

    def _next_local(self, totals: dict[str, float]) -> GradientInfo:
        """In-process: gradient on the local evaluator → shards → weights back into it."""
        *grad_shards, info = compute_gradient_shards(
            self.local_evaluator, self.spec, self._global_vars()
        )
        with self.timer("apply"):
            new = [s.apply_gradients(g) for s, g in zip(self.shards, grad_shards, strict=True)]
        self._version += 1
        self._load_local(new)
        self._record(info, totals)
        return info

    def _launch(self) -> None:
        """Fill every live evaluator up to ``max_in_flight_per_evaluator`` tasks."""
        k = self.spec.num_shards
        for e in self.remote_evaluators:
            while self.pool.has_capacity(e):
                stale = self._evaluator_version.get(e) != self._version
                weight_refs = self._weight_refs if stale else []
                if stale:
                    self.num_weight_pulls += 1
                    self._evaluator_version[e] = self._version
                refs = e.apply.options(num_returns=k + 1).remote(
                    compute_gradient_shards, self._spec_ref, self._global_vars(), *weight_refs
                )
                self.pool.add(e, refs[-1], tag=refs[:-1])

    def _next_remote(self, totals: dict[str, float]) -> GradientInfo:
        """Wait for one gradient, route its shards to the servers, relaunch its evaluator."""
        while not self._backlog:
            self._launch()
            if not len(self.pool):
                raise RuntimeError(
                    f"all {len(self.remote_evaluators)} remote evaluators died; "
                    "sharded_ps has no one left to compute gradients"
                )
            with self.timer("wait"):
                finished = self.pool.wait_any(self.evaluators.get_timeout_s, fetch=True)
            for done in finished:
                if done.error is None:
                    self._backlog.append(done)
                elif not is_actor_death(done.error):
                    raise done.error  # a real failure (e.g. a non-finite loss): surface it
        done = self._backlog.popleft()
        with self.timer("apply"):
            # CRUCIAL: gradient ref k goes to shard k, so the bulk data moves actor to
            # actor; the evaluator's next task gets the new weight refs the same way.
            self._weight_refs = [
                s.apply_gradients.remote(g) for s, g in zip(self.shards, done.tag, strict=True)
            ]
            self._version += 1
        self._launch()
        self._record(done.value, totals)
        return done.value

    # -- stats, state, shutdown ---------------------------------------------------------
    def get_shard_weights(self) -> dict[str, np.ndarray]:
        """The trainable weights as the shards hold them now (fetched and concatenated)."""
        shards = self._on_shards("get_weights")
        if self._remote:
            self.bytes_through_driver += sum(s.nbytes for s in shards)
        return dict(zip(self.spec.names, self.spec.concat(shards), strict=True))

    def shard_stats(self) -> list[dict[str, float]]:
        """Each shard's ``stats()``."""
        return self._on_shards("stats")

    def stats(self) -> dict[str, float]:
        """Base counters and timers plus the parameter-server counters."""
        return {
            **super().stats(),
            "num_gradients_applied": self.num_gradients_applied,
            "num_weight_pulls": self.num_weight_pulls,
            "num_shards": self.spec.num_shards,
            "bytes_through_driver": self.bytes_through_driver,
            "in_flight": len(self.pool),
            "num_dropped_gradients": self.num_dropped_gradients,
            "num_healthy_evaluators": len(self.remote_evaluators) - len(self.pool.dead),
        }

    def save(self) -> dict[str, Any]:
        """Counters plus the shards' Adam moments (per parameter, so any ``num_shards`` can
        restore them); the weights themselves are in the local evaluator's checkpoint."""
        states = self._on_shards("get_optimizer_state")
        moments = {
            key: dict(zip(self.spec.names, self.spec.concat([s[key] for s in states]), strict=True))
            for key in ("exp_avg", "exp_avg_sq")
        }
        if self._remote:
            self.bytes_through_driver += 2 * sum(s["exp_avg"].nbytes for s in states)
        return {
            **super().save(),
            "num_gradients_applied": self.num_gradients_applied,
            "adam": {**moments, "step": max(s["step"] for s in states)},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Counters and Adam moments from ``save``; the shards take the local weights at
        the next step.  A state without moments (another optimizer's) starts Adam afresh."""
        super().restore(state)
        self.num_gradients_applied = int(state.get("num_gradients_applied", 0))
        adam = state.get("adam")
        if adam is None:
            return
        try:
            moments = {key: self.spec.split(adam[key]) for key in ("exp_avg", "exp_avg_sq")}
        except ValueError as e:
            raise ValueError(f"sharded_ps state does not fit this policy: {e}") from e
        step = float(adam["step"])
        self._on_shards(
            "set_optimizer_state",
            [
                {"exp_avg": m, "exp_avg_sq": v, "step": step}
                for m, v in zip(moments["exp_avg"], moments["exp_avg_sq"], strict=True)
            ],
        )

    def stop(self) -> None:
        """Cancel in-flight gradient tasks and kill the shard actors."""
        self._drop_in_flight()
        if self._remote:
            import ray

            for shard in self.shards:
                ray.kill(shard)
        self.shards = []
