"""What every trainer is, whatever it nests: a typed config, ``train()``, checkpoints.

``Trainer`` (``hierl.algorithms.trainer``) adds evaluators and a named optimizer.  A
*nested* algorithm that composes other components instead (PPO-ES: a population of
trainer actors; AlphaZero: self-play, replay and optimizer actors) subclasses
``BaseTrainer`` directly and implements ``train``, ``get_state`` and ``set_state``; the
CLI, Ray Tune and checkpoints then treat it like any other algorithm:

    class MyLoop(BaseTrainer):
        name = "MY_LOOP"
        config_class = MyLoopConfig  # a BaseConfig subclass

        def train(self):
            ...  # one short iteration under central control
            return self.finish_iteration(result, start)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar

from hierl.algorithms import metrics
from hierl.algorithms.resources import check_cluster_fits, driver_group
from hierl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from hierl.config import Config, ConfigError
from hierl.evaluators.ray_runtime import DEFAULT_GET_TIMEOUT_S, ActorGroup
from hierl.loggers import ResultLogger

CHECKPOINT_KIND = "hierl-trainer"


@dataclasses.dataclass
class BaseConfig(Config):
    """Settings of every algorithm, nested or not."""

    env: Any = None
    """Gymnasium id, a name given to ``hierl.register_env``, or an env creator callable."""
    env_config: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments for the env creator (``gym.make`` kwargs for Gymnasium ids)."""
    seed: int | None = 0
    """Seed for weights, envs, action sampling and minibatch order (None: random)."""
    num_cpus_for_driver: float = 1.0
    """CPUs the trainer's own process uses (for resource requests, e.g. Tune)."""
    num_gpus: float = 0.0
    """GPUs for the learner on the driver (CUDA is used when > 0 and available)."""
    sample_timeout_s: float = DEFAULT_GET_TIMEOUT_S
    """Upper bound on waiting for any remote call."""
    ray_address: str | None = None
    """Join this Ray cluster instead of starting a local instance."""
    logdir: str | None = None
    """Write every ``train()`` result to this directory as ``result.jsonl``,
    ``progress.csv`` and TensorBoard events (Ray Tune's names: ``tensorboard --logdir``
    reads it; see ``hierl.loggers``), appending to what is there; None: no logs."""

    def __post_init__(self) -> None:
        self.check("num_cpus_for_driver", self.num_cpus_for_driver >= 0, "must be >= 0")
        self.check("num_gpus", self.num_gpus >= 0, "must be >= 0")
        self.check("sample_timeout_s", self.sample_timeout_s > 0, "must be > 0")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict; a callable env is recorded by name only."""
        out = super().to_dict()
        if callable(self.env):
            out["env"] = None
            out["env_callable"] = getattr(self.env, "__qualname__", repr(self.env))
        return out


class BaseTrainer:
    """Config validation, iteration counters, checkpoints and ``stop`` for all trainers.

    Args:
        config: the algorithm's config dataclass, or a dict validated into it.
        env: shorthand for ``config["env"]``.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[BaseConfig]] = BaseConfig

    def __init__(self, config: BaseConfig | Mapping[str, Any] | None = None, env: Any = None):
        if config is None or isinstance(config, Mapping):
            config = self.config_class.from_dict(config or {})
        elif not isinstance(config, self.config_class):
            raise ConfigError(
                f"{type(self).__name__} needs a {self.config_class.__name__} or a dict, got "
                f"{type(config).__name__}"
            )
        if env is not None:
            config = dataclasses.replace(config, env=env)
        if config.env is None:
            raise ConfigError(
                "config field 'env' is required (a Gymnasium id such as 'CartPole-v1')"
            )
        self.config = self.validate_config(config)
        self.iteration = 0
        self.time_total_s = 0.0
        self._result_logger: ResultLogger | None = None
        # CRUCIAL: before any actor starts: a reservation the cluster can never grant
        # would leave the trainer waiting forever, printing nothing.
        self.check_resources()

    def validate_config(self, config: Any) -> Any:
        """Checks of a complete config that need the algorithm class (e.g. its supported
        optimizers), run before anything is reserved; returns the config to use."""
        return config

    def check_resources(self) -> None:
        """Raise ConfigError (at once, naming each part, the cluster and a setting that
        fits) if the Ray cluster can never hold the actors this trainer starts; starts
        Ray only if the trainer starts Ray actors.  See ``hierl.algorithms.resources``."""
        check_cluster_fits(type(self), self.config)

    # -- the algorithm -----------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run one short iteration; return the flat result dict."""
        raise NotImplementedError

    def finish_iteration(self, result: dict[str, Any], start: float) -> dict[str, Any]:
        """Count an iteration that began at ``time.perf_counter()`` = ``start`` and add
        the standard ``training_iteration`` / ``time_*`` keys to its ``result``, then log
        it (``hierl.algorithms.metrics.finish_iteration``)."""
        return metrics.finish_iteration(self, result, start)

    def log_result(self, result: dict[str, Any]) -> None:
        """Write ``result`` to ``config.logdir`` (if set): the last step of ``train()``."""
        if self.config.logdir is None:
            return
        if self._result_logger is None:
            self._result_logger = ResultLogger(self.config.logdir)
        self._result_logger.log(result)

    def get_state(self) -> dict[str, Any]:
        """Everything ``set_state`` needs, as arrays and JSON scalars (no pickle)."""
        raise NotImplementedError

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        raise NotImplementedError

    @classmethod
    def actor_groups(cls, config: Any) -> list[ActorGroup]:
        """Everything a trainer of this class with (typed) ``config`` runs: its driver
        first (one group, possibly reserving nothing), then each kind of Ray actor it
        starts, with settings named relative to ``config``.  A trainer that starts actors
        (evaluators, a population's members, AlphaZero's workers) overrides this and
        extends ``super().actor_groups(config)``; ``hierl.algorithms.resources`` reserves
        and checks what it returns."""
        return [driver_group(config)]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # CRUCIAL: the old hook would otherwise be ignored without a word, and the actors
        # it declared started outside the trainer's reservation.
        if "extra_actor_groups" in vars(cls):
            raise TypeError(
                f"{cls.__qualname__} defines extra_actor_groups, which hierl no longer "
                "reads: override the classmethod actor_groups(config) instead, returning "
                "super().actor_groups(config) plus your groups"
            )

    # -- checkpoints -------------------------------------------------------------------
    def save(self, checkpoint_dir: str | Path) -> Path:
        """Write a complete checkpoint to ``checkpoint_dir`` (atomically); returns the path."""
        meta = {
            "kind": CHECKPOINT_KIND,
            "algorithm": self.name,
            "config": self.config.to_dict(),
        }
        return save_checkpoint(checkpoint_dir, meta, self.get_state())

    def restore(self, checkpoint_dir: str | Path) -> None:
        """Load a checkpoint written by ``save`` of the same algorithm.

        Raises:
            CheckpointError: the checkpoint is missing, corrupt, of another algorithm or
                does not fit this trainer (e.g. a model-shape mismatch: the message names
                the checkpoint, the policy, the parameter and both shapes).  The trainer
                may then be partly restored: build a new one before training on.
        """
        meta, state = load_checkpoint(checkpoint_dir)
        if meta.get("algorithm") != self.name:
            raise CheckpointError(
                f"checkpoint '{checkpoint_dir}' is for algorithm {meta.get('algorithm')!r}, "
                f"not {self.name!r}"
            )
        self._set_state_checked(state, checkpoint_dir)

    def _set_state_checked(self, state: Any, checkpoint_dir: str | Path) -> None:
        """``set_state``, with any error from a malformed or unfitting state turned into a
        CheckpointError naming the checkpoint."""
        if not isinstance(state, Mapping):
            raise CheckpointError(f"checkpoint '{checkpoint_dir}' holds no state dict")
        try:
            self.set_state(state)
        except CheckpointError as e:
            raise CheckpointError(f"checkpoint '{checkpoint_dir}': {e}") from e
        except (
            KeyError,
            TypeError,
            ValueError,
            IndexError,
            AttributeError,
            RuntimeError,
            ArithmeticError,
        ) as e:
            what = f"missing entry {e}" if isinstance(e, KeyError) else f"{e}"
            name = self.name or type(self).__name__
            raise CheckpointError(
                f"checkpoint '{checkpoint_dir}' does not fit this {name} trainer: "
                f"{type(e).__name__}: {what}"
            ) from e

    @classmethod
    def config_from_checkpoint(
        cls, config: dict[str, Any], overrides: dict[str, Any], checkpoint_dir: str | Path
    ) -> dict[str, Any]:
        """The config to rebuild a trainer from a checkpoint's stored ``config``."""
        config.pop("env_callable", None)
        config.update(overrides)
        return config

    @staticmethod
    def from_checkpoint(
        checkpoint_dir: str | Path, *, allow_imports: Collection[str] = (), **config_overrides: Any
    ) -> BaseTrainer:
        """Rebuild a trainer from a checkpoint alone (config read from it), then restore.

        Imports no module the stored config names (``callbacks``, ``model.custom_model``,
        ``env`` as ``"module:name"``) unless ``allow_imports`` lists it (or its package),
        it is registered in this process, or ``config_overrides`` replaces the setting
        (see ``hierl.algorithms.checkpoint_imports``).

        Raises:
            CheckpointError: the checkpoint is missing, corrupt, does not fit, or names a
                module that is not allowed (``ImportRefusedError``).
        """
        from hierl.algorithms.registry import get_trainer_class

        meta, state = _load_trainer_checkpoint(checkpoint_dir)
        cls = get_trainer_class(str(meta.get("algorithm")))
        return _rebuild(cls, meta["config"], state, checkpoint_dir, allow_imports, config_overrides)

    @staticmethod
    def for_acting(
        checkpoint_dir: str | Path, *, allow_imports: Collection[str] = (), **config_overrides: Any
    ) -> BaseTrainer:
        """The flat trainer, in this process, that acts for a checkpoint of any algorithm:
        what ``hierl rollout``, ``export`` and ``serve`` load.

        A flat trainer's checkpoint gives that trainer with nothing but its local
        evaluator (no Ray, no remote or evaluation evaluators, the env as input, no
        logged output: ``ACTING_OVERRIDES``); a nested one gives the trainer its
        ``acting_checkpoint`` names (PPO-ES / A3C-ES: the best member, ES: its
        policy), also without Ray or actors.  ``config_overrides`` apply on top (e.g.
        another ``env``); ``allow_imports`` as for ``from_checkpoint``.  Acting:

            trainer = BaseTrainer.for_acting("runs/PPO_ES_Walker2d-v5/checkpoints/000010")
            action = trainer.compute_single_action(obs, explore=False)

        Raises:
            CheckpointError: as for ``from_checkpoint``, or the algorithm holds no
                flat policy to act with (the message says what to use instead).
        """
        from hierl.algorithms.registry import get_trainer_class

        meta, state = _load_trainer_checkpoint(checkpoint_dir)
        cls, config = get_trainer_class(str(meta.get("algorithm"))), dict(meta["config"])
        while True:  # a member may nest again: down to the flat trainer that acts
            try:
                flat, config, state = cls.acting_checkpoint(config, state)
            except CheckpointError as e:
                raise CheckpointError(f"'{checkpoint_dir}': {e}") from None
            except (KeyError, TypeError, ValueError) as e:  # a malformed nested state
                what = f"missing entry {e}" if isinstance(e, KeyError) else f"{e}"
                raise CheckpointError(
                    f"checkpoint '{checkpoint_dir}' of {cls.name} names no policy to act "
                    f"with: {type(e).__name__}: {what}"
                ) from e
            if flat is cls:
                break
            cls = flat
        return _rebuild(cls, config, state, checkpoint_dir, allow_imports, config_overrides)

    @classmethod
    def acting_checkpoint(
        cls, config: dict[str, Any], state: Mapping[str, Any]
    ) -> tuple[type[BaseTrainer], dict[str, Any], Mapping[str, Any]]:
        """The flat trainer that acts for a checkpoint of this algorithm, as ``(its
        class, its config dict as a checkpoint stores it, its state)``, given the
        checkpoint's stored ``config`` and ``state`` (used by ``for_acting``).

        ``Trainer`` returns itself with ``ACTING_OVERRIDES`` applied; a nested trainer
        whose result is one flat policy (PPO-ES: its recorded best member) overrides
        this; the default refuses.

        Raises:
            CheckpointError: this algorithm holds no single flat policy.
        """
        raise CheckpointError(
            f"a checkpoint of the nested algorithm {cls.name or cls.__name__} holds no single "
            "flat policy to act with; load it in Python with BaseTrainer.from_checkpoint"
        )

    def stop(self) -> None:
        """Release every actor and process the trainer started (and close the logs:
        subclasses call this last)."""
        if self._result_logger is not None:
            self._result_logger.close()
            self._result_logger = None

    def __enter__(self) -> BaseTrainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _load_trainer_checkpoint(checkpoint_dir: str | Path) -> tuple[dict[str, Any], Any]:
    """``(meta, state)`` of a trainer checkpoint whose meta holds a config dict."""
    meta, state = load_checkpoint(checkpoint_dir)
    if meta.get("kind") != CHECKPOINT_KIND:
        raise CheckpointError(f"'{checkpoint_dir}' is not a hierl trainer checkpoint")
    meta["config"] = meta.get("config") or {}
    if not isinstance(meta["config"], dict):
        raise CheckpointError(f"checkpoint '{checkpoint_dir}' has a config that is not a dict")
    return meta, state


def _rebuild(
    cls: type[BaseTrainer],
    stored: dict[str, Any],
    state: Any,
    checkpoint_dir: str | Path,
    allow_imports: Collection[str],
    overrides: dict[str, Any],
) -> BaseTrainer:
    """A ``cls`` trainer built from the ``stored`` config (imports checked, ``overrides``
    applied) with ``state`` restored; stopped again if the state does not fit."""
    from hierl.algorithms.checkpoint_imports import check_checkpoint_imports

    check_checkpoint_imports(stored, allow_imports, checkpoint_dir, replaced=overrides)
    config = cls.config_from_checkpoint(dict(stored), dict(overrides), checkpoint_dir)
    if config.get("env") is None:
        raise CheckpointError(
            f"checkpoint '{checkpoint_dir}' was made with a callable env; pass env=... "
            "to from_checkpoint"
        )
    trainer = cls(config)
    try:
        trainer._set_state_checked(state, checkpoint_dir)
    except CheckpointError:
        trainer.stop()
        raise
    return trainer
