"""What a trainer reserves: one resource bundle per process it runs, driver first.

A trainer is a driver process (its learner: ``num_cpus_for_driver``, ``num_gpus``) plus
the Ray actors it starts: ``num_evaluators`` remote evaluators (``num_cpus_per_evaluator``,
``num_gpus_per_evaluator`` each), the actors its optimizer starts (Ape-X replay shards,
parameter-server shards) and any an algorithm declares in ``Trainer.extra_actor_bundles``.  Whoever
schedules a trainer (a Ray Tune trial, a population loop such as PPO-ES that runs
trainers as actors) reserves these bundles as one placement group and starts the
trainer in its first bundle with child-task capture, so the nested actors land inside
the reservation: they can never wait on CPUs that other trials hold (no deadlock)::

    bundles = trainer_bundles(PPOTrainer, {"num_evaluators": 2, "num_cpus_per_evaluator": 0.5})
    # [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]

Ray rejects bundles that reserve nothing, so an actor that reserves nothing (e.g. a
replay shard with ``num_cpus_per_replay_shard=0``) gets no bundle: it shares the
others'.  A driver that reserves nothing keeps an empty first bundle (``{}``), which
Ray Tune accepts as "the trainable takes no resources of its own".
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer


def _bundle(cpus: float, gpus: float = 0.0) -> dict[str, float]:
    """``{"CPU": cpus, "GPU": gpus}`` without the zero entries."""
    out = {"CPU": float(cpus), "GPU": float(gpus)}
    return {k: v for k, v in out.items() if v > 0}


def resolve_config(trainer_cls: type[BaseTrainer], config: BaseConfig | Mapping[str, Any]):
    """``config`` as ``trainer_cls``'s typed config (dicts are validated: "did you mean")."""
    if isinstance(config, Mapping):
        return trainer_cls.config_class.from_dict(config)
    return config


def trainer_bundles(
    trainer_cls: type[BaseTrainer], config: BaseConfig | Mapping[str, Any]
) -> list[dict[str, float]]:
    """The resource bundles of one ``trainer_cls`` trainer with ``config``.

    The first is the driver's (possibly ``{}``), then one per remote evaluator, then one
    per extra actor of the algorithm (``trainer_cls.extra_actor_bundles``); bundles of
    actors that reserve nothing are left out (Ray rejects all-zero bundles).
    """
    cfg = resolve_config(trainer_cls, config)
    bundles = [_bundle(cfg.num_cpus_for_driver, cfg.num_gpus)]
    if isinstance(cfg, TrainerConfig):  # nested algorithms have no evaluators of their own
        evaluator = _bundle(cfg.num_cpus_per_evaluator, cfg.num_gpus_per_evaluator)
        if evaluator:
            bundles += [dict(evaluator) for _ in range(cfg.num_evaluators)]
    extra = optimizer_actor_bundles(trainer_cls, cfg) + trainer_cls.extra_actor_bundles(cfg)
    bundles += [b for b in extra if any(v > 0 for v in b.values())]
    return bundles


def total_resources(bundles: list[dict[str, float]]) -> dict[str, float]:
    """The sum of ``bundles`` per resource (what a trainer reserves in all)."""
    total: dict[str, float] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            total[k] = total.get(k, 0.0) + v
    return total


def optimizer_actor_bundles(
    trainer_cls: type[BaseTrainer], config: BaseConfig
) -> list[dict[str, float]]:
    """One bundle per actor the trainer's optimizer starts: Ape-X replay shards
    (``apex``), parameter-server shards (``sharded_ps``), ES aggregators (``es``); none
    for the others.

    The settings are read the way the trainer builds its optimizer (trainer fields of
    the same name, then ``optimizer_config``), so both always agree.
    """
    if not issubclass(trainer_cls, Trainer):
        return []
    name = config.optimizer or trainer_cls.default_optimizer
    if name == "apex":
        opt = trainer_cls.optimizer_config(config, name)
        num, cpus = opt.num_replay_shards, opt.num_cpus_per_replay_shard
    elif name == "sharded_ps":
        opt = trainer_cls.optimizer_config(config, name)
        num, cpus = opt.num_shards, opt.num_cpus_per_shard
    elif name == "es":  # aggregator actors (only with remote evaluators)
        opt = trainer_cls.optimizer_config(config, name)
        num = opt.num_aggregators if config.num_evaluators else 0
        cpus = opt.num_cpus_per_aggregator
    else:
        return []
    shard = _bundle(cpus)
    return [dict(shard) for _ in range(num)] if shard else []


def start_trainer_actor(
    trainer_cls: type[BaseTrainer],
    config: BaseConfig | Mapping[str, Any],
    timeout_s: float = 600.0,
) -> tuple[Any, Any]:
    """Start ``trainer_cls(config)`` as a Ray actor inside its own reservation.

    Returns ``(actor, placement_group)``.  Outside any placement group the trainer's
    bundles (``trainer_bundles``) are reserved as a new one; the actor takes the first
    bundle and captures its children, so its evaluators land in the others.  Inside one
    (e.g. in a Ray Tune trial that reserved this trainer's bundles as part of its own)
    the actor is simply created there and the group returned is None.  Release both
    with ``stop_trainer_actor``.
    """
    import ray
    from ray.util.placement_group import get_current_placement_group, placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cfg = resolve_config(trainer_cls, config)
    bundles = trainer_bundles(trainer_cls, cfg)
    if get_current_placement_group() is not None:
        driver, pg, strategy = bundles[0], None, None
    else:
        # CRUCIAL: Ray rejects empty bundles; a driver that reserves nothing gets a token
        # CPU share so that the group has a bundle to start the actor in.
        driver = bundles[0] or {"CPU": 0.01}
        pg = placement_group([driver, *bundles[1:]], strategy="PACK")
        try:
            ray.get(pg.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(pg)
            raise RuntimeError(
                f"could not reserve {total_resources(bundles)} for a {trainer_cls.__name__} "
                f"within {timeout_s:.0f}s (cluster: {ray.cluster_resources()})"
            ) from None
        strategy = PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True
        )
    options = {"num_cpus": driver.get("CPU", 0.0), "num_gpus": driver.get("GPU", 0.0)}
    if strategy is not None:
        options["scheduling_strategy"] = strategy
    actor = ray.remote(trainer_cls).options(**options).remote(cfg)
    return actor, pg


def stop_trainer_actor(actor: Any, pg: Any, timeout_s: float = 60.0) -> None:
    """Stop a trainer started by ``start_trainer_actor`` and release its reservation."""
    import ray

    # already dead or stuck: killing it below releases its resources all the same
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(actor.stop.remote(), timeout=timeout_s)
    ray.kill(actor)
    if pg is not None:
        ray.util.remove_placement_group(pg)
