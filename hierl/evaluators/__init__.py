"""PolicyEvaluator, the rollout loop, env creation, observation filters, evaluator sets."""

from hierl.evaluators.env import EnvContext, register_env
from hierl.evaluators.evaluator_set import EvaluatorSet
from hierl.evaluators.policy_evaluator import PolicyEvaluator
from hierl.evaluators.sampler import EnvError, EpisodeCallbacks, EpisodeRecord

__all__ = [
    "EnvContext",
    "EnvError",
    "EpisodeCallbacks",
    "EpisodeRecord",
    "EvaluatorSet",
    "PolicyEvaluator",
    "register_env",
]
