"""``multi_gpu``: gather samples, load them once onto K device towers, SGD epochs across them.

RLlib (ICML 2018) Fig. 4(b), §3.4 (PPO) and Table 3, the original ``LocalMultiGPUOptimizer``:
samples are gathered synchronously (as in ``local``), loaded once into the memory of K devices,
and ``num_sgd_iter`` epochs of minibatch SGD run data-parallel over the towers, each
minibatch split evenly across them with tower gradients averaged; the new weights are
then broadcast.  All device handling lives in ``MultiDeviceLearner``
(``hierl/optimizers/multi_gpu/learner.py``); without CUDA the towers are CPU threads.
"""

from __future__ import annotations

import dataclasses
import time

from hierl.optimizers.base import single_policy_stats
from hierl.optimizers.local import LocalConfig, LocalOptimizer
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.optimizers.registry import register_optimizer
from hierl.policy_graph import LearnerStats
from hierl.torch_policy_graph import TorchPolicyGraph


@dataclasses.dataclass
class MultiGPUConfig(LocalConfig):
    """Settings of the ``multi_gpu`` optimizer (``local``'s plus the number of towers)."""

    num_towers: int = 0
    """Device towers; 0 = one per visible CUDA device (policy on CUDA), else 1 CPU tower.
    Each minibatch is split into ``sgd_minibatch_size // num_towers`` rows per tower."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("num_towers", self.num_towers >= 0, "must be >= 0 (0 = one per GPU)")
        self.check(
            "sgd_minibatch_size",
            self.sgd_minibatch_size == 0 or self.sgd_minibatch_size >= max(1, self.num_towers),
            f"must be 0 (whole batch) or >= num_towers ({self.num_towers})",
        )


@register_optimizer
class MultiGPUOptimizer(LocalOptimizer):
    """Sync samples → load once onto K towers → data-parallel SGD epochs → broadcast.

    Sampling and the broadcast are ``local``'s (``gather``); the learning phase runs on
    a ``MultiDeviceLearner`` over the local evaluator's policy, which therefore
    holds the new weights after every step.  Rows beyond a multiple of ``num_towers``
    are dropped from training (``rows_loaded`` in ``stats()``).
    """

    name = "multi_gpu"
    config_class = MultiGPUConfig
    supports_multi_agent = False  # one learner over one policy
    supports_recurrent = False  # towers split batches by rows
    required_policy_class = TorchPolicyGraph  # the towers are copies of its torch model
    uses_device_towers = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.learner = MultiDeviceLearner(
            self.local_evaluator.policy, num_towers=self.config.num_towers
        )
        self.rows_loaded = 0
        self.learner_samples_per_s = 0.0

    def step(self) -> LearnerStats:
        """One synchronous round over all evaluators."""
        cfg = self.config
        with self.timer("sample"):
            batch = self.gather()
        with self.timer("load"):
            self.rows_loaded = self.learner.load(batch)
        start = time.perf_counter()
        with self.timer("learn"):
            stats = self.learner.optimize(cfg.num_sgd_iter, cfg.sgd_minibatch_size, self.rng)
        trained = self.rows_loaded * cfg.num_sgd_iter
        self.learner_samples_per_s = trained / max(time.perf_counter() - start, 1e-9)
        self.num_updates += int(stats.pop("num_updates"))
        self.learner_stats = single_policy_stats(stats)
        self.num_steps_sampled += batch.count
        self.num_steps_trained += trained
        with self.timer("sync"):
            self.evaluators.sync_weights(self.global_vars())
        return self.learner_stats

    def stats(self) -> dict[str, float]:
        """Adds ``num_towers``, ``rows_loaded`` and ``learner_samples_per_s`` (last step)."""
        return {
            **super().stats(),
            "num_towers": self.learner.num_towers,
            "rows_loaded": self.rows_loaded,
            "learner_samples_per_s": round(self.learner_samples_per_s, 1),
        }

    def stop(self) -> None:
        """Stop the learner's tower threads."""
        self.learner.close()
        super().stop()
