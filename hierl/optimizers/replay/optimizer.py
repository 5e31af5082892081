"""``replay``: synchronous sampling into a (prioritized) replay buffer on the driver.

RLlib (ICML 2018) §3.3 lists replay among the policy optimizer's jobs; this is the
original ``SyncReplayOptimizer`` behind DQN (Mnih et al. 2015) with proportional
prioritized replay (Schaul et al. 2016, "Prioritized Experience Replay",
https://arxiv.org/abs/1511.05952, Algorithm 1): every step samples each evaluator once,
stores the rows, and once ``learning_starts`` rows were stored replays
``replay_ratio``-many rows per sampled env step in batches of ``train_batch_size``,
each followed by a priority update from the policy's TD errors
(``PolicyGraph.learn_on_replay_batch`` returns them as ``LearnResult.td_error``).

New rows enter the buffer at the largest priority seen so far (Algorithm 1, line 6:
``p_t = max_{i<t} p_i``), so each is replayed at least once before its TD error sets
its priority.  ``worker_side_prioritization`` instead has the evaluators compute
``|TD error| + eps`` for fresh rows (the policy's ``TDErrors``, one extra
target-network pass per sampled batch): Ape-X's behaviour (Horgan et al. 2018), the
default of the ``apex`` optimizer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer, single_policy_stats
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.replay.frames import FrameStorage
from hierl.optimizers.replay.prioritized import make_replay_buffer
from hierl.policy_graph import LearnerStats, TDErrors, UpdateStats
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class ReplayConfig(OptimizerConfig):
    """Settings of the ``replay`` optimizer."""

    train_batch_size: int = 32
    """Rows per replayed batch (one learner update each)."""
    buffer_size: int = 50_000
    """Rows kept in the replay buffer (oldest overwritten first)."""
    prioritized_replay: bool = True
    """Proportional prioritized replay (else uniform)."""
    prioritized_replay_alpha: float = 0.6
    """Prioritization exponent alpha: P(i) ∝ p_i^alpha (0 = uniform)."""
    prioritized_replay_beta: float = 0.4
    """Initial importance-sampling exponent beta."""
    final_prioritized_replay_beta: float = 1.0
    """Beta after annealing (1 fully corrects the sampling bias)."""
    prioritized_replay_beta_annealing_timesteps: int = 20_000
    """Sampled env steps over which beta goes linearly to its final value."""
    prioritized_replay_eps: float = 1e-6
    """Added to |TD error| so that no row's priority is 0."""
    learning_starts: int = 1000
    """Rows stored before the first update, counted over the whole run (checkpoints keep
    the count).  It may exceed ``buffer_size``: learning then waits past the first
    overwrites, as SB3's ``learning_starts`` (env steps) does with a smaller buffer.
    After a restore without the buffer, learning resumes once the buffer has been given
    ``min(learning_starts, buffer_size)`` new rows."""
    replay_ratio: float = 1.0
    """Rows replayed per env step sampled (at least one update per step once learning)."""
    frame_storage: FrameStorage = "auto"
    """How ``obs`` and ``new_obs`` are stored: ``auto`` stores each frame once when they
    are stacked uint8 images (Atari's ``(4, 84, 84)``: ~7 GB instead of 56 GB for 1M
    rows; stacks rebuilt exactly on sampling), ``frames`` always, ``rows`` never."""
    checkpoint_replay_buffer: bool = False
    """Save the buffer's rows, priorities and sampling RNG in checkpoints (``replay``
    only: Ape-X shards are not saved)."""
    worker_side_prioritization: bool = False
    """Fresh rows enter prioritized replay at the priority the sampling evaluator computes
    (``|TD error| + eps``, the policy's ``TDErrors``, as in Ape-X) instead of at the
    buffer's max priority (Schaul et al. 2016, Algorithm 1).  Costs one extra
    target-network pass per sampled batch; ignored for uniform replay."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(
            "checkpoint_replay_buffer",
            not self.checkpoint_replay_buffer or type(self) is ReplayConfig,
            "True is only supported by the 'replay' optimizer; use False",
        )
        self.check("buffer_size", self.buffer_size >= 1, "must be >= 1")
        self.check("prioritized_replay_alpha", self.prioritized_replay_alpha >= 0, "must be >= 0")
        self.check("prioritized_replay_beta", self.prioritized_replay_beta >= 0, "must be >= 0")
        self.check(
            "final_prioritized_replay_beta", self.final_prioritized_replay_beta >= 0, "must be >= 0"
        )
        self.check(
            "prioritized_replay_beta_annealing_timesteps",
            self.prioritized_replay_beta_annealing_timesteps >= 0,
            "must be >= 0",
        )
        self.check("prioritized_replay_eps", self.prioritized_replay_eps > 0, "must be > 0")
        self.check("learning_starts", self.learning_starts >= 1, "must be >= 1")
        self.check("replay_ratio", self.replay_ratio > 0, "must be > 0")

    @property
    def initial_priorities_on_workers(self) -> bool:
        """Whether evaluators compute initial priorities for the rows they sample."""
        return self.prioritized_replay and self.worker_side_prioritization

    @property
    def initial_priority_eps(self) -> float | None:
        """What ``sample_with_priorities`` adds to the evaluators' TD errors:
        ``prioritized_replay_eps``, or None when they compute no initial priorities."""
        return self.prioritized_replay_eps if self.initial_priorities_on_workers else None


def sample_with_priorities(
    evaluator: PolicyEvaluator, priority_eps: float | None
) -> tuple[SampleBatch, np.ndarray | None]:
    """Evaluator-side: one ``sample()`` plus, unless ``priority_eps`` is None, the rows'
    initial priorities ``|TD error| + priority_eps`` (the policy's ``TDErrors``).

    Runs inside remote evaluators through ``evaluator.apply``; priorities are None when
    not asked for or when the policy has no TD errors (rows then enter at the max
    priority).
    """
    batch = evaluator.sample()
    policy = evaluator.policy
    if priority_eps is None or not isinstance(policy, TDErrors):
        return batch, None
    return batch, np.abs(policy.compute_td_errors(batch)) + priority_eps


@register_optimizer
class ReplayOptimizer(PolicyOptimizer):
    """Sync samples → replay buffer → updates on replayed batches → broadcast weights."""

    name = "replay"
    config_class = ReplayConfig
    learns_from = "replay"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.buffer = make_replay_buffer(
            cfg.buffer_size,
            cfg.prioritized_replay,
            alpha=cfg.prioritized_replay_alpha,
            seed=self.seed,
            frame_storage=cfg.frame_storage,
        )
        self.num_updates = 0
        self.num_steps_replayed = 0
        self._update_credit = 0.0

    @property
    def beta(self) -> float:
        """The importance-sampling exponent at the current sampled timestep."""
        cfg = self.config
        horizon = cfg.prioritized_replay_beta_annealing_timesteps
        frac = min(1.0, self.num_steps_sampled / horizon) if horizon else 1.0
        b0, b1 = cfg.prioritized_replay_beta, cfg.final_prioritized_replay_beta
        return b0 + frac * (b1 - b0)

    def _num_updates_for(self, new_rows: int) -> int:
        """Updates owed for ``new_rows`` sampled env steps; at least one.

        The fractional remainder carries over to later steps; a forced minimum update
        does not create a debt.
        """
        self._update_credit += self.config.replay_ratio * new_rows / self.config.train_batch_size
        num = max(1, math.floor(self._update_credit))
        self._update_credit = max(0.0, self._update_credit - num)
        return num

    def step(self) -> LearnerStats:
        """One round: sample every evaluator once, store, replay, broadcast weights."""
        # CRUCIAL: by default no initial priorities, so new rows enter at the max priority
        # (Schaul et al. 2016, Algorithm 1) and are replayed at least once.
        eps = self.config.initial_priority_eps
        with self.timer("sample"):
            if self.remote_evaluators:
                # A failed evaluator is recreated (or dropped): this round uses the others.
                results = [
                    r
                    for _, r in self.evaluators.call_remotes(
                        lambda e: e.apply.remote(sample_with_priorities, eps)
                    )
                ]
            else:
                results = [sample_with_priorities(self.local_evaluator, eps)]
            for batch, priorities in results:
                self.buffer.add(batch, priorities)
        new_rows = sum(batch.count for batch, _ in results)
        self.num_steps_sampled += new_rows

        self.learner_stats = {}
        if self._learning():
            stats = self._replay_and_learn(self._num_updates_for(new_rows))
            self.learner_stats = single_policy_stats(stats)

        with self.timer("sync"):
            self.evaluators.sync_weights(self.global_vars())
        return self.learner_stats

    def _learning(self) -> bool:
        """``learning_starts`` rows sampled in the run, and as many (at most a full
        buffer's worth) added to this buffer: a restore without the buffer refills it
        first.  Counted in rows added, not held: frame storage may drop the oldest rows
        early, and that must not pause learning."""
        starts = self.config.learning_starts
        return self.num_steps_sampled >= starts and self.buffer.num_added >= min(
            starts, self.buffer.capacity
        )

    def _replay_and_learn(self, num_updates: int) -> dict[str, float]:
        """``num_updates`` replayed batches, each learned on and re-prioritized."""
        cfg = self.config
        policy = self.local_evaluator.policy
        totals = UpdateStats()
        beta = self.beta
        for _ in range(num_updates):
            with self.timer("replay"):
                batch = self.buffer.sample(cfg.train_batch_size, beta=beta)
            with self.timer("learn"):
                result = policy.learn_on_replay_batch(batch)
            if cfg.prioritized_replay and result.td_error is not None:
                with self.timer("update_priorities"):
                    self.buffer.update_priorities(
                        batch[SampleBatch.BATCH_INDEXES],
                        np.abs(result.td_error) + cfg.prioritized_replay_eps,
                    )
            totals.add(result.stats)
        self.num_updates += num_updates
        self.num_steps_replayed += num_updates * cfg.train_batch_size
        self.num_steps_trained += num_updates * cfg.train_batch_size
        return totals.result()

    def stats(self) -> dict[str, float]:
        """Adds ``num_updates``, ``num_steps_replayed``, beta and ``buffer_*`` statistics."""
        out = {
            **super().stats(),
            "num_updates": self.num_updates,
            "num_steps_replayed": self.num_steps_replayed,
            **{f"buffer_{k}": v for k, v in self.buffer.stats().items()},
        }
        if self.config.prioritized_replay:
            out["prioritized_replay_beta"] = self.beta
        return out

    def save(self) -> dict[str, Any]:
        """Counters (JSON), plus the buffer (rows, priorities, RNG) if
        ``checkpoint_replay_buffer``.

        Without the buffer, after ``restore`` learning resumes once the buffer has been given
        ``min(learning_starts, buffer_size)`` new rows.
        """
        out = {
            **super().save(),
            "num_updates": self.num_updates,
            "num_steps_replayed": self.num_steps_replayed,
            "update_credit": self._update_credit,
        }
        if self.config.checkpoint_replay_buffer:
            out["buffer"] = self.buffer.get_state()
        return out

    def restore(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``save`` (a saved buffer is loaded whatever this config's flag)."""
        super().restore(state)
        self.num_updates = int(state.get("num_updates", 0))
        self.num_steps_replayed = int(state.get("num_steps_replayed", 0))
        self._update_credit = float(state.get("update_credit", 0.0))
        if state.get("buffer") is not None:
            self.buffer.set_state(state["buffer"])
