"""What a trainer reserves, and whether the Ray cluster can ever give it that.

A trainer is a driver process (its learner: ``num_cpus_for_driver``, ``num_gpus``) plus
the Ray actors it starts, each declared as an ``ActorGroup`` by the trainer class itself
(``BaseTrainer.actor_groups``, a class hook): a flat ``Trainer``'s ``num_evaluators``
remote evaluators (``num_cpus_per_evaluator``, ``num_gpus_per_evaluator`` each) and the
actors its optimizer starts (``PolicyOptimizer.actor_groups``: Ape-X replay shards,
parameter-server shards, ES aggregators); a nested algorithm's own actors (a population's
member trainers, AlphaZero's actors).  This module only reads those groups: it imports
the trainer modules for their types alone.  ``trainer_bundles`` turns them into
one resource bundle per process, driver first.  Whoever schedules a trainer (a Ray Tune
trial, a population loop such as PPO-ES that runs trainers as actors) reserves these
bundles as one placement group and starts the trainer in its first bundle with
child-task capture, so the nested actors land inside the reservation: they can never
wait on CPUs that other trials hold (no deadlock):

    bundles = trainer_bundles(PPOTrainer, {"num_evaluators": 2, "num_cpus_per_evaluator": 0.5})
    # [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]

Ray rejects bundles that reserve nothing, so an actor that reserves nothing (e.g. a
replay shard with ``num_cpus_per_replay_shard=0``) gets no bundle: it shares the
others'.  A driver that reserves nothing keeps an empty first bundle (``{}``), which
Ray Tune accepts as "the trainable takes no resources of its own".

Before any actor starts, ``check_cluster_fits`` compares all of it with what the cluster
can ever offer (``ray.cluster_resources()`` in all; each bundle against the largest
node) and raises a ConfigError naming the total, each part, the cluster and the settings
that would make it fit, instead of leaving the actors (or a Tune trial) waiting forever.
The driver counts only where Ray reserves it: a trainer running as a Ray actor or Tune
trial; a plain driver process is no Ray reservation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hierl.config import ConfigError
from hierl.evaluators.ray_runtime import ActorGroup, ensure_ray

if TYPE_CHECKING:
    from hierl.algorithms.trainer import TrainerConfig
    from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer
    from hierl.optimizers import PolicyOptimizer

SKIP_CHECK_ENV = "HIERL_SKIP_RESOURCE_CHECK"
"""Set to 1 to skip ``check_cluster_fits`` (a cluster that adds nodes on demand)."""
AUTOSCALER_BOOTSTRAP_FILE = "~/ray_bootstrap_config.yaml"
"""Written on the head node by Ray's cluster launcher (``ray up``), which autoscales."""

_EPS = 1e-6  # Ray counts resources in units of 1e-4; this absorbs float sums only


def resolve_config(trainer_cls: type[BaseTrainer], config: BaseConfig | Mapping[str, Any]):
    """``config`` as ``trainer_cls``'s typed config (dicts are validated: "did you mean")."""
    if isinstance(config, Mapping):
        return trainer_cls.config_class.from_dict(config)
    return config


def trainer_groups(
    trainer_cls: type[BaseTrainer], config: BaseConfig | Mapping[str, Any]
) -> list[ActorGroup]:
    """Everything a ``trainer_cls`` trainer with ``config`` runs: its driver first (one,
    possibly reserving nothing), then the actors it starts (``trainer_cls.actor_groups``).
    Settings are named relative to ``config``."""
    return trainer_cls.actor_groups(resolve_config(trainer_cls, config))


# -- the groups trainers declare (their ``actor_groups`` hooks build on these) ---------
def driver_group(config: BaseConfig) -> ActorGroup:
    """The trainer's own process: ``num_cpus_for_driver`` and ``num_gpus`` (its learner)."""
    return ActorGroup(
        "driver",
        1,
        {"CPU": config.num_cpus_for_driver, "GPU": config.num_gpus},
        share_settings={"CPU": "num_cpus_for_driver", "GPU": "num_gpus"},
    )


def evaluator_groups(config: TrainerConfig) -> list[ActorGroup]:
    """A flat trainer's remote evaluators: the training ones, and the evaluation ones
    (same resources each) when it evaluates."""
    counts = [("evaluator", "num_evaluators")]
    if config.evaluation_interval:
        counts.append(("evaluation evaluator", "evaluation_num_evaluators"))
    return [
        ActorGroup(
            name,
            getattr(config, count),
            {"CPU": config.num_cpus_per_evaluator, "GPU": config.num_gpus_per_evaluator},
            count,
            {"CPU": "num_cpus_per_evaluator", "GPU": "num_gpus_per_evaluator"},
        )
        for name, count in counts
    ]


