"""Typed configuration base: dataclasses built from plain dicts, strict about keys and types.

Every algorithm config is a dataclass whose fields carry their documentation as an
attribute docstring (the string literal right after the field).  ``from_dict`` rejects
unknown keys with a "did you mean" suggestion, coerces JSON-ish values (lists → tuples,
ints → floats) and rejects values of the wrong type, naming the field and what is valid.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import logging
import math
import textwrap
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

C = TypeVar("C", bound="Config")

log = logging.getLogger(__name__)

RLLIB_KEYS: dict[str, str] = {
    # evaluators (RLlib: rollout workers, later env runners)
    "num_workers": "num_evaluators",
    "num_rollout_workers": "num_evaluators",
    "num_env_runners": "num_evaluators",
    "num_envs_per_worker": "num_envs_per_evaluator",
    "num_envs_per_env_runner": "num_envs_per_evaluator",
    "num_cpus_per_worker": "num_cpus_per_evaluator",
    "num_cpus_per_env_runner": "num_cpus_per_evaluator",
    "num_gpus_per_worker": "num_gpus_per_evaluator",
    "num_gpus_per_env_runner": "num_gpus_per_evaluator",
    "recreate_failed_workers": "recreate_failed_evaluators",
    "recreate_failed_env_runners": "recreate_failed_evaluators",
    "max_num_worker_restarts": "max_evaluator_restarts",
    "max_num_env_runner_restarts": "max_evaluator_restarts",
    "evaluation_num_workers": "evaluation_num_evaluators",
    "evaluation_num_env_runners": "evaluation_num_evaluators",
    "evaluation_duration": "evaluation_num_episodes",
    # training
    "lambda": "lambda_",
    "num_epochs": "num_sgd_iter",
    "minibatch_size": "sgd_minibatch_size",
    "train_batch_size_per_learner": "train_batch_size",
    "num_steps_sampled_before_learning_starts": "learning_starts",
    "min_sample_timesteps_per_iteration": "timesteps_per_iteration",
    "replay_buffer_capacity": "buffer_size",
    # model
    "fcnet_hiddens": "hiddens",
    "fcnet_activation": "activation",
}
"""Keys users bring from RLlib (old and new API stacks), by the hierl key of the same
meaning.  A config that has the hierl key reads the RLlib one as it, with a one-line
notice; one that lacks it names the key in the unknown-key error."""

NOT_SETTINGS: dict[str, str] = {
    "framework": "hierl runs PyTorch only; drop 'framework'",
    "custom_model": "set it inside 'model': model.custom_model (and model.custom_model_config)",
    "exploration_config": "exploration is set by each algorithm's own keys (DQN: "
    "initial_epsilon, final_epsilon, epsilon_timesteps; DDPG/TD3: exploration_noise; "
    "'hierl config ALGO' lists them)",
    "replay_buffer_config": "replay is set by the optimizer's keys (buffer_size, "
    "prioritized_replay, prioritized_replay_alpha, ...; 'hierl config ALGO' lists them)",
    "evaluation_config": "evaluation is set by evaluation_interval, evaluation_num_episodes, "
    "evaluation_explore and evaluation_num_evaluators",
    "env_runners": "hierl's samplers are evaluators: num_evaluators, num_envs_per_evaluator",
}
"""RLlib keys with no single hierl equivalent, and what to use instead."""


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it and what is valid."""


