"""Environment creation: Gymnasium ids, user creators, and vectorisation.

An *env creator* is a callable ``creator(env_config) -> gymnasium.Env | VectorEnv``.
``env_config`` is an :class:`EnvContext`: the user's dict plus ``worker_index`` and
``vector_index`` so that each copy can be told apart.  A creator that returns a
``gymnasium.vector.VectorEnv`` is used as is (stepped in one call: no per-sub-env
Python loop); plain envs are wrapped into a ``SyncVectorEnv``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from hierl.config import ConfigError

EnvCreator = Callable[[Mapping[str, Any]], "gym.Env | VectorEnv"]

_REGISTRY: dict[str, EnvCreator] = {}


class EnvContext(dict):
    """The user's ``env_config`` dict, plus which evaluator and which vector slot it is for."""

    def __init__(self, env_config: Mapping[str, Any], worker_index: int = 0, vector_index: int = 0):
        super().__init__(env_config)
        self.worker_index = worker_index
        self.vector_index = vector_index


def register_env(name: str, creator: EnvCreator) -> None:
    """Register ``creator`` under ``name`` so configs can refer to it by string."""
    _REGISTRY[name] = creator


def resolve_env_creator(env: str | EnvCreator) -> EnvCreator:
    """Turn a registered name, a Gymnasium id or a callable into an env creator."""
    if callable(env):
        return env
    if not isinstance(env, str):
        raise ValueError(
            f"env must be a Gymnasium id, a registered name or a callable, got {env!r}"
        )
    if env in _REGISTRY:
        return _REGISTRY[env]
    if env not in gym.registry:
        close = [k for k in gym.registry if k.lower().startswith(env.lower().split("-")[0])][:5]
        hint = f"; similar ids: {', '.join(close)}" if close else ""
        raise ValueError(
            f"unknown env '{env}': not a registered hierl env nor a Gymnasium id{hint}"
        )

    def make(env_config: Mapping[str, Any]) -> gym.Env:
        try:
            return gym.make(env, **dict(env_config))
        except TypeError as e:
            raise ConfigError(f"env_config {dict(env_config)} is invalid for '{env}': {e}") from e

    return make


def make_vector_env(
    creator: EnvCreator, env_config: Mapping[str, Any], num_envs: int, worker_index: int
) -> VectorEnv:
    """Create ``num_envs`` copies (or the creator's own VectorEnv) for one evaluator."""
    first = creator(EnvContext(env_config, worker_index, 0))
    if isinstance(first, VectorEnv):
        return first
    if not isinstance(first, gym.Env):
        raise TypeError(f"env creator returned {type(first).__name__}, expected a gymnasium Env")
    envs = [first]

    def factory(i: int) -> Callable[[], gym.Env]:
        return lambda: envs[i] if i == 0 else creator(EnvContext(env_config, worker_index, i))

    return SyncVectorEnv(
        [factory(i) for i in range(num_envs)], copy=False, autoreset_mode=AutoresetMode.SAME_STEP
    )


def env_spaces(creator: EnvCreator, env_config: Mapping[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The single-env observation and action spaces of the env a creator makes."""
    env = creator(EnvContext(env_config, 0, 0))
    try:
        if isinstance(env, VectorEnv):
            return env.single_observation_space, env.single_action_space
        return env.observation_space, env.action_space
    finally:
        env.close()