def optimizer_groups(opt_class: type[PolicyOptimizer], config: TrainerConfig) -> list[ActorGroup]:
    """The actors a flat trainer's optimizer ``opt_class`` starts, from the config the
    trainer builds the optimizer from (so both always agree), with their settings named
    relative to the trainer's config (``optimizer_config.num_shards``)."""
    return [
        dataclasses.replace(
            g,
            count_setting=g.count_setting and f"optimizer_config.{g.count_setting}",
            share_settings={r: f"optimizer_config.{s}" for r, s in g.share_settings.items()},
        )
        for g in opt_class.actor_groups(config.optimizer_config, config.num_evaluators)
    ]


def trainer_bundles(
    trainer_cls: type[BaseTrainer], config: BaseConfig | Mapping[str, Any]
) -> list[dict[str, float]]:
    """The resource bundles of one ``trainer_cls`` trainer with ``config``.

    The first is the driver's (possibly ``{}``), then one per actor of
    ``trainer_groups``; bundles of actors that reserve nothing are left out (Ray rejects
    all-zero bundles).
    """
    driver, *actors = trainer_groups(trainer_cls, config)
    return [dict(driver.bundle)] + [
        dict(g.bundle) for g in actors if g.bundle for _ in range(g.count)
    ]


def total_resources(bundles: list[dict[str, float]]) -> dict[str, float]:
    """The sum of ``bundles`` per resource (what a trainer reserves in all)."""
    total: dict[str, float] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            total[k] = total.get(k, 0.0) + v
    return total


# -- does it fit? ----------------------------------------------------------------------
@dataclasses.dataclass
class ClusterCapacity:
    """What a Ray cluster can ever offer: its resources in all and those of each node."""

    total: dict[str, float]
    """``ray.cluster_resources()``."""
    nodes: list[dict[str, float]]
    """Each live node's resources (one placement-group bundle must fit on one node)."""

    @classmethod
    def from_ray(cls) -> ClusterCapacity:
        """The capacity of the cluster this process is connected to."""
        import ray

        nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
        return cls(dict(ray.cluster_resources()), nodes)

    def largest_node(self, resource: str) -> float:
        """The most of ``resource`` any single node has."""
        return max((n.get(resource, 0.0) for n in self.nodes), default=0.0)

    def fits_one_node(self, bundle: Mapping[str, float]) -> bool:
        """Whether some node has all of ``bundle`` at once."""
        return any(all(n.get(k, 0.0) + _EPS >= v for k, v in bundle.items()) for n in self.nodes)


def _reserved(groups: list[ActorGroup], driver_reserved: bool) -> list[ActorGroup]:
    """The groups that Ray reserves resources for (the driver only when ``driver_reserved``)."""
    return [g for i, g in enumerate(groups) if (i > 0 or driver_reserved) and g.count and g.bundle]


def _shortfalls(groups: list[ActorGroup], cluster: ClusterCapacity) -> tuple[dict, list]:
    """``(need, too_big)``: the total per resource the cluster lacks (resource → needed),
    and the groups whose single bundle fits on no node."""
    need = total_resources([{k: v * g.count for k, v in g.bundle.items()} for g in groups])
    short = {k: v for k, v in need.items() if v > cluster.total.get(k, 0.0) + _EPS}
    too_big = [g for g in groups if not cluster.fits_one_node(g.bundle)]
    return short, too_big


def _fits(
    trainer_cls: type[BaseTrainer], config: BaseConfig, cluster: ClusterCapacity, driver: bool
) -> bool:
    """Whether ``config`` (possibly an invalid candidate: then False) fits ``cluster``."""
    try:
        groups = _reserved(trainer_groups(trainer_cls, config), driver)
    except ValueError:  # ConfigError, or a check of a config's own __post_init__
        return False
    short, too_big = _shortfalls(groups, cluster)
    return not short and not too_big


