"""``local``: synchronous sampling, SGD on the driver, weight broadcast.

RLlib (ICML 2018) Fig. 4 / original ``SyncSamplesOptimizer``: gather samples from all
evaluators (or from the local one when there are none), run minibatch SGD epochs on the
driver's policy, broadcast the new weights.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer
from hierl.optimizers.registry import register_optimizer
from hierl.optimizers.sgd import minibatch_sgd
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class LocalConfig(OptimizerConfig):
    """Settings of the ``local`` optimizer."""

    num_sgd_iter: int = 1
    """Epochs over each gathered batch."""
    sgd_minibatch_size: int = 0
    """Minibatch size; 0 = the whole batch in one update."""
    seed: int | None = 0
    """Seeds minibatch shuffling (None: random)."""


@register_optimizer
class LocalOptimizer(PolicyOptimizer):
    """Sync samples → SGD on the driver → broadcast weights."""

    name = "local"
    config_class = LocalConfig

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rng = np.random.default_rng(self.config.seed)

    def gather(self) -> SampleBatch:
        """Sample in rounds over all evaluators until ``train_batch_size`` rows."""
        batches: list[SampleBatch] = []
        count = 0
        while count < self.config.train_batch_size:
            if self.remote_evaluators:
                new = self.evaluators.get([e.sample.remote() for e in self.remote_evaluators])
            else:
                new = [self.local_evaluator.sample()]
            batches.extend(new)
            count += sum(b.count for b in new)
        return SampleBatch.concat_samples(batches)

    def step(self) -> dict[str, float]:
        """One synchronous round."""
        with self.timer("sample"):
            batch = self.gather()
        with self.timer("learn"):
            self.learner_stats = minibatch_sgd(
                self.local_evaluator.policy,
                batch,
                self.config.num_sgd_iter,
                self.config.sgd_minibatch_size,
                self.rng,
            )
        self.num_updates += int(self.learner_stats.pop("num_updates"))
        self.num_steps_sampled += batch.count
        self.num_steps_trained += batch.count * self.config.num_sgd_iter
        with self.timer("sync"):
            self.evaluators.sync_weights({"timestep": self.num_steps_sampled})
        return self.learner_stats
