"""Any registered Trainer as a Ray Tune Trainable.

Tune drives a trial through ``setup(config) → step() ... → save/load_checkpoint →
cleanup()``; a hierl Trainer already is ``Trainer(config) → train() ... → save/restore →
stop()``, so the adapter only maps one onto the other:

    tuner = tune.Tuner(
        "hierl/PPO",  # or trainable("PPO"), or trainable(MyTrainer)
        param_space={"env": "CartPole-v1", "lr": tune.loguniform(1e-4, 1e-2)},
        tune_config=tune.TuneConfig(metric=DEFAULT_METRIC, mode=DEFAULT_MODE),
    )

* The sampled config is validated through the algorithm's typed config
  (``validate_param_space`` checks a whole search space's keys before any trial runs).
* The trial's resource request is ``hierl.algorithms.resources.trainer_bundles`` as a
  placement group; Tune starts the trainable in its first bundle and captures child
  tasks, so the remote evaluators (and replay shards) land in the other bundles.
* Checkpoints are the Trainer's own safe format (``Trainer.save``: JSON + npz, no
  pickle), written into the directory Tune gives.
* ``reset_config`` (PBT exploits, ``reuse_actors``) changes the learning rate in place
  and rebuilds the trainer for any other change that needs no other resources.
* Seeds: a trial whose config sets ``seed`` (fixed or searched) uses it as is; any other
  trial gets ``base_seed + i``, where ``i`` is its index in the experiment (the counter
  Tune's default variant generator ends trial ids with: ``..._00002`` → 2) and
  ``base_seed`` is 0 (``trainable(algo, base_seed=...)``; ``hierl tune``: the
  experiment's ``seed``), so the ``num_samples`` repeats of one grid point differ.  The
  seed is written into the trial's config (``result["config"]["seed"]``).  Trial ids
  without a counter (search algorithms such as Optuna) give ``base_seed`` plus the
  CRC-32 of the id modulo ``10**6``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import zlib
from collections.abc import Mapping
from typing import Any

from ray import tune

from hierl.algorithms.registry import get_trainer_class, trainer_names
from hierl.algorithms.resources import check_cluster_fits, trainer_bundles
from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.config import ConfigError, suggest
from hierl.evaluators.ray_runtime import exit_at_sigterm
from hierl.optimizers import get_optimizer_class

DEFAULT_METRIC = "episode_reward_mean"
"""The result key RL searches optimise by default (the mean return, smoothed)."""
DEFAULT_MODE = "max"
"""Returns are maximised."""
NAME_PREFIX = "hierl/"
"""Trainables are registered with Tune as ``hierl/<ALGORITHM>``."""

TRIAL_INDEX = re.compile(r"_(\d{5,})$")
"""The experiment-wide trial counter at the end of a Tune trial id (``a1b2c_00002``)."""

HOT_FIELDS = frozenset({"lr"})
"""Fields ``reset_config`` applies to a running trainer (all its evaluators' torch
optimizers); a change of any other field rebuilds the trainer."""


def _trainer_class(algo: str | type[Trainer]) -> type[Trainer]:
    if isinstance(algo, str):
        name = algo.removeprefix(NAME_PREFIX)
        return get_trainer_class(name)
    if isinstance(algo, type) and issubclass(algo, BaseTrainer):
        return algo
    raise ConfigError(f"expected an algorithm name or a Trainer subclass, got {algo!r}")


def _set_lr(evaluator: Any, lr: float) -> None:
    """Set every policy's learning rate (config and torch optimizer) on one evaluator."""
    for policy in evaluator.policy_map.values():
        if dataclasses.is_dataclass(policy.config) and hasattr(policy.config, "lr"):
            policy.config = dataclasses.replace(policy.config, lr=lr)
        for group in policy.optimizer.param_groups:
            group["lr"] = lr


def trial_seed(base_seed: int, trial_id: str | None) -> int:
    """The seed of trial ``trial_id`` of an experiment with ``base_seed``: ``base_seed``
    plus the trial's index (the 5-digit counter ending Tune's trial ids), or plus the
    CRC-32 of an id without one modulo ``10**6``; ``base_seed`` outside Tune (no id)."""
    if not trial_id or trial_id == "default":  # Trainable() built outside a Tune trial
        return base_seed
    match = TRIAL_INDEX.search(trial_id)
    if match:
        return base_seed + int(match.group(1))
    return base_seed + zlib.crc32(trial_id.encode()) % 10**6


