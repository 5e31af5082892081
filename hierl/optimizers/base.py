"""PolicyOptimizer base: one ``step()`` of distributed work over a set of evaluators.

RLlib (ICML 2018) §3.3: a policy optimizer "is responsible for the performance-critical
tasks of distributed sampling, parameter updates, and managing replay buffers", and is
swappable by name.  Every optimizer works with zero remote evaluators (everything on the
local evaluator) and with N.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from hierl.config import Config
from hierl.evaluators import EpisodeRecord, EvaluatorSet, PolicyEvaluator
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.optimizers.capabilities import OptimizerCapabilities
from hierl.optimizers.timers import TimerStat
from hierl.policy_graph import GlobalVars, LearnerStats
from hierl.sample_batch import DEFAULT_POLICY_ID

T = TypeVar("T")
OptimizerFactory = Callable[[str, Mapping[str, Any]], "PolicyOptimizer"]
"""``factory(name, settings)``: optimizer ``name`` over the same evaluators, its config
the algorithm's defaults for it under ``settings``."""


@dataclasses.dataclass
class OptimizerConfig(Config):
    """Settings every optimizer understands.

    An optimizer's settings are declared only in its config class; a Trainer passes them
    as ``optimizer_config`` (its algorithm's ``optimizer_defaults`` under the user's
    values).  Seeds are not settings here: an optimizer's random draws (minibatch order,
    replay sampling) follow the local evaluator's seed (``PolicyOptimizer.seed``).
    """

    train_batch_size: int = 4000
    """Rows gathered per step (samples are collected until at least this many); for the
    replay optimizers, rows per replayed batch."""

    def __post_init__(self) -> None:
        self.check("train_batch_size", self.train_batch_size >= 1, "must be >= 1")


def single_policy_stats(stats: Mapping[str, float]) -> LearnerStats:
    """The learner stats of an optimizer that trains the one (default) policy, nested
    under its id; ``{}`` when ``stats`` is empty (no update)."""
    return {DEFAULT_POLICY_ID: dict(stats)} if stats else {}


