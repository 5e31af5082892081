"""Custom models by name: ``register_model(name, factory)`` and ``model.custom_model: name``.

A config (YAML, JSON, a checkpoint) names a model; it never holds code.  The factory is
registered in the driver's process:

    def make_my_model(obs_space, action_space, num_outputs, model_config):
        return MyModule(obs_space, num_outputs, **model_config.custom_model_config)

    hierl.register_model("my_model", make_my_model)
    PPOTrainer({"env": "CartPole-v1", "model": {"custom_model": "my_model"}})

What the factory returns is described in ``hierl.models.networks.make_custom_model``.
A name that is not registered may also be the factory's own ``"module:function"`` name,
which every process imports (as ``callbacks`` are named): what ``hierl train --config
cfg.yaml`` uses, since no code of the user's runs in that process before the config is
read.

Ray workers (remote evaluators, Tune trials, a population's member trainers) find the
factories registered in the driver through ``hierl.shared_registry.SharedRegistry``.
This module imports neither torch nor Ray until it needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from hierl.config import ConfigError
from hierl.shared_registry import SharedRegistry

if TYPE_CHECKING:
    import gymnasium as gym
    from torch import nn

    from hierl.models.networks import ModelConfig

ModelFactory = Callable[["gym.Space", "gym.Space", int, "ModelConfig"], "nn.Module"]
"""``factory(observation_space, action_space, num_outputs, model_config) -> nn.Module``."""

_FACTORIES: SharedRegistry[ModelFactory] = SharedRegistry("models")


def register_model(name: str, factory: ModelFactory) -> None:
    """Register ``factory`` as custom model ``name`` (config ``model.custom_model``).

    Registering a name again replaces its factory.  See the module docstring for how
    Ray workers find it, and ``hierl.models.networks.make_custom_model`` for what the
    factory is given and must return.

    Raises:
        ValueError: ``name`` is not a non-empty string.
        TypeError: ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"model factory for {name!r} must be callable, got {factory!r}")
    _FACTORIES.register(name, factory)


def registered_models() -> list[str]:
    """The names of the registered models (those of the driver too, in a Ray worker)."""
    return _FACTORIES.names()


def get_model_factory(name: str) -> ModelFactory:
    """The factory registered as ``name``, or named by it as ``"module:function"``.

    Raises:
        ConfigError: no model is registered as ``name`` and it names no importable
            callable; the message lists the registered ones.
    """
    factory = _FACTORIES.get(name)
    why = ""
    if factory is None and ":" in name:
        factory, why = _import_factory(name)
    if factory is None:
        names = registered_models()
        raise ConfigError(
            f"config field 'model.custom_model' = {name!r} is not a registered model{why}; "
            f"registered: {', '.join(names) if names else 'none'} (register one with "
            "hierl.register_model(name, factory) in the process that builds the config, "
            "or name the factory as 'module:function')"
        )
    return factory


def _import_factory(name: str) -> tuple[ModelFactory | None, str]:
    """The callable ``"module:function"`` names, or None and why not."""
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        return None, f" (nor a 'module:function': cannot import '{module_name}': {e})"
    factory = getattr(module, attr, None)
    if not callable(factory):
        return None, f" (nor a 'module:function': '{module_name}' has no function '{attr}')"
    return factory, ""
