"""Trainers by name (``get_trainer_class("PPO")``)."""

from __future__ import annotations

import importlib

from hierl.config import ConfigError, suggest

# name → "module:Class"; imported lazily so ``hierl --help`` stays fast.
_TRAINERS: dict[str, str] = {
    "A2C": "hierl.algorithms.a2c:A2CTrainer",
    "A3C": "hierl.algorithms.a2c:A3CTrainer",
    "A3C_ES": "hierl.algorithms.population:A3CESTrainer",
    "ALPHAZERO": "hierl.algorithms.alphazero.trainer:AlphaZeroTrainer",
    "APEX": "hierl.algorithms.dqn:ApexTrainer",
    "APEX_DDPG": "hierl.algorithms.ddpg:ApexDDPGTrainer",
    "APPO": "hierl.algorithms.impala:APPOTrainer",
    "BC": "hierl.algorithms.marwil:BCTrainer",
    "DDPG": "hierl.algorithms.ddpg:DDPGTrainer",
    "DQN": "hierl.algorithms.dqn:DQNTrainer",
    "ES": "hierl.algorithms.es:ESTrainer",
    "IMPALA": "hierl.algorithms.impala:IMPALATrainer",
    "MARWIL": "hierl.algorithms.marwil:MARWILTrainer",
    "PG": "hierl.algorithms.pg:PGTrainer",
    "PPO": "hierl.algorithms.ppo:PPOTrainer",
    "PPO_ES": "hierl.algorithms.population:PPOESTrainer",
    "TD3": "hierl.algorithms.ddpg:TD3Trainer",
}
_CUSTOM: dict[str, type] = {}


def register_trainer(name: str, cls: type) -> None:
    """Make a Trainer subclass available by ``name`` (CLI ``--algo``, Tune)."""
    _CUSTOM[name] = cls


def trainer_names() -> list[str]:
    """All registered algorithm names."""
    return sorted({*_TRAINERS, *_CUSTOM})


def get_trainer_class(name: str) -> type:
    """The Trainer class for ``name``; unknown names list the valid ones."""
    if name in _CUSTOM:
        return _CUSTOM[name]
    if name not in _TRAINERS:
        names = trainer_names()
        raise ConfigError(
            f"unknown algorithm '{name}'{suggest(name, names)}; valid: {', '.join(names)}"
        )
    module, cls = _TRAINERS[name].split(":")
    return getattr(importlib.import_module(module), cls)
