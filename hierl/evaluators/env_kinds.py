"""Env kinds: what an env creator may return, each kind one registration.

An ``EnvKind`` says everything the rest of hierl needs to know about one kind of
env, so that supporting a new kind (say a batched simulator with its own API) is one
``register_env_kind`` call, in this module for the built-in kinds or in your own:

    register_env_kind(EnvKind("MySimulator", MySimulator, MySimulatorSampler))

* its **sampler**: the ``FragmentSampler`` subclass that
  samples it (its ``from_evaluator`` builds it from a PolicyEvaluator; its per-step loop
  calls ``act``, ``RolloutCore.call_env`` and ``RolloutCore.end_episode``), and whether
  an ``EpisodePlayer`` can play it whole episodes at a time (ES, ``hierl rollout``);
* its **spaces**: the observation and action space of one env of the kind (one
  sub-env's for a vector env), or, for a multi-agent kind, per agent (``multi_agent``);
* its **state**: the envs it holds, which ``hierl.evaluators.env_state`` snapshots and
  restores one by one (a vector env's sub-envs), and whether it is already a vector of
  envs (a ``VectorSampler`` then steps it as is instead of stacking copies).

PolicyEvaluator, ``policy_map``, ``env``, ``env_state``, ES and ``hierl rollout``
dispatch through ``env_kind``; none of them tests an env's type itself.  Kinds are
matched in order, the first whose ``env_type`` fits wins; a kind registers before every
kind whose ``env_type`` its own subclasses (a ``gymnasium.Env`` subclass is tried before
plain ``gymnasium.Env``).  Registrations are per process: register a kind in a module
that every process sampling it imports (e.g. the module of its env creator).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.vector import VectorEnv

from hierl.evaluators.multi_agent_env import MultiAgentEnv

if TYPE_CHECKING:
    from hierl.evaluators.rollout_core import FragmentSampler


def own_spaces(env: Any) -> tuple[gym.Space, gym.Space]:
    """``env.observation_space`` and ``env.action_space``."""
    return env.observation_space, env.action_space


def single_spaces(env: Any) -> tuple[gym.Space, gym.Space]:
    """The spaces of one sub-env of a vector env."""
    return env.single_observation_space, env.single_action_space


def no_sub_envs(env: Any) -> Sequence[Any]:
    """An env that holds no other envs."""
    return ()


def vector_sub_envs(env: Any) -> Sequence[Any]:
    """The sub-envs of a vector env that keeps them in ``envs`` (``SyncVectorEnv``);
    none for one that keeps them out of reach (another process, a batched simulator)."""
    sub_envs = getattr(env, "envs", None)
    return sub_envs if isinstance(sub_envs, (list, tuple)) else ()


@dataclasses.dataclass(frozen=True)
class EnvKind:
    """One kind of env hierl can roll out: how to recognise it, which loop samples it,
    its spaces and the envs its state is made of."""

    name: str
    """The kind as messages name it (``"MultiAgentEnv"``)."""
    env_type: type
    """What an env creator returns for this kind (an ``isinstance`` test)."""
    sampler: str | type[FragmentSampler]
    """Its ``FragmentSampler`` subclass, or
    ``"module:Class"`` naming it (imported on first use: the built-in samplers build on
    modules that import this one)."""
    plays_episodes: bool = False
    """Whether an ``EpisodePlayer`` plays it (a single env, single agent)."""
    multi_agent: bool = False
    """Whether it has several agents (policies by agent, spaces per agent; ``sample()``
    returns a MultiAgentBatch)."""
    spaces: Callable[[Any], tuple[gym.Space, gym.Space]] = own_spaces
    """The observation and action space of one env (one sub-env's for a vector env)."""
    sub_envs: Callable[[Any], Sequence[Any]] = no_sub_envs
    """The envs it holds whose state is saved and restored one by one, after its own."""
    vectorized: bool = False
    """Whether it already steps several envs in one call (a ``VectorSampler`` uses it as
    is; otherwise it stacks ``num_envs_per_evaluator`` copies)."""

    @property
    def sampler_class(self) -> type[FragmentSampler]:
        """The ``FragmentSampler`` subclass of ``sampler``."""
        if isinstance(self.sampler, type):
            return self.sampler
        module, _, name = self.sampler.partition(":")
        return getattr(importlib.import_module(module), name)


ENV_KINDS: list[EnvKind] = [
    EnvKind(
        "MultiAgentEnv",
        MultiAgentEnv,
        "hierl.evaluators.multi_agent_sampler:MultiAgentSampler",
        multi_agent=True,
    ),
    EnvKind(
        "VectorEnv",
        VectorEnv,
        "hierl.evaluators.sampler:VectorSampler",
        spaces=single_spaces,
        sub_envs=vector_sub_envs,
        vectorized=True,
    ),
    EnvKind(
        "gymnasium.Env", gym.Env, "hierl.evaluators.sampler:VectorSampler", plays_episodes=True
    ),
]
"""Every kind of env, matched in order (the first whose ``env_type`` fits wins)."""


def register_env_kind(kind: EnvKind) -> None:
    """Add ``kind`` to ``ENV_KINDS``, before every kind whose ``env_type`` its own
    ``env_type`` subclasses (so that it wins over them).  Registering an equal kind again
    does nothing.

    Raises:
        ValueError: another kind is registered under ``kind.name`` or for its ``env_type``.
    """
    for known in ENV_KINDS:
        if known == kind:
            return
        if known.name == kind.name or known.env_type is kind.env_type:
            raise ValueError(
                f"env kind {kind.name!r} ({kind.env_type.__name__}) clashes with the "
                f"registered kind {known.name!r} ({known.env_type.__name__}); registered: "
                f"{', '.join(k.name for k in ENV_KINDS)}"
            )
    at = next(
        (i for i, k in enumerate(ENV_KINDS) if issubclass(kind.env_type, k.env_type)),
        len(ENV_KINDS),
    )
    ENV_KINDS.insert(at, kind)


def env_types() -> tuple[type, ...]:
    """The ``env_type`` of every registered kind (what counts as an env)."""
    return tuple(k.env_type for k in ENV_KINDS)


class EnvKindError(TypeError):
    """An env creator returned an env of no kind, or of a kind that cannot be used here.

    Attributes:
        kind: the env's kind (None: none of ``ENV_KINDS``).
    """

    def __init__(self, message: str, kind: EnvKind | None = None):
        super().__init__(message)
        self.kind = kind


def env_kind(env: Any) -> EnvKind:
    """The ``EnvKind`` of ``env`` (what an env creator returned).

    Raises:
        EnvKindError: ``env`` is of no kind in ``ENV_KINDS``.
    """
    for kind in ENV_KINDS:
        if isinstance(env, kind.env_type):
            return kind
    raise EnvKindError(
        f"env creator returned {type(env).__name__}, expected one of "
        f"{', '.join(k.name for k in ENV_KINDS)}"
    )