def _with_setting(config: Any, path: str, value: Any) -> Any:
    """A copy of ``config`` with the dotted setting ``path`` (fields, then dict keys such as
    ``optimizer_config.num_shards`` or ``member_config.num_evaluators``) set to ``value``."""
    head, _, rest = path.partition(".")
    if not rest:
        new = value
    elif dataclasses.is_dataclass(getattr(config, head, None)):
        new = _with_setting(getattr(config, head), rest, value)
    else:  # a dict of settings
        new = _set_in_dict(getattr(config, head), rest, value)
    return dataclasses.replace(config, **{head: new})


def _set_in_dict(data: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    out = dict(data)
    out[head] = _set_in_dict(data.get(head) or {}, rest, value) if rest else value
    return out


def _read_setting(config: Any, path: str) -> Any:
    """The value of the dotted setting ``path`` in ``config`` (None: not set there)."""
    value = config
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else getattr(value, part, None)
        if value is None:
            return None
    return value


def _largest(fits: Callable[[int], bool], hi: int) -> int | None:
    """The largest k in [0, hi] with ``fits(k)``, for ``fits`` true up to some k."""
    if hi < 0 or not fits(0):
        return None
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _suggestions(
    trainer_cls: type[BaseTrainer],
    config: BaseConfig,
    groups: list[ActorGroup],
    resources: list[str],
    cluster: ClusterCapacity,
    driver: bool,
) -> list[str]:
    """Single setting changes ``"name=value"`` that make everything fit: per group (the
    largest first), a smaller share of each resource in ``resources``, then fewer actors."""

    def fits_with(path: str, value: Any) -> bool:
        try:
            candidate = _with_setting(config, path, value)
        except ValueError:
            return False
        return _fits(trainer_cls, candidate, cluster, driver)

    out: dict[str, str] = {}
    by_size = sorted(groups, key=lambda g: -sum(g.bundle.get(r, 0.0) * g.count for r in resources))
    for g in by_size:
        for r in resources:
            path = g.share_settings.get(r)
            if r not in g.bundle or not path or path in out:
                continue
            hundredths = _largest(
                lambda h, p=path: fits_with(p, h / 100), math.ceil(g.bundle[r] * 100 - _EPS) - 1
            )
            if hundredths is not None:
                out[path] = f"{path}={hundredths / 100:g}"
        path = g.count_setting
        if path and path not in out:
            current = _read_setting(config, path)
            start = min(int(current), g.count) if isinstance(current, int) else g.count
            for k in range(start - 1, max(start - 1000, -1), -1):  # validity may bound k below
                if fits_with(path, k):
                    out[path] = f"{path}={k}"
                    break
    return list(out.values())


def _amounts(resources: Mapping[str, float]) -> str:
    """``{"CPU": 2.0, "GPU": 0.5}`` as ``"2 CPU and 0.5 GPU"``."""
    return " and ".join(f"{v:g} {k}" for k, v in resources.items()) or "nothing"


def _part(group: ActorGroup) -> str:
    """One group as ``"2 evaluators x 1 CPU (num_cpus_per_evaluator)"``."""
    settings = [group.share_settings[r] for r in group.bundle if r in group.share_settings]
    how = f" ({', '.join(settings)})" if settings else ""
    if group.what == "driver":
        return f"driver {_amounts(group.bundle)}{how}"
    what = group.what if group.count == 1 else f"{group.what}s"
    amounts = _amounts(group.bundle)
    return f"{group.count} {what} x {f'({amounts})' if len(group.bundle) > 1 else amounts}{how}"


def fit_error(
    trainer_cls: type[BaseTrainer],
    config: BaseConfig | Mapping[str, Any],
    cluster: ClusterCapacity,
    driver_reserved: bool,
    context: str = "",
) -> str | None:
    """Why a ``trainer_cls`` trainer with ``config`` can never be placed on ``cluster``, or
    None when it fits.  Pure: no Ray involved (``check_cluster_fits`` reads the cluster).

    The message names the total, each part (with its setting), what the cluster has, and
    concrete single-setting changes that would make it fit.  ``driver_reserved``: the
    trainer runs as a Ray actor or Tune trial, so its driver bundle counts too.
    """
    cfg = resolve_config(trainer_cls, config)
    groups = _reserved(trainer_groups(trainer_cls, cfg), driver_reserved)
    short, too_big = _shortfalls(groups, cluster)
    if not short and not too_big:
        return None
    name = trainer_cls.name or trainer_cls.__name__
    total = total_resources([{k: v * g.count for k, v in g.bundle.items()} for g in groups])
    problems = []
    if short:
        have = {k: cluster.total.get(k, 0.0) for k in short}
        nodes = len(cluster.nodes)
        problems.append(
            f"it needs {_amounts(short)} but the Ray cluster has {_amounts(have)} in all "
            f"({nodes} node{'s' if nodes != 1 else ''})"
        )
    for g in too_big:
        largest = {k: cluster.largest_node(k) for k in g.bundle}
        problems.append(
            f"each {g.what} reserves {_amounts(g.bundle)} but the largest Ray node has "
            f"{_amounts(largest)} (one actor cannot span nodes)"
        )
    parts = " + ".join(_part(g) for g in groups)
    driver_note = "" if driver_reserved else "; its driver process reserves nothing in Ray"
    resources = sorted(set(short) | {k for g in too_big for k in g.bundle})
    fixes = _suggestions(trainer_cls, cfg, groups, resources, cluster, driver_reserved)
    fix = (
        f"It fits with any one of: {', '.join(fixes)}"
        if fixes
        else "No single setting makes it fit: lower several of the settings above"
    )
    return (
        f"{context}{name} can never be placed, its actors would wait forever: "
        f"{'; '.join(problems)}. It reserves {parts} = {_amounts(total)}{driver_note}. "
        f"{fix}. Or add nodes (a cluster that autoscales: set {SKIP_CHECK_ENV}=1 to skip "
        "this check)."
    )


def _check_skipped() -> bool:
    """Whether the cluster may grow, so that what it has now is no limit.

    Ray 2.60 has no public "does this cluster autoscale" query: ``ray.cluster_resources()``
    and ``ray.nodes()`` list the current nodes only, the autoscaler's state is private
    (``ray.autoscaler.v2``, internal KV), and a local cluster runs the same monitor process
    (with a read-only config mirroring its nodes).  So, like Ray Tune's own
    insufficient-resources warning (``ray.tune.execution.cluster_info._is_ray_cluster``),
    we take the cluster launcher's bootstrap file on this machine as the sign of an
    autoscaling cluster, and anyone else (e.g. KubeRay with autoscaling) opts out with
    ``HIERL_SKIP_RESOURCE_CHECK=1`` (the error message says so).
    """
    if os.environ.get(SKIP_CHECK_ENV, "").strip() not in ("", "0"):
        return True
    return Path(AUTOSCALER_BOOTSTRAP_FILE).expanduser().exists()


def _runs_in_ray() -> bool:
    """Whether this process is a Ray actor or runs inside a placement group (Ray then
    reserves the trainer's driver bundle)."""
    import ray
    from ray.util.placement_group import get_current_placement_group

    if ray.get_runtime_context().get_actor_id() is not None:
        return True
    return get_current_placement_group() is not None


def check_cluster_fits(
    trainer_cls: type[BaseTrainer],
    config: BaseConfig | Mapping[str, Any],
    as_actor: bool | None = None,
    context: str = "",
) -> None:
    """Fail fast, before any actor starts, if a ``trainer_cls`` trainer can never be placed.

    Starts (or joins ``config.ray_address``) Ray only when the trainer starts Ray actors
    (or ``as_actor``); a trainer that starts none is not checked.  ``as_actor``: the
    trainer is (True) or is not (False) itself a Ray actor or Tune trial whose driver
    Ray reserves; None: this process is the trainer, look whether it runs inside Ray.

    Raises:
        ConfigError: the message of ``fit_error``.
    """
    cfg = resolve_config(trainer_cls, config)
    starts_actors = any(g.count for g in trainer_groups(trainer_cls, cfg)[1:])
    if not (starts_actors or as_actor) or _check_skipped():
        return
    ensure_ray(cfg.ray_address)
    driver = _runs_in_ray() if as_actor is None else as_actor
    error = fit_error(trainer_cls, cfg, ClusterCapacity.from_ray(), driver, context)
    if error:
        raise ConfigError(error)


# -- trainers as actors ----------------------------------------------------------------
def start_trainer_actor(
    trainer_cls: type[BaseTrainer],
    config: BaseConfig | Mapping[str, Any],
    timeout_s: float = 600.0,
) -> tuple[Any, Any]:
    """Start ``trainer_cls(config)`` as a Ray actor inside its own reservation.

    Returns ``(actor, placement_group)``.  Outside any placement group the trainer's
    bundles (``trainer_bundles``) are reserved as a new one (a ConfigError at once if the
    cluster can never hold them: ``check_cluster_fits``); the actor takes the first
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
        check_cluster_fits(trainer_cls, cfg, as_actor=True)
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
