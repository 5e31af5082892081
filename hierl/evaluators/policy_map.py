"""The policy map of an evaluator: policy id → PolicyGraph, built from PolicySpecs.

RLlib (ICML 2018) §3: a multi-agent setup is a dict of policies plus a function mapping
each agent to one of them.  This module turns that description (``policies`` of
PolicySpecs, ``policy_mapping_fn``) and an env's spaces into PolicyGraph instances; a
single-agent env gets one policy, ``DEFAULT_POLICY_ID``.  Resolving algorithm names in a
spec is the trainer's job (``hierl.algorithms.multi_agent``): here a class is needed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from hierl.config import Config, ConfigError, updated_fields
from hierl.evaluators.env_kinds import env_kind
from hierl.evaluators.multi_agent_env import MultiAgentEnv
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import DEFAULT_POLICY_ID


@dataclasses.dataclass
class PolicySpec(Config):
    """One entry of a multi-agent ``policies`` dict (policy id → PolicySpec).

    In a trainer config an entry may also be given as a dict of these fields, a tuple
    ``(policy_class, observation_space, action_space, config)`` (RLlib's form) or None
    (all defaults).
    """

    policy_class: Any = None
    """The PolicyGraph class; None = the trainer's own.  In a trainer config, an
    algorithm name (e.g. ``"PG"``) means that algorithm's policy and config classes."""
    observation_space: Any = None
    """None = the space of the env's agents mapped to this policy (they must agree)."""
    action_space: Any = None
    """None = as for ``observation_space``."""
    config: Any = dataclasses.field(default_factory=dict)
    """Overrides of the trainer's config for this policy (validated: unknown keys are
    errors), or a complete config object."""
    config_class: Any = None
    """The config dataclass ``policy_class`` expects when it is not the trainer's (e.g.
    ``PGConfig`` for a PG policy in a PPO trainer); fields it shares with the trainer's
    config take the trainer's values, then ``config`` applies."""

    def __post_init__(self) -> None:
        cls = self.policy_class
        ok = cls is None or isinstance(cls, str)
        ok = ok or (isinstance(cls, type) and issubclass(cls, PolicyGraph))
        self.check("policy_class", ok, "a PolicyGraph subclass, an algorithm name or None")
        for name in ("observation_space", "action_space"):
            value = getattr(self, name)
            self.check(name, value is None or isinstance(value, gym.Space), "a gymnasium Space")
        config_class = self.config_class
        ok = config_class is None
        ok = ok or (isinstance(config_class, type) and dataclasses.is_dataclass(config_class))
        self.check("config_class", ok, "a config dataclass or None")

    @classmethod
    def coerce(cls, policy_id: str, value: Any) -> PolicySpec:
        """A PolicySpec from any of the accepted forms; errors name the policy id."""
        try:
            if isinstance(value, PolicySpec):
                return value
            if value is None:
                return cls()
            if isinstance(value, Mapping):
                return cls.from_dict(value)
            if isinstance(value, (tuple, list)) and len(value) == 4:
                return cls(*value)
            if isinstance(value, type) and issubclass(value, PolicyGraph):
                return cls(policy_class=value)
        except ConfigError as e:
            raise ConfigError(f"policies['{policy_id}']: {e}") from e
        raise ConfigError(
            f"policies['{policy_id}'] = {value!r} is invalid: give a PolicySpec, a dict of its "
            "fields, a (policy_class, observation_space, action_space, config) tuple or None"
        )


MULTI_AGENT_FIELDS = ("policies", "policy_mapping_fn", "policies_to_train")
"""Trainer config fields that describe the multi-agent setup, not one policy."""
TRAINER_ONLY_FIELDS = ("optimizer", "optimizer_config")
"""Trainer config fields a policy's config does not share: the trainer's optimizer
trains every policy (a policy of another algorithm keeps its class's defaults)."""


def apply_overrides(
    base: Any,
    overrides: Mapping[str, Any],
    policy_id: str,
    config_class: type[Config] | None = None,
) -> Any:
    """``base`` (a policy config) with one policy's config ``overrides``.

    A Config ``base`` gives a ``config_class`` (default: ``base``'s class) built from the
    fields the two share, minus ``MULTI_AGENT_FIELDS`` and ``TRAINER_ONLY_FIELDS``, then
    the overrides (a dict for a nested config, ``model``, updates the shared one key by
    key); an unknown key is a ConfigError naming the policy.  A dict or None ``base``
    gives a merged dict.
    """
    if not overrides and (config_class is None or config_class is type(base)):
        return base
    if config_class is None and isinstance(base, Config):
        config_class = type(base)
    if config_class is not None:
        names = {f.name for f in dataclasses.fields(config_class) if f.init}
        names -= {*MULTI_AGENT_FIELDS, *TRAINER_ONLY_FIELDS}
        shared = {n: getattr(base, n) for n in names if hasattr(base, n)}
        merged = {**shared, **overrides}
        for key, value in overrides.items():  # {"model": {...}} updates the shared model
            if isinstance(value, Mapping) and dataclasses.is_dataclass(shared.get(key)):
                merged[key] = updated_fields(shared[key], value, f"{key}.")
        try:
            return config_class.from_dict(merged)
        except ConfigError as e:
            raise ConfigError(f"config of policy '{policy_id}': {e}") from e
    if base is None or isinstance(base, Mapping):
        return {**(base or {}), **overrides}
    raise ConfigError(
        f"config of policy '{policy_id}': cannot apply overrides to a {type(base).__name__}"
    )


def build_policy_map(
    env: Any,
    policy_class: type[PolicyGraph],
    policy_config: Any = None,
    policies: Mapping[str, Any] | None = None,
    policy_mapping_fn: Callable[[Any], str] | None = None,
    env_name: str = "env",
) -> tuple[dict[str, PolicyGraph], Callable[[Any], str] | None]:
    """The policies to sample ``env`` with, and the agent id → policy id mapping.

    Any env but a MultiAgentEnv gets one ``DEFAULT_POLICY_ID`` policy of ``policy_class``
    and no mapping (``policies`` must then be empty).  A MultiAgentEnv gets a policy per
    entry of ``policies`` (default: one ``DEFAULT_POLICY_ID`` for every agent): a spec's
    None class is ``policy_class``, its None spaces are those of the env's agents mapped
    to it, and its config overrides apply to ``policy_config``.
    """
    kind = env_kind(env)
    if not kind.multi_agent:
        if policies:
            raise ConfigError(
                f"config field 'policies' needs a MultiAgentEnv; env '{env_name}' "
                f"made a {type(env).__name__}"
            )
        obs_space, act_space = kind.spaces(env)
        return {DEFAULT_POLICY_ID: policy_class(obs_space, act_space, policy_config)}, None
    specs = {pid: PolicySpec.coerce(pid, s) for pid, s in (policies or {}).items()}
    if not specs:
        specs = {DEFAULT_POLICY_ID: PolicySpec()}
    if policy_mapping_fn is None:
        if len(specs) > 1:
            raise ConfigError(
                f"policy_mapping_fn is required with more than one policy ({sorted(specs)})"
            )
        policy_mapping_fn = functools.partial(_map_to, next(iter(specs)))
    agents_of: dict[str, list[Any]] = {pid: [] for pid in specs}
    for aid in env.possible_agents:
        pid = policy_mapping_fn(aid)
        if pid not in specs:
            raise ConfigError(
                f"policy_mapping_fn returned {pid!r} for agent {aid!r}; valid policy ids: "
                f"{sorted(specs)}"
            )
        agents_of[pid].append(aid)
    policy_map = {}
    for pid, spec in specs.items():
        obs_space = _infer_space(env, spec, "observation_space", pid, agents_of[pid])
        act_space = _infer_space(env, spec, "action_space", pid, agents_of[pid])
        config = spec.config
        if isinstance(config, Mapping):
            config = apply_overrides(policy_config, config, pid)
        cls = spec.policy_class or policy_class
        if isinstance(cls, str):
            raise ConfigError(
                f"policy '{pid}': policy_class {cls!r} is an algorithm name; the trainer "
                "resolves names, an evaluator needs the class"
            )
        policy = cls(obs_space, act_space, config)
        if policy.get_initial_state():
            raise NotImplementedError(
                f"policy '{pid}' is recurrent; recurrent policies are not supported in "
                "multi-agent envs yet"
            )
        policy_map[pid] = policy
    return policy_map, policy_mapping_fn


def _map_to(policy_id: str, agent_id: Any) -> str:
    """The default policy mapping: every agent to the one policy."""
    return policy_id


def _infer_space(
    env: MultiAgentEnv, spec: PolicySpec, attr: str, policy_id: str, agents: list[Any]
) -> gym.Space:
    """The spec's ``attr`` space, or the one space of the ``agents`` mapped to the policy."""
    space = getattr(spec, attr)
    if space is not None:
        return space
    getter = env.get_observation_space if attr == "observation_space" else env.get_action_space
    found = [getter(aid) for aid in agents]
    if not found:
        raise ConfigError(
            f"policy '{policy_id}': no agent of the env maps to it, so its {attr} "
            "cannot be inferred; give it in its PolicySpec"
        )
    if any(f != found[0] for f in found[1:]):
        raise ConfigError(
            f"policy '{policy_id}': its agents {agents} have different "
            f"{attr}s; give one in its PolicySpec or map them to separate policies"
        )
    return found[0]
