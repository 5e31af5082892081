"""Trainers by name (``get_trainer_class("PPO")``)."""

from __future__ import annotations

import importlib

from hierl.config import ConfigError, suggest

# name → ("module:Class", one-line description); imported lazily so ``hierl --help``
# stays fast.
_TRAINERS: dict[str, tuple[str, str]] = {
    "A2C": ("hierl.algorithms.a2c:A2CTrainer", "advantage actor-critic, synchronous updates"),
    "A3C": (
        "hierl.algorithms.a2c:A3CTrainer",
        "asynchronous advantage actor-critic: gradients applied as they arrive",
    ),
    "A3C_ES": (
        "hierl.algorithms.population:A3CESTrainer",
        "a population of A3C trainers under an evolution-strategies loop",
    ),
    "ALPHAZERO": (
        "hierl.algorithms.alphazero.trainer:AlphaZeroTrainer",
        "AlphaZero-style self-play with MCTS for two-player board games",
    ),
    "APEX": (
        "hierl.algorithms.dqn:ApexTrainer",
        "Ape-X DQN: distributed prioritized replay fed by many epsilon-greedy evaluators",
    ),
    "APEX_DDPG": (
        "hierl.algorithms.ddpg:ApexDDPGTrainer",
        "Ape-X DDPG: distributed prioritized replay for continuous actions",
    ),
    "APEX_SAC": (
        "hierl.algorithms.sac:ApexSACTrainer",
        "Ape-X SAC: distributed prioritized replay fed by SAC's own stochastic policy",
    ),
    "APPO": (
        "hierl.algorithms.impala:APPOTrainer",
        "asynchronous PPO: the clipped surrogate on V-trace advantages",
    ),
    "BC": ("hierl.algorithms.marwil:BCTrainer", "behaviour cloning from logged data"),
    "DDPG": (
        "hierl.algorithms.ddpg:DDPGTrainer",
        "deep deterministic policy gradient for continuous actions",
    ),
    "DQN": (
        "hierl.algorithms.dqn:DQNTrainer",
        "deep Q-network: double, dueling, n-step, prioritized replay",
    ),
    "ES": (
        "hierl.algorithms.es:ESTrainer",
        "evolution strategies: antithetic noise from a shared table, ranked returns",
    ),
    "IMPALA": (
        "hierl.algorithms.impala:IMPALATrainer",
        "V-trace actor-critic on a decoupled actor-learner pipeline",
    ),
    "MARWIL": (
        "hierl.algorithms.marwil:MARWILTrainer",
        "advantage-weighted imitation from logged data (beta 0 is BC)",
    ),
    "PG": ("hierl.algorithms.pg:PGTrainer", "vanilla policy gradient"),
    "PPO": (
        "hierl.algorithms.ppo:PPOTrainer",
        "proximal policy optimization: clipped surrogate, GAE, minibatch SGD epochs",
    ),
    "PPO_ES": (
        "hierl.algorithms.population:PPOESTrainer",
        "a population of PPO trainers under an evolution-strategies loop",
    ),
    "SAC": (
        "hierl.algorithms.sac:SACTrainer",
        "soft actor-critic: twin critics, squashed Gaussian or categorical policy, tuned alpha",
    ),
    "TD3": (
        "hierl.algorithms.ddpg:TD3Trainer",
        "twin delayed DDPG: twin critics, target smoothing, delayed policy updates",
    ),
}
_CUSTOM: dict[str, type] = {}


def register_trainer(name: str, cls: type) -> None:
    """Make a Trainer subclass available by ``name`` (CLI ``--algo``, Tune)."""
    _CUSTOM[name] = cls


def trainer_class_exports() -> dict[str, str]:
    """Class name -> defining module of every built-in trainer: the public names
    ``from hierl import PPOTrainer, BCTrainer, ...`` (read by ``hierl/__init__.py``)."""
    return {path.split(":")[1]: path.split(":")[0] for path, _ in _TRAINERS.values()}


def trainer_names() -> list[str]:
    """All registered algorithm names."""
    return sorted({*_TRAINERS, *_CUSTOM})


def canonical_name(name: str) -> str:
    """The registered spelling of algorithm ``name``, matched without regard to case
    (``ppo`` -> ``PPO``); unknown names list the valid ones."""
    if name in _CUSTOM or name in _TRAINERS:
        return name
    names = trainer_names()
    matches = [n for n in names if n.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    raise ConfigError(
        f"unknown algorithm '{name}'{suggest(name.upper(), names)}; valid: {', '.join(names)}"
        + (f" (several differ from it only in case: {', '.join(matches)})" if matches else "")
    )


def get_trainer_class(name: str) -> type:
    """The Trainer class for ``name`` (any case); unknown names list the valid ones."""
    name = canonical_name(name)
    if name in _CUSTOM:
        return _CUSTOM[name]
    module, cls = _TRAINERS[name][0].split(":")
    return getattr(importlib.import_module(module), cls)


def describe(name: str) -> str:
    """A one-line description of algorithm ``name`` (a registered class: its docstring's
    first line)."""
    name = canonical_name(name)
    if name in _TRAINERS and name not in _CUSTOM:
        return _TRAINERS[name][1]
    doc = (_CUSTOM[name].__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""
