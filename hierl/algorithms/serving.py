"""Pushing a trainer's policy to a running serving deployment: the paper's
``srv_client.suggest_model(...)`` (arXiv appendix E.1).

A trainer whose config names a ``serve_deployment`` calls ``maybe_push`` after
every iteration; every ``every`` iterations it takes a ``PolicySnapshot`` (weights
and observation-filter statistics of every policy, the iteration) and broadcasts it to
every replica of the Ray Serve deployment ``hierl serve`` started (``hierl.serve``),
which swaps it in between two batches and names the snapshot's ``PolicySnapshot.
version`` in every answer.  This module is the contract between the two sides (the
deployment's name, the method called, the snapshot and its content hash); it imports
Ray only when it pushes, and nothing from ``hierl.serve`` (imports flow downward).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

from hierl.config import Config, ConfigError
from hierl.policy_graph import Weights
from hierl.utils import array_digest

if TYPE_CHECKING:
    from hierl.algorithms.trainer import Trainer

DEPLOYMENT_NAME = "PolicyServer"
"""The name of the Serve deployment that answers ``/act`` in every ``hierl serve`` app."""
UPDATE_METHOD = "update_policy"
"""The deployment's method that takes a ``PolicySnapshot`` (called on every replica)."""


@dataclasses.dataclass
class ServeDeployment(Config):
    """Where and how often a trainer pushes its policy (``serve_deployment`` config)."""

    app: str = ""
    """The Serve application's name (``hierl serve --name``, ``hierl.serve.deploy(name=)``)."""
    every: int = 1
    """Push after every this-many training iterations."""
    timeout_s: float = 30.0
    """Give up waiting for the replicas' acknowledgement after this long (the push is then
    reported as failed; training goes on)."""

    def __post_init__(self) -> None:
        self.check("app", bool(self.app), "must name the Serve application (e.g. 'hierl')")
        self.check("every", self.every >= 1, "must be >= 1")
        self.check("timeout_s", self.timeout_s > 0, "must be > 0")

    def check(self, name: str, ok: bool, valid: str) -> None:
        """ConfigError naming ``serve_deployment.<name>`` and its value unless ``ok``."""
        if not ok:
            raise ConfigError(
                f"config field 'serve_deployment.{name}' = {getattr(self, name)!r} is "
                f"invalid: {valid}"
            )


@dataclasses.dataclass(frozen=True)
class PolicySnapshot:
    """A trainer's policies at one iteration, as pushed to a deployment."""

    iteration: int
    """The trainer's ``training_iteration`` when the snapshot was taken."""
    weights: dict[str, Weights]
    """Policy id -> weights (``PolicyGraph.get_weights``)."""
    filters: dict[str, dict[str, Any]]
    """Policy id -> observation-filter statistics (``PolicyEvaluator.get_filters``)."""

    @property
    def version(self) -> dict[str, Any]:
        """``{"iteration": ..., "hash": ...}``: what every answer of the deployment names."""
        digest = array_digest({"weights": self.weights, "filters": self.filters or {}})
        return {"iteration": self.iteration, "hash": digest}

    @classmethod
    def of(cls, trainer: Trainer) -> PolicySnapshot:
        """The trainer's driver-side policies and filters now."""
        evaluator = trainer.local_evaluator
        return cls(
            iteration=int(trainer.iteration),
            weights=evaluator.get_weights(),
            filters=evaluator.get_filters(flush_after=False),
        )


def suggest_model(snapshot: PolicySnapshot, target: ServeDeployment) -> dict[str, Any]:
    """Broadcast ``snapshot`` to every replica of the deployment of app ``target.app``
    and wait for all of them; returns the snapshot's version.

    Raises:
        Exception: whatever Ray Serve raises when the app does not exist, a replica fails
            or ``target.timeout_s`` passes.
    """
    from ray import serve

    handle = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=target.app)
    handle.broadcast(UPDATE_METHOD, snapshot).results(timeout_s=target.timeout_s)
    return snapshot.version


def maybe_push(trainer: Trainer, result: dict[str, Any]) -> None:
    """After an iteration: push the trainer's policy when its ``serve_deployment`` is due,
    recording the version as ``serve_version`` (its hash) in ``result``.  A failed push
    warns and training goes on (serving is a side channel of training)."""
    target = trainer.config.serve_deployment
    if target is None or trainer.iteration % target.every:
        return
    from hierl.evaluators.ray_runtime import ensure_ray

    try:
        ensure_ray(trainer.config.ray_address)
        version = suggest_model(PolicySnapshot.of(trainer), target)
    except Exception as e:  # any failure of the side channel: warn, go on
        warnings.warn(
            f"serve_deployment: pushing the policy of iteration {trainer.iteration} to Serve "
            f"app '{target.app}' failed ({type(e).__name__}: {e}); training goes on",
            stacklevel=2,
        )
        return
    result["serve_version"] = version["hash"]