def suggest(name: str, valid: list[str] | tuple[str, ...]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest valid name, or an empty string."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def suggest_key(key: str, valid: list[str] | tuple[str, ...] | set[str]) -> str:
    """Like ``suggest`` for a config key, but by meaning first: an RLlib key names its
    hierl counterpart (or what to use instead), whether or not this config has it."""
    if key in RLLIB_KEYS:
        target = RLLIB_KEYS[key]
        where = "" if target in valid else ", which this config does not have"
        return f" ('{key}' is RLlib's name for '{target}'{where})"
    if key in NOT_SETTINGS:
        return f" ({NOT_SETTINGS[key]})"
    return suggest(key, sorted(valid))


def translate_rllib_keys(
    data: Mapping[str, Any], valid: set[str] | frozenset[str], prefix: str = ""
) -> dict[str, Any]:
    """``data`` with each RLlib key (``RLLIB_KEYS``) whose hierl key is in ``valid``
    renamed to it, with a one-line notice; giving both is a ConfigError."""
    out = dict(data)
    for key in list(out):
        target = RLLIB_KEYS.get(key) if isinstance(key, str) else None
        if target is None or key in valid or target not in valid:
            continue
        if target in out:
            raise ConfigError(
                f"config keys '{prefix}{key}' and '{prefix}{target}' are both given, but "
                f"'{key}' is RLlib's name for '{target}': give it once, as '{target}'"
            )
        out[target] = out.pop(key)
        log.warning("hierl: config key '%s%s' read as '%s%s'", prefix, key, prefix, target)
    return out


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(field: str, tp: Any, value: Any) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` or raise ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(field, arg, value)
            except ConfigError:
                pass
        raise ConfigError(
            f"config field '{field}' = {value!r} has the wrong type; "
            f"expected {' | '.join(_type_name(a) for a in args)}"
        )
    if origin is typing.Literal:
        if value in args:
            return value
        raise ConfigError(
            f"config field '{field}' = {value!r} is not valid; valid values: "
            + ", ".join(repr(a) for a in args)
        )
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config field '{field}' = {value!r} must be a list/tuple")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(field, args[0], v) for v in value)
        if args and len(args) != len(value):
            raise ConfigError(f"config field '{field}' = {value!r} must have {len(args)} items")
        return (
            tuple(_coerce(field, a, v) for a, v in zip(args, value, strict=False))
            if args
            else tuple(value)
        )
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config field '{field}' = {value!r} must be a dict")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config field '{field}' = {value!r} must be true or false")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"config field '{field}' = {value!r} must be an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config field '{field}' = {value!r} must be a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config field '{field}' = {value!r} must be a string")
        return value
    if inspect.isclass(tp) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            return from_dict(tp, value, prefix=f"{field}.")
        raise ConfigError(f"config field '{field}' = {value!r} must be a dict")
    if callable(tp) and not inspect.isclass(tp):
        return value
    if inspect.isclass(tp) and not isinstance(value, tp):
        raise ConfigError(f"config field '{field}' = {value!r} must be a {_type_name(tp)}")
    return value


def _over_default(field: dataclasses.Field, tp: Any, value: Any, prefix: str) -> Any:
    """A dict given for a config-typed field whose default comes from a factory updates
    that default instead of replacing it: ``{"model": {"hiddens": [400, 300]}}`` keeps the
    algorithm's other model defaults (SAC's and TD3's ReLU), as RLlib merges its model
    dicts over ``MODEL_DEFAULTS``."""
    factory = field.default_factory
    if not (
        isinstance(value, Mapping)
        and inspect.isclass(tp)
        and dataclasses.is_dataclass(tp)
        and factory is not dataclasses.MISSING
    ):
        return value
    return updated_fields(factory(), value, prefix)


def updated_fields(base: Any, value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The init fields of dataclass instance ``base`` updated key by key with ``value``
    (RLlib key names in it translated): what a partial dict for a nested config means."""
    names = {f.name for f in dataclasses.fields(base) if f.init}
    return {
        **{name: getattr(base, name) for name in names},
        **translate_rllib_keys(value, names, prefix),
    }


def from_dict(cls: type[C], data: Mapping[str, Any], prefix: str = "") -> C:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config must be a dict, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in translate_rllib_keys(data, set(fields), prefix).items():
        if key not in fields:
            raise ConfigError(
                f"unknown config key '{prefix}{key}' for {cls.__name__}"
                f"{suggest_key(str(key), set(fields))}; valid keys: {', '.join(sorted(fields))}"
            )
        value = _over_default(fields[key], hints[key], value, f"{prefix}{key}.")
        kwargs[key] = _coerce(prefix + key, hints[key], value)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from e


def attribute_docs(klass: type) -> dict[str, str]:
    """The attribute docstrings written in class ``klass`` itself (not its bases): each
    annotated class attribute followed by a string, as config fields are documented."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Return the attribute docstrings of a dataclass (including its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(attribute_docs(klass))
    return docs


@dataclasses.dataclass
class Config:
    """Base class of typed configs: ``from_dict``, ``to_dict``, ``replace`` and checks."""

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any] | None = None) -> C:
        """Build the config from a dict; unknown keys raise a "did you mean" ConfigError."""
        return from_dict(cls, data or {})

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict of the fields (nested dataclasses become dicts)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value = dataclasses.asdict(value)
            out[f.name] = value
        return out

    def replace(self: C, **changes: Any) -> C:
        """Return a copy with ``changes`` applied (validated like ``from_dict``)."""
        data = self.to_dict()
        data.update(changes)
        return type(self).from_dict(data)

    def check(self, name: str, ok: bool, valid: str) -> None:
        """Raise ConfigError for field ``name`` unless ``ok``; ``valid`` says what is allowed."""
        if not ok:
            raise ConfigError(
                f"config field '{name}' = {getattr(self, name)!r} is invalid: {valid}"
            )

    def check_schedule(self, name: str, x: str, y: str) -> None:
        """Check a piecewise-linear ``[[x, y], ...]`` field (or None): at least one point,
        every ``x >= 0`` and ``y >= 0`` (a rate may anneal to 0), all finite."""
        points = getattr(self, name)
        self.check(
            name,
            points is None
            or (
                len(points) >= 1
                and all(
                    len(p) == 2 and 0 <= p[0] < math.inf and 0 <= p[1] < math.inf for p in points
                )
            ),
            f"None or [[{x} >= 0, {y} >= 0], ...] with finite numbers",
        )
