"""PolicyEvaluator, the rollout loops, env creation, observation filters, evaluator sets."""

from hierl.evaluators.callbacks import Episode, EpisodeCallbacks
from hierl.evaluators.env import EnvContext, EnvError, register_env
from hierl.evaluators.evaluator_set import EvaluatorSet
from hierl.evaluators.multi_agent_env import MultiAgentEnv, make_multi_agent
from hierl.evaluators.multi_agent_sampler import MultiAgentEpisodeRecord
from hierl.evaluators.policy_evaluator import PolicyEvaluator
from hierl.evaluators.policy_map import PolicySpec
from hierl.evaluators.rollout_core import EpisodeRecord
from hierl.evaluators.spec import EvaluatorSpec

__all__ = [
    "EnvContext",
    "EnvError",
    "Episode",
    "EpisodeCallbacks",
    "EpisodeRecord",
    "EvaluatorSet",
    "EvaluatorSpec",
    "MultiAgentEnv",
    "MultiAgentEpisodeRecord",
    "PolicyEvaluator",
    "PolicySpec",
    "make_multi_agent",
    "register_env",
]
