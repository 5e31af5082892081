"""hierl: distributed reinforcement learning with hierarchical task control.

The three abstractions of RLlib (ICML 2018): PolicyGraph, PolicyEvaluator and named
policy optimizers, with Trainers on top that nest inside other loops and Ray Tune.
Public names are imported lazily, so ``import hierl`` (and ``hierl --help``) stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping

from hierl._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "CheckpointError": "hierl.checkpoint",
    "ConfigError": "hierl.config",
    "EpisodeCallbacks": "hierl.evaluators",
    "EvaluatorSet": "hierl.evaluators",
    "EvaluatorSpec": "hierl.evaluators",
    "ModelConfig": "hierl.models",
    "MultiAgentBatch": "hierl.sample_batch",
    "MultiAgentEnv": "hierl.evaluators",
    "PolicyEvaluator": "hierl.evaluators",
    "PolicyGraph": "hierl.policy_graph",
    "PolicyOptimizer": "hierl.optimizers",
    "PolicySpec": "hierl.evaluators",
    "SampleBatch": "hierl.sample_batch",
    "TorchPolicyGraph": "hierl.torch_policy_graph",
    "Trainer": "hierl.algorithms",
    "TrainerConfig": "hierl.algorithms",
    "get_optimizer_class": "hierl.optimizers",
    "get_trainer_class": "hierl.algorithms",
    "make_multi_agent": "hierl.evaluators",
    "register_env": "hierl.evaluators",
    "register_model": "hierl.models.registry",
    "register_optimizer": "hierl.optimizers",
    "register_trainer": "hierl.algorithms",
}

__all__ = sorted(_EXPORTS)


def _trainer_classes() -> Mapping[str, str]:
    """Every built-in trainer class by name (``from hierl import PPOTrainer, BCTrainer``:
    their one public import path), read from the trainer registry when first asked for."""
    from hierl.algorithms.registry import trainer_class_exports

    return trainer_class_exports()


__getattr__, __dir__ = lazy_exports("hierl", globals(), _EXPORTS, more=_trainer_classes)
