"""The multi-agent environment interface: dicts keyed by agent id.

RLlib's convention (ICML 2018 §4, "multi-agent"): one env steps several agents; every
per-agent quantity is a dict keyed by agent id.  The calling loop:

    obs, infos = env.reset(seed=0)                # obs: {agent_id: obs} of the agents to act
    while True:
        actions = {aid: policy_for(aid).act(o) for aid, o in obs.items()}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        # rewards[aid]: reward since aid last acted; terminateds/truncateds[aid]: aid leaves
        if terminateds["__all__"] or truncateds["__all__"]:
            break                                  # the episode is over for everyone

Agents present in ``obs`` act next (simultaneous moves: all of them; turn-based: one).
An agent whose ``terminateds``/``truncateds`` entry is True leaves the episode (its obs,
if given, is its final observation); ids not seen before may appear in any ``obs``
(agents entering).  ``"__all__"`` ends the episode for every agent still in it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

AgentID = Hashable
"""An agent id: any hashable (``0``, ``"red_1"``...)."""

ALL = "__all__"
"""Key in ``terminateds`` / ``truncateds`` that ends the episode for every agent."""

MultiAgentDict = dict[Any, Any]


class MultiAgentEnv:
    """Base class of multi-agent envs: implement ``reset`` and ``step``; set the spaces.

    Subclasses set ``observation_spaces`` and ``action_spaces`` (agent id → space) for
    every agent that may appear, or override ``get_observation_space`` /
    ``get_action_space`` for open-ended ids.  ``possible_agents`` (default: the keys of
    ``observation_spaces``) is what policies' spaces are inferred from.
    """

    observation_spaces: dict[Any, gym.Space] = {}
    action_spaces: dict[Any, gym.Space] = {}

    @property
    def possible_agents(self) -> list[Any]:
        """Every agent id that may appear in an episode."""
        return list(self.observation_spaces)

    def get_observation_space(self, agent_id: Any) -> gym.Space:
        """The observation space of ``agent_id``."""
        return _space(self.observation_spaces, agent_id, "observation_spaces", self)

    def get_action_space(self, agent_id: Any) -> gym.Space:
        """The action space of ``agent_id``."""
        return _space(self.action_spaces, agent_id, "action_spaces", self)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Start an episode; returns ``(obs, infos)`` keyed by agent id."""
        raise NotImplementedError

    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Apply the actions of the agents that were asked to act.

        Returns ``(obs, rewards, terminateds, truncateds, infos)``; ``terminateds`` and
        ``truncateds`` carry ``"__all__"``.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (default: nothing)."""


def _space(spaces: Mapping[Any, gym.Space], agent_id: Any, attr: str, env: Any) -> gym.Space:
    try:
        return spaces[agent_id]
    except KeyError:
        raise KeyError(
            f"{type(env).__name__}.{attr} has no entry for agent {agent_id!r}; "
            f"agents with spaces: {list(spaces)}"
        ) from None


def make_multi_agent(
    env: str | Callable[[Mapping[str, Any]], gym.Env], num_agents: int = 2
) -> type[MultiAgentEnv]:
    """A MultiAgentEnv class whose agents ``0..n-1`` each play their own copy of ``env``.

    ``env`` is a Gymnasium id or ``creator(env_config) -> gym.Env``.  The class takes an
    ``env_config`` dict (``num_agents`` in it overrides the default; the rest goes to the
    single-agent env).  Each agent leaves when its copy terminates or truncates; the
    episode ends when all have left.  Like RLlib's ``make_multi_agent`` (MultiCartPole):

        MultiCartPole = make_multi_agent("CartPole-v1")
        config = {"env": MultiCartPole, "env_config": {"num_agents": 2}, ...}
    """
    default_agents = int(num_agents)

    def make_one(config: Mapping[str, Any]) -> gym.Env:
        if callable(env):
            return env(config)
        return gym.make(env, **dict(config))

    class IndependentMultiAgentEnv(MultiAgentEnv):
        """``num_agents`` independent copies of one single-agent env."""

        def __init__(self, env_config: Mapping[str, Any] | None = None):
            config = dict(env_config or {})
            n = int(config.pop("num_agents", default_agents))
            self.envs = [make_one(config) for _ in range(n)]
            self.observation_spaces = {i: e.observation_space for i, e in enumerate(self.envs)}
            self.action_spaces = {i: e.action_space for i, e in enumerate(self.envs)}
            self.active: set[int] = set()

        def reset(self, *, seed=None, options=None):
            obs, infos = {}, {}
            for i, e in enumerate(self.envs):
                # distinct, reproducible seeds per copy (seed + i would collide across
                # the evaluator's env copies, which are seeded seed + j)
                s = None
                if seed is not None:
                    s = int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
                obs[i], infos[i] = e.reset(seed=s, options=options)
            self.active = set(range(len(self.envs)))
            return obs, infos

        def step(self, action_dict):
            obs, rew, term, trunc, info = {}, {}, {}, {}, {}
            for i, action in action_dict.items():
                if i not in self.active:
                    raise ValueError(f"agent {i} acted after it was done")
                obs[i], rew[i], term[i], trunc[i], info[i] = self.envs[i].step(action)
                if term[i] or trunc[i]:
                    self.active.discard(i)
            # every agent carries its own flag; "__all__" only says the episode is over
            term[ALL], trunc[ALL] = not self.active, False
            return obs, rew, term, trunc, info

        def close(self):
            for e in self.envs:
                e.close()

    name = env if isinstance(env, str) else getattr(env, "__name__", "env")
    IndependentMultiAgentEnv.__name__ = f"MultiAgent[{name}]"
    IndependentMultiAgentEnv.__qualname__ = IndependentMultiAgentEnv.__name__
    return IndependentMultiAgentEnv
