"""Multi-agent settings of a trainer: validation, resolution and serialisation.

A ``TrainerConfig``'s ``policies`` (policy id → PolicySpec), ``policy_mapping_fn`` and
``policies_to_train`` are checked here when the config is built, resolved here into the
specs an evaluator builds its policy map from (``hierl.evaluators.policy_map``), and
recorded here in checkpoints (classes and functions by name only: code is passed again).
The per-policy episode returns a trainer reports are kept by ``PolicyRewards``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hierl.checkpoint import CheckpointError
from hierl.config import Config, ConfigError
from hierl.evaluators.policy_map import MULTI_AGENT_FIELDS, PolicySpec, apply_overrides
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import DEFAULT_POLICY_ID

if TYPE_CHECKING:
    from hierl.algorithms.trainer_config import TrainerConfig


def validate(config: TrainerConfig) -> None:
    """Validate the multi-agent fields of ``config`` (its ``policies`` already coerced to
    PolicySpecs), including every policy's config overrides: errors surface when the
    config is built, not in an evaluator."""
    config.check(
        "policy_mapping_fn",
        config.policy_mapping_fn is None or callable(config.policy_mapping_fn),
        "a function agent_id -> policy_id",
    )
    if len(config.policies) > 1 and config.policy_mapping_fn is None:
        raise ConfigError(
            f"config field 'policy_mapping_fn' is required with more than one policy "
            f"(policies: {sorted(config.policies)})"
        )
    if config.policies_to_train is not None:
        valid = sorted(config.policies) or [DEFAULT_POLICY_ID]
        unknown = [p for p in config.policies_to_train if p not in valid]
        if unknown:
            raise ConfigError(
                f"config field 'policies_to_train' names unknown policies {unknown}; "
                f"valid policy ids: {valid}"
            )
    for pid in config.policies:
        policy_config(config, pid)


def policy_classes(config: TrainerConfig, policy_id: str) -> tuple[Any, type[Config]]:
    """``(policy_class or None, config class)`` of a policy; algorithm names are resolved."""
    spec = config.policies[policy_id]
    cls, config_class = spec.policy_class, spec.config_class
    if isinstance(cls, str):
        from hierl.algorithms.registry import get_trainer_class

        try:
            trainer_cls = get_trainer_class(cls)
        except ConfigError as e:
            raise ConfigError(f"policies['{policy_id}'].policy_class: {e}") from e
        cls = trainer_cls.policy_class
        config_class = config_class or trainer_cls.config_class
    return cls, config_class or type(config)


def policy_config(config: TrainerConfig, policy_id: str) -> Config:
    """The config policy ``policy_id`` is built with: ``config``, its config class, its
    overrides (validated: an unknown key is an error with a "did you mean")."""
    spec = config.policies[policy_id]
    if not isinstance(spec.config, Mapping):
        return spec.config
    _, config_class = policy_classes(config, policy_id)
    bad = sorted(set(spec.config) & set(MULTI_AGENT_FIELDS))
    if bad:
        raise ConfigError(f"policies['{policy_id}'].config cannot set {bad}")
    return apply_overrides(config, spec.config, policy_id, config_class)


def resolve_policy_specs(
    config: TrainerConfig, default_class: type[PolicyGraph]
) -> dict[str, PolicySpec]:
    """``config.policies`` with classes (None: ``default_class``) and configs resolved,
    as the evaluators need them."""
    out = {}
    for pid, spec in config.policies.items():
        cls, _ = policy_classes(config, pid)
        out[pid] = PolicySpec(
            policy_class=cls or default_class,
            observation_space=spec.observation_space,
            action_space=spec.action_space,
            config=policy_config(config, pid),
        )
    return out


def to_json(config: TrainerConfig) -> dict[str, Any]:
    """The multi-agent entries of ``config.to_dict()``: data as JSON; code (classes,
    spaces, functions) as None, described under a ``<field>_callable`` key."""
    out: dict[str, Any] = {}
    if config.policy_mapping_fn is not None:
        out["policy_mapping_fn"] = None
        out["policy_mapping_fn_callable"] = _qualname(config.policy_mapping_fn)
    if config.policies:
        specs = {pid: _spec_json(spec) for pid, spec in config.policies.items()}
        code = {pid: d for pid, d in specs.items() if isinstance(d, str)}
        # Classes and spaces are code, not data: the whole spec must be passed again.
        out["policies"] = None if code else specs
        if code:
            out["policies_callable"] = code
    return out


def pop_code_descriptions(
    saved: dict[str, Any], overrides: Mapping[str, Any], checkpoint_dir: str | Path
) -> None:
    """Remove what ``to_json`` recorded about code from a checkpoint's config
    dict ``saved``; CheckpointError if its policies were code that ``overrides`` (the
    arguments of ``from_checkpoint``) do not pass again."""
    saved.pop("policy_mapping_fn_callable", None)
    code = saved.pop("policies_callable", None)
    if code and overrides.get("policies", saved.get("policies")) is None:
        raise CheckpointError(
            f"checkpoint '{checkpoint_dir}' was made with policies given as code ({code}); "
            "pass policies=... (and policy_mapping_fn=...) to from_checkpoint"
        )


def _spec_json(spec: PolicySpec) -> dict[str, Any] | str:
    """A PolicySpec as JSON, or a description of the code that keeps it from being one."""
    code = [c for c in (spec.policy_class, spec.config_class) if isinstance(c, type)]
    if spec.observation_space is not None or spec.action_space is not None:
        code.append("spaces")
    if not isinstance(spec.config, Mapping):
        code.append(type(spec.config))
    if code:
        return ", ".join(c if isinstance(c, str) else _qualname(c) for c in code)
    return {"policy_class": spec.policy_class, "config": dict(spec.config)}


def _qualname(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or repr(obj)


class PolicyRewards:
    """Smoothing windows of each policy's per-agent episode returns.

    Args:
        maxlen: returns kept per policy (the trainer's ``metrics_smoothing_episodes``).
    """

    def __init__(self, maxlen: int):
        self.maxlen = maxlen
        self.windows: dict[str, collections.deque] = {}

    def add(self, episodes: Iterable[Any]) -> None:
        """Add the ``policy_rewards`` of finished episodes (single-agent ones have none)."""
        for e in episodes:
            for pid, returns in getattr(e, "policy_rewards", {}).items():
                self._window(pid).extend(returns)

    def metrics(self) -> dict[str, float]:
        """``policy_reward_{mean,min,max}/<policy_id>`` over each policy's window."""
        out = {}
        for pid, returns in self.windows.items():
            if returns:
                out[f"policy_reward_mean/{pid}"] = float(np.mean(returns))
                out[f"policy_reward_min/{pid}"] = float(np.min(returns))
                out[f"policy_reward_max/{pid}"] = float(np.max(returns))
        return out

    def get_state(self) -> dict[str, np.ndarray]:
        """The windows as float64 arrays, by policy id (for checkpoints)."""
        return {pid: np.asarray(list(r), dtype=np.float64) for pid, r in self.windows.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        self.windows.clear()
        for pid, returns in state.items():
            self._window(pid).extend(float(r) for r in returns)

    def _window(self, policy_id: str) -> collections.deque:
        if policy_id not in self.windows:
            self.windows[policy_id] = collections.deque(maxlen=self.maxlen)
        return self.windows[policy_id]
