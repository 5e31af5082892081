"""Policy optimizers by name."""

from __future__ import annotations

import dataclasses

from hierl.config import ConfigError, suggest
from hierl.optimizers.base import PolicyOptimizer

_OPTIMIZERS: dict[str, type[PolicyOptimizer]] = {}


def register_optimizer(cls: type[PolicyOptimizer]) -> type[PolicyOptimizer]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    _OPTIMIZERS[cls.name] = cls
    return cls


def get_optimizer_class(name: str) -> type[PolicyOptimizer]:
    """The optimizer class registered as ``name``; unknown names list the valid ones."""
    if name not in _OPTIMIZERS:
        raise ConfigError(
            f"unknown optimizer '{name}'{suggest(name, sorted(_OPTIMIZERS))}; "
            f"valid: {', '.join(sorted(_OPTIMIZERS))}"
        )
    return _OPTIMIZERS[name]


def optimizer_settings(name: str) -> frozenset[str]:
    """The setting names of optimizer ``name`` (the fields of its config class)."""
    return frozenset(f.name for f in dataclasses.fields(get_optimizer_class(name).config_class))


def optimizer_names() -> list[str]:
    """All registered optimizer names."""
    return sorted(_OPTIMIZERS)