class TrainerTrainable(tune.Trainable):
    """Tune Trainable running one ``trainer_class`` trainer; see ``trainable``."""

    trainer_class: type[Trainer] = Trainer
    base_seed: int = 0
    """Trials whose config has no ``seed`` get ``trial_seed(base_seed, trial_id)``."""

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> tune.PlacementGroupFactory:
        """One bundle for the driver, one per remote evaluator (and replay shard).

        Raises:
            ConfigError: the Ray cluster can never hold these bundles (see
                ``check_cluster_fits``).  Tune asks while it creates the trial, so
                ``Tuner.fit()`` raises it at once instead of leaving the trial PENDING.
        """
        import ray

        trainer_cls = cls.trainer_class
        trainer_config = _trainer_config(trainer_cls, config)
        if ray.is_initialized():  # Tune's driver: it is, once fit() creates trials
            context = "a Ray Tune trial of "
            check_cluster_fits(trainer_cls, trainer_config, as_actor=True, context=context)
        bundles = trainer_bundles(trainer_cls, trainer_config)
        return tune.PlacementGroupFactory(bundles, strategy="PACK")

    def setup(self, config: dict[str, Any]) -> None:
        self._seed_config(config)
        self.trainer = self.trainer_class(_trainer_config(self.trainer_class, config))
        # What a reused actor starts the next trial from (PBT restores a checkpoint on top).
        self._initial_state = self.trainer.get_state()

    def step(self) -> dict[str, Any]:
        return self.trainer.train()

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.trainer.save(checkpoint_dir)

    def load_checkpoint(self, checkpoint: str | dict | None) -> None:
        if not isinstance(checkpoint, str):
            raise ConfigError(f"expected a hierl checkpoint directory, got {checkpoint!r}")
        self.trainer.restore(checkpoint)
        # CRUCIAL: the checkpoint holds the torch optimizers' param groups, i.e. the
        # donor's learning rate; a PBT exploit must continue with this trial's own.
        self._apply_lr()

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Take ``new_config`` without restarting the actor; False if it needs other
        resources (then Tune starts a new actor)."""
        cls = self.trainer_class
        self._seed_config(new_config)  # this trial's seed: the same as before for PBT
        new = _trainer_config(cls, new_config)
        old = self.trainer.config
        if trainer_bundles(cls, new) != trainer_bundles(cls, old):
            return False
        if not issubclass(cls, Trainer):  # nested algorithms: always rebuilt
            return self._rebuild(new)
        # as JSON: env creators and callbacks arrive as fresh copies, equal by name
        new_dict, old_dict = new.to_dict(), old.to_dict()
        changed = {k for k, v in new_dict.items() if v != old_dict.get(k)}
        if changed <= HOT_FIELDS and self._can_set_lr(new):
            self.trainer.set_state(self._initial_state)
            self.trainer.config = dataclasses.replace(old, lr=new.lr)
            self._apply_lr()
            return True
        return self._rebuild(new)

    def _seed_config(self, config: dict[str, Any]) -> None:
        """Give ``config`` this trial's seed unless it sets ``seed`` itself; record it in
        ``self.config`` too (Tune reports that one as ``result["config"]``; ``setup`` gets
        a copy)."""
        if "seed" not in config:
            config["seed"] = trial_seed(self.base_seed, self.trial_id)
            if isinstance(self.config, dict):
                self.config.setdefault("seed", config["seed"])

    def _rebuild(self, config: Any) -> bool:
        self.trainer.stop()
        self.trainer = self.trainer_class(config)
        self._initial_state = self.trainer.get_state()
        return True

    def cleanup(self) -> None:
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            trainer.stop()
        exit_at_sigterm()  # Tune ray.kills the stopped actor; see the function

    def _can_set_lr(self, config: TrainerConfig) -> bool:
        """Whether ``lr`` is one Adam learning rate per policy, set from the config."""
        learns_on = get_optimizer_class(config.optimizer).learns_on
        return (
            not config.policies
            and not config.lr_schedule
            and learns_on in ("driver", "evaluators")  # not sharded_ps's servers, nor auto
            and all(
                hasattr(getattr(p, "optimizer", None), "param_groups")
                for p in self.trainer.local_evaluator.policy_map.values()
            )
        )

    def _apply_lr(self) -> None:
        config = self.trainer.config
        if isinstance(self.trainer, Trainer) and self._can_set_lr(config):
            lr = config.lr
            self.trainer.evaluators.foreach_evaluator(lambda e: _set_lr(e, lr))


def _trainer_config(trainer_cls: type[Trainer], config: Mapping[str, Any]) -> TrainerConfig:
    """The trial's config as the algorithm's typed config (errors name the algorithm)."""
    try:
        return trainer_cls.config_class.from_dict(config)
    except ConfigError as e:
        raise ConfigError(f"{trainer_cls.name or trainer_cls.__name__}: {e}") from e


@functools.cache
def _trainable_for(trainer_cls: type[Trainer], base_seed: int = 0) -> type[TrainerTrainable]:
    name = f"{trainer_cls.name or trainer_cls.__name__}Trainable"
    doc = f"Ray Tune Trainable of {trainer_cls.__qualname__}."
    attrs = {"trainer_class": trainer_cls, "base_seed": base_seed, "__doc__": doc}
    return type(name, (TrainerTrainable,), attrs)


def trainable(algo: str | type[Trainer], base_seed: int = 0) -> type[tune.Trainable]:
    """The Tune Trainable of an algorithm (name, ``hierl/NAME`` or Trainer class); one
    class per trainer class and ``base_seed`` (trial ``i`` without a ``seed`` in its
    config gets seed ``base_seed + i``)."""
    if isinstance(base_seed, bool) or not isinstance(base_seed, int):
        raise ConfigError(f"base_seed must be an integer, got {base_seed!r}")
    return _trainable_for(_trainer_class(algo), base_seed)


def register_trainables() -> list[str]:
    """Register ``hierl/<NAME>`` with Tune for every registered algorithm; return them."""
    names = []
    for algo in trainer_names():
        name = NAME_PREFIX + algo
        tune.register_trainable(name, trainable(algo))
        names.append(name)
    return names


def _is_search_space(value: Any) -> bool:
    from ray.tune.search.sample import Domain

    return isinstance(value, Domain)


def _grid(value: Any) -> list | None:
    """The candidates of ``tune.grid_search([...])``, else None."""
    if isinstance(value, Mapping) and set(value) == {"grid_search"}:
        return list(value["grid_search"])
    return None


def _check_keys(cls: type, space: Mapping[str, Any], prefix: str) -> None:
    """Unknown keys of dataclass ``cls`` in ``space`` (and its nested dataclass dicts)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key, value in space.items():
        if key not in fields:
            raise ConfigError(
                f"unknown config key '{prefix}{key}' for {cls.__name__}"
                f"{suggest(str(key), list(fields))}; valid keys: {', '.join(sorted(fields))}"
            )
        default = fields[key].default_factory  # nested configs (model) have factories
        nested = default() if callable(default) else None
        if not dataclasses.is_dataclass(nested):
            continue
        for candidate in _grid(value) or [value]:
            if isinstance(candidate, Mapping):
                _check_keys(type(nested), candidate, f"{prefix}{key}.")


