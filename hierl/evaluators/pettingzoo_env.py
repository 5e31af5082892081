"""Adapter: a PettingZoo *parallel* env as a hierl MultiAgentEnv (optional extra).

PettingZoo is not a dependency: the adapter only uses the ParallelEnv API by duck typing
(``possible_agents``, ``observation_space(agent)``, ``action_space(agent)``,
``reset(seed=, options=)``, ``step(actions)`` returning five dicts, ``close()``):

    from pettingzoo.butterfly import pistonball_v6
    config = {"env": lambda cfg: PettingZooEnv(pistonball_v6.parallel_env(**cfg)), ...}

PettingZoo's dicts have no ``"__all__"``: the episode ends when no agent is left.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from hierl.evaluators.multi_agent_env import ALL, MultiAgentEnv

_REQUIRED = ("possible_agents", "observation_space", "action_space", "reset", "step")


class PettingZooEnv(MultiAgentEnv):
    """Wraps a PettingZoo ``ParallelEnv`` (agent ids are PettingZoo's agent names)."""

    def __init__(self, env: Any):
        missing = [name for name in _REQUIRED if not hasattr(env, name)]
        if missing:
            raise TypeError(
                f"{type(env).__name__} is not a PettingZoo parallel env: it lacks {missing} "
                "(AEC envs: convert with pettingzoo.utils.conversions.aec_to_parallel)"
            )
        self.env = env
        self.observation_spaces = {a: env.observation_space(a) for a in env.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in env.possible_agents}

    @property
    def possible_agents(self) -> list[Any]:
        """PettingZoo's ``possible_agents``."""
        return list(self.env.possible_agents)

    def get_observation_space(self, agent_id: Any) -> gym.Space:
        """PettingZoo's ``observation_space(agent)``."""
        return self.env.observation_space(agent_id)

    def get_action_space(self, agent_id: Any) -> gym.Space:
        """PettingZoo's ``action_space(agent)``."""
        return self.env.action_space(agent_id)

    def reset(self, *, seed=None, options=None):
        """PettingZoo's ``reset``: ``(observations, infos)``."""
        obs, infos = self.env.reset(seed=seed, options=options)
        return dict(obs), dict(infos)

    def step(self, action_dict):
        """PettingZoo's ``step`` plus ``"__all__"`` (True once every agent is done)."""
        obs, rewards, terms, truncs, infos = self.env.step(action_dict)
        terms, truncs = dict(terms), dict(truncs)
        live = [a for a in obs if not (terms.get(a) or truncs.get(a))]
        # each agent carries its own flag; "__all__" only says the episode is over
        terms[ALL], truncs[ALL] = not live, False
        return dict(obs), dict(rewards), terms, truncs, dict(infos)

    def close(self) -> None:
        """Close the PettingZoo env."""
        if hasattr(self.env, "close"):
            self.env.close()
