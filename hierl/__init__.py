"""hierl: distributed reinforcement learning with hierarchical task control.

The three abstractions of RLlib (ICML 2018): PolicyGraph, PolicyEvaluator and named
policy optimizers, with Trainers on top that nest inside other loops and Ray Tune.
"""

from hierl.algorithms import Trainer, TrainerConfig, get_trainer_class, register_trainer
from hierl.checkpoint import CheckpointError
from hierl.config import ConfigError
from hierl.evaluators import EvaluatorSet, PolicyEvaluator, register_env
from hierl.models import ModelConfig
from hierl.optimizers import PolicyOptimizer, get_optimizer_class, register_optimizer
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import MultiAgentBatch, SampleBatch
from hierl.torch_policy_graph import TorchPolicyGraph

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "ConfigError",
    "EvaluatorSet",
    "ModelConfig",
    "MultiAgentBatch",
    "PolicyEvaluator",
    "PolicyGraph",
    "PolicyOptimizer",
    "SampleBatch",
    "TorchPolicyGraph",
    "Trainer",
    "TrainerConfig",
    "get_optimizer_class",
    "get_trainer_class",
    "register_env",
    "register_optimizer",
    "register_trainer",
]