def validate_param_space(algo: str | type[Trainer], param_space: Mapping[str, Any]) -> None:
    """Fail before any trial runs if ``param_space`` cannot configure ``algo``.

    Keys are checked everywhere (top level, ``model``, a fixed optimizer's
    ``optimizer_config``, every ``grid_search`` candidate dict); values only where the
    space has no search-space objects at all (then it is the trial's config itself).

    Raises:
        ConfigError: with the "did you mean" message of an unknown key, or the
            algorithm's own error for a fully fixed config.
    """
    cls = _trainer_class(algo)
    label = cls.name or cls.__name__
    if not isinstance(param_space, Mapping):
        raise ConfigError(f"param_space must be a dict, got {type(param_space).__name__}")
    try:
        space: Mapping[str, Any] = param_space
        if issubclass(cls.config_class, TrainerConfig):  # flat optimizer keys: aliases
            space = cls.config_class.resolve_aliases(param_space)
        _check_keys(cls.config_class, space, "")
        optimizer = space.get("optimizer") or getattr(cls.config_class, "default_optimizer", None)
        opt_space = space.get("optimizer_config", {})
        if isinstance(optimizer, str) and isinstance(opt_space, Mapping):
            opt_class = get_optimizer_class(optimizer)
            try:
                _check_keys(opt_class.config_class, opt_space, "")
            except ConfigError as e:
                raise ConfigError(f"optimizer_config of '{optimizer}': {e}") from e
    except ConfigError as e:
        raise ConfigError(f"{label}: {e}") from e
    if not _has_search_space(param_space):
        _trainer_config(cls, param_space)


def _has_search_space(value: Any) -> bool:
    if _is_search_space(value) or _grid(value) is not None:
        return True
    if isinstance(value, Mapping):
        return any(_has_search_space(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_search_space(v) for v in value)
    return False