class PolicyOptimizer(OptimizerCapabilities):
    """Base class: subclasses set ``name`` and ``config_class``, declare what they can
    train (``OptimizerCapabilities``' attributes) and implement ``step()``.

    Construct with the evaluator set (or a local evaluator and a list of remote actor
    handles) and a config mapping/dataclass.  ``stats()`` reports the uniform keys
    ``num_steps_sampled``, ``num_steps_trained`` and one ``<phase>_time_ms`` per timer.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[OptimizerConfig]] = OptimizerConfig

    @classmethod
    def check_config(cls, config: OptimizerConfig, num_evaluators: int) -> None:
        """Raise ConfigError if ``config`` cannot run with ``num_evaluators`` remote
        evaluators (e.g. more ES aggregators than evaluators); called when a trainer's
        config is built, before any actor starts.  Default: any number fits."""

    @classmethod
    def create(
        cls,
        evaluators: EvaluatorSet,
        config: OptimizerConfig,
        factory: OptimizerFactory,
    ) -> PolicyOptimizer:
        """Build it over ``evaluators``: the one construction path a Trainer uses for
        every optimizer.  ``factory(name, settings)`` builds another registered optimizer
        with the algorithm's defaults for it under ``settings`` (``auto`` builds its
        candidates so).  Default: ``cls(evaluators, config=config)``."""
        return cls(evaluators, config=config)

    @classmethod
    def actor_groups(cls, config: OptimizerConfig, num_evaluators: int) -> list[ActorGroup]:
        """The Ray actors this optimizer starts besides the evaluators (e.g. replay shards),
        with ``config`` and ``num_evaluators`` remote evaluators; their settings are named
        as fields of ``config``.  Trainers reserve them (``hierl.algorithms.resources``).
        Default: none."""
        return []

    def __init__(
        self,
        evaluators: EvaluatorSet | PolicyEvaluator,
        remote_evaluators: list[Any] | None = None,
        config: OptimizerConfig | Mapping[str, Any] | None = None,
    ):
        if isinstance(evaluators, EvaluatorSet):
            self.evaluators = evaluators
        else:
            self.evaluators = EvaluatorSet.over(evaluators, remote_evaluators or ())
        if config is None or isinstance(config, Mapping):
            config = self.config_class.from_dict(config or {})
        self.config = config
        self.num_steps_sampled = 0
        self.num_steps_trained = 0
        self.num_updates = 0
        self.timers: dict[str, TimerStat] = {}
        self.learner_stats: LearnerStats = {}
        """What the last ``step()`` returned."""

    @property
    def seed(self) -> int | None:
        """The seed of this optimizer's random draws: the local evaluator's (the trainer's
        ``seed``; None: random)."""
        return self.local_evaluator.seed

    @property
    def local_evaluator(self) -> PolicyEvaluator:
        """The driver's evaluator."""
        return self.evaluators.local_evaluator

    @property
    def remote_evaluators(self) -> list[Any]:
        """The Ray actor handles of the remote evaluators."""
        return self.evaluators.remote_evaluators

    def timer(self, phase: str) -> TimerStat:
        """The timer for ``phase`` (created on first use)."""
        return self.timers.setdefault(phase, TimerStat())

    def step(self) -> LearnerStats:
        """One round of sampling and improvement; returns learner statistics per policy
        (``{}`` when nothing was learned)."""
        raise NotImplementedError

    def global_vars(self) -> GlobalVars:
        """The global counters to push to the policies now (``timestep``: this
        optimizer's ``num_steps_sampled``)."""
        return GlobalVars(timestep=self.num_steps_sampled)

    def push_local_weights(self, global_vars: GlobalVars | None = None) -> None:
        """Make the local policy's weights current everywhere this optimizer keeps weights.

        Called when they changed outside ``step()`` (restore, ``set_weights``, a strategy
        switch).  The default broadcasts them to the remote evaluators; optimizers that
        hold weights elsewhere (parameter servers, replicas) override it.
        """
        self.evaluators.sync_weights(global_vars)

    def drop_in_flight(self) -> None:
        """Forget work started in an earlier ``step()`` and not yet used (e.g. gradients
        in flight), so that a later ``step()`` starts from the current weights.

        Called when control passes to another optimizer over the same evaluators
        (``auto`` switching strategies).  Synchronous optimizers keep nothing in flight.
        """

    def stats(self) -> dict[str, float]:
        """Counters and per-phase mean times."""
        out: dict[str, float] = {
            "num_steps_sampled": self.num_steps_sampled,
            "num_steps_trained": self.num_steps_trained,
            "num_updates": self.num_updates,
        }
        for phase, t in self.timers.items():
            out[f"{phase}_time_ms"] = round(t.mean_ms, 3)
        return out

    def collect_episodes(self) -> list[EpisodeRecord]:
        """The episodes finished since the last call, for the trainer's result: by
        default every evaluator's (``episodes_by_evaluator``); optimizers that play
        episodes themselves (ES) add theirs."""
        return [e for _, episodes in self.episodes_by_evaluator() for e in episodes]

    def episodes_by_evaluator(self) -> list[tuple[int, list[EpisodeRecord]]]:
        """``(worker index, episodes finished since the last call)`` of the local
        evaluator (index 0) and of every remote one (1..N; a failed one is handled and
        skipped)."""
        out = [(0, self.local_evaluator.get_metrics())]
        if self.remote_evaluators:
            for actor, episodes in self.evaluators.call_remotes(lambda e: e.get_metrics.remote()):
                out.append((self.evaluators.worker_index(actor), episodes))
        return out

    def foreach_evaluator(self, fn: Callable[[PolicyEvaluator], T]) -> list[T]:
        """Apply ``fn`` to the local and every remote evaluator."""
        return self.evaluators.foreach_evaluator(fn)

    def save(self) -> dict[str, Any]:
        """Optimizer counters (JSON) and the state of a numpy ``rng`` attribute (minibatch
        shuffling) if the optimizer has one."""
        out: dict[str, Any] = {
            "num_steps_sampled": self.num_steps_sampled,
            "num_steps_trained": self.num_steps_trained,
            "num_updates": self.num_updates,
        }
        rng = getattr(self, "rng", None)
        if isinstance(rng, np.random.Generator):
            out["rng"] = rng.bit_generator.state
        return out

    def restore(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``save``."""
        self.num_steps_sampled = int(state["num_steps_sampled"])
        self.num_steps_trained = int(state["num_steps_trained"])
        self.num_updates = int(state.get("num_updates", 0))
        rng = getattr(self, "rng", None)
        if isinstance(rng, np.random.Generator) and state.get("rng") is not None:
            rng.bit_generator.state = state["rng"]

    def stop(self) -> None:
        """Release anything the optimizer owns (threads, actors); evaluators stay."""
