"""``local``: synchronous sampling, SGD on the driver, weight broadcast.

RLlib (ICML 2018) Fig. 4 / original ``SyncSamplesOptimizer``: gather samples from all
evaluators (or from the local one when there are none), run minibatch SGD epochs on the
driver's policy, broadcast the new weights.  Multi-agent: the samples are a
MultiAgentBatch and every policy in the evaluator's ``policies_to_train`` gets its own
SGD epochs on its own rows; the others stay frozen.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hierl.optimizers.base import PolicyOptimizer, single_policy_stats
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.sgd import SGDConfig, minibatch_sgd
from hierl.policy_graph import LearnerStats
from hierl.sample_batch import MultiAgentBatch, SampleBatch, concat_samples


@dataclasses.dataclass
class LocalConfig(SGDConfig):
    """Settings of the ``local`` optimizer (the SGD epochs')."""


@register_optimizer
class LocalOptimizer(PolicyOptimizer):
    """Sync samples → SGD on the driver → broadcast weights."""

    name = "local"
    config_class = LocalConfig
    supports_multi_agent = True
    supports_recurrent = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rng = np.random.default_rng(self.seed)

    def gather(self) -> SampleBatch | MultiAgentBatch:
        """Sample in rounds over all evaluators until ``train_batch_size`` rows
        (environment steps for multi-agent batches)."""
        batches: list[SampleBatch | MultiAgentBatch] = []
        count = 0
        while count < self.config.train_batch_size:
            if self.remote_evaluators:
                # A failed evaluator is recreated (or dropped): this round uses the others.
                new = [b for _, b in self.evaluators.call_remotes(lambda e: e.sample.remote())]
            else:
                new = [self.local_evaluator.sample()]
            batches.extend(new)
            count += sum(b.count for b in new)
        return concat_samples(batches)

    def step(self) -> LearnerStats:
        """One synchronous round."""
        with self.timer("sample"):
            batch = self.gather()
        with self.timer("learn"):
            if isinstance(batch, MultiAgentBatch):
                self.learner_stats, num_updates = self._learn_multi_agent(batch)
            else:
                stats = minibatch_sgd(
                    self.local_evaluator.policy,
                    batch,
                    self.config.num_sgd_iter,
                    self.config.sgd_minibatch_size,
                    self.rng,
                )
                num_updates = stats.pop("num_updates")
                self.learner_stats = single_policy_stats(stats)
        self.num_updates += int(num_updates)
        self.num_steps_sampled += batch.count
        self.num_steps_trained += batch.count * self.config.num_sgd_iter
        with self.timer("sync"):
            self.evaluators.sync_weights(self.global_vars())
        return self.learner_stats

    def _learn_multi_agent(self, batch: MultiAgentBatch) -> tuple[LearnerStats, int]:
        """SGD epochs per trained policy; ``(stats per policy id, updates made)``."""
        evaluator = self.local_evaluator
        stats: LearnerStats = {}
        num_updates = 0
        for pid in evaluator.policies_to_train:
            policy_batch = batch.policy_batches.get(pid)
            if policy_batch is None or policy_batch.count == 0:
                continue
            policy_stats = minibatch_sgd(
                evaluator.policy_map[pid],
                policy_batch,
                self.config.num_sgd_iter,
                self.config.sgd_minibatch_size,
                self.rng,
            )
            num_updates += policy_stats.pop("num_updates")
            stats[pid] = policy_stats
        return stats, num_updates
