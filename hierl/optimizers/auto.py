"""``auto``: pick the SGD strategy by heuristics, then by measurement.

Ray RLlib arXiv version, appendix C ("Choosing the right SGD strategy"): the best
physical strategy depends on resource availability (devices on the driver), relative
data sizes (samples vs model) and the algorithm (whether the loss allows several SGD
passes).  RLlib "chooses an initial SGD strategy based on simple algorithm and
environment-specific heuristics" and, thanks to the task model, "can also adaptively
switch strategies based on runtime statistics".

Here: the heuristics order the candidates; each then runs ``calibration_steps`` real
training steps (the first one is a warm-up, e.g. a process group forming); the one with
the highest learner throughput (rows trained per second) is kept.  All candidates share
the evaluators and the local policy, and the weights are re-broadcast when the strategy
changes, so training continues across switches.  Each strategy keeps its own optimizer
moments where they live (driver or evaluators).  Candidates that cannot train the policy
(``PolicyOptimizer.missing_policy_capability``: e.g. ``multi_gpu`` for a policy that is
not a TorchPolicyGraph) are never run; ``stats()`` gives each one's reason as
``auto_skipped/<name>``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.config import Config, ConfigError
from hierl.evaluators import EvaluatorSet
from hierl.optimizers.auto_candidates import (
    gradient_strategies,
    initial_order,
    skipped_candidates,
)
from hierl.optimizers.base import OptimizerConfig, OptimizerFactory, PolicyOptimizer
from hierl.optimizers.registry import get_optimizer_class, register_optimizer
from hierl.optimizers.sgd import SGDConfig
from hierl.policy_graph import GlobalVars, LearnerStats


@dataclasses.dataclass
class AutoConfig(SGDConfig):
    """Settings of the ``auto`` optimizer.

    Its SGD settings (``train_batch_size``, ``num_sgd_iter``, ``sgd_minibatch_size``) are
    given to every candidate that has them; several SGD passes favour ``multi_gpu``.
    """

    candidates: tuple[str, ...] = ()
    """Strategies to compare; empty: every one of ``gradient_strategies()`` (an
    algorithm's ``optimizer_defaults`` may name fewer, e.g. those its loss allows).  The
    ones that cannot train the policy are skipped."""
    calibration_steps: int = 3
    """Steps measured per candidate; the first of them is a warm-up when there are >= 2."""

    def __post_init__(self) -> None:
        super().__post_init__()
        valid = gradient_strategies()
        self.candidates = self.candidates or valid
        bad = [c for c in self.candidates if c not in valid]
        self.check("candidates", not bad, f"a subset of {', '.join(valid)}")
        self.check("calibration_steps", self.calibration_steps >= 1, "must be >= 1")


class AutoOptimizer(PolicyOptimizer):
    """Calibrates each candidate strategy for a few steps, then keeps the fastest.

    ``factory(name, settings)`` builds a candidate over the same evaluators with
    ``settings``: the SGD settings of this optimizer's config that the candidate's config
    has too (a Trainer's factory puts them over its algorithm's defaults for the
    candidate); without a factory, candidates get just those.
    """

    name = "auto"
    config_class = AutoConfig
    learns_on = "varies"

    @classmethod
    def missing_policy_capability(
        cls, policy_class: type, config: Config | None = None
    ) -> str | None:
        """None when at least one candidate can train ``policy_class``, else every
        candidate's reason (the candidates of ``config``, an ``AutoConfig``, else the
        default ones)."""
        candidates = (config if isinstance(config, AutoConfig) else AutoConfig()).candidates
        reasons = {
            n: get_optimizer_class(n).missing_policy_capability(policy_class) for n in candidates
        }
        if not all(reasons.values()):
            return None
        listed = "; ".join(f"{name}: {why}" for name, why in reasons.items())
        return f"none of its candidates can train it ({listed})"

    @classmethod
    def create(
        cls,
        evaluators: EvaluatorSet,
        config: OptimizerConfig,
        factory: OptimizerFactory,
    ) -> PolicyOptimizer:
        """Candidates are built by ``factory`` (with the algorithm's defaults for each)."""
        return cls(evaluators, config=config, factory=factory)

    def __init__(
        self,
        *args: Any,
        factory: OptimizerFactory | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.factory = factory or self._default_factory
        policy = self.local_evaluator.policy
        self.skipped = skipped_candidates(
            self.config.candidates, [type(p) for p in self.local_evaluator.policy_map.values()]
        )
        """Candidates that cannot train the policy → why (never calibrated)."""
        runnable = [n for n in self.config.candidates if n not in self.skipped]
        if not runnable:
            raise ConfigError(
                f"optimizer 'auto': no candidate can train {type(policy).__name__}: "
                + "; ".join(f"'{n}': {why}" for n, why in self.skipped.items())
            )
        weights = policy.get_weights()
        obs_shape = getattr(self.local_evaluator.preprocessor, "shape", (1,))
        self.order = initial_order(
            runnable,
            num_remote_evaluators=len(self.remote_evaluators),
            has_gpu=str(getattr(policy, "device", "cpu")).startswith("cuda"),
            num_sgd_iter=self.config.num_sgd_iter,
            sample_bytes=self.config.train_batch_size * 4 * int(np.prod(obs_shape)),
            model_bytes=sum(np.asarray(w).nbytes for w in weights.values()),
        )
        self.optimizers: dict[str, PolicyOptimizer] = {}
        self.measured: dict[str, list[float]] = {name: [] for name in self.order}
        self.choice: str | None = None
        self.current = self.order[0]

    def _default_factory(self, name: str, settings: Mapping[str, Any]) -> PolicyOptimizer:
        return get_optimizer_class(name)(self.evaluators, config=dict(settings))

    def candidate_settings(self, name: str) -> dict[str, Any]:
        """The settings candidate ``name`` takes from this optimizer's config: the fields
        of the shared config bases (``SGDConfig``, ``OptimizerConfig``) its config has."""
        candidate = get_optimizer_class(name).config_class
        base = SGDConfig if issubclass(candidate, SGDConfig) else OptimizerConfig
        return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(base)}

    def _get(self, name: str) -> PolicyOptimizer:
        if name not in self.optimizers:
            self.optimizers[name] = self.factory(name, self.candidate_settings(name))
        return self.optimizers[name]

    def _next_candidate(self) -> str | None:
        for name in self.order:
            if len(self.measured[name]) < self.config.calibration_steps:
                return name
        return None

    def step(self) -> LearnerStats:
        """One step of the current strategy; during calibration, also measure it."""
        name = self.choice or self._next_candidate()
        if name is None:  # calibration finished: keep the fastest
            name = self.choice = max(self.order, key=self.samples_per_s)
        opt = self._get(name)
        if name != self.current:
            # CRUCIAL: the strategy left behind must not apply stale gradients later.
            self._get(self.current).drop_in_flight()
            opt.push_local_weights(self.global_vars())
            self.current = name
        # the candidate counts on from the global totals (its timestep drives schedules)
        opt.num_steps_sampled, opt.num_steps_trained = (
            self.num_steps_sampled,
            self.num_steps_trained,
        )
        start = time.perf_counter()
        stats = opt.step()
        elapsed = time.perf_counter() - start
        if self.choice is None:
            trained = opt.num_steps_trained - self.num_steps_trained
            self.measured[name].append(trained / max(elapsed, 1e-9))
        self.num_steps_sampled, self.num_steps_trained = (
            opt.num_steps_sampled,
            opt.num_steps_trained,
        )
        self.timers = opt.timers  # the phases of the strategy that ran (learn_throughput)
        self.learner_stats = stats
        return stats

    def samples_per_s(self, name: str) -> float:
        """Learner rows/s of ``name`` over its calibration steps (warm-up excluded)."""
        values = self.measured[name]
        if len(values) > 1:
            values = values[1:]
        return float(np.mean(values)) if values else 0.0

    def stats(self) -> dict[str, Any]:
        """The current strategy's stats, the choice and the calibration measurements."""
        out = dict(self._get(self.current).stats())
        out.update(
            num_steps_sampled=self.num_steps_sampled,
            num_steps_trained=self.num_steps_trained,
            auto_strategy=self.current,
            auto_chosen=self.choice or "",
        )
        for name in self.order:
            out[f"auto_samples_per_s/{name}"] = round(self.samples_per_s(name), 1)
        for name, why in self.skipped.items():
            out[f"auto_skipped/{name}"] = why
        return out

    def save(self) -> dict[str, Any]:
        """Counters, the choice and the measurements (JSON)."""
        return {
            **super().save(),
            "choice": self.choice,
            "current": self.current,
            "measured": {k: list(v) for k, v in self.measured.items()},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of ``save`` (a finished calibration is not repeated)."""
        super().restore(state)
        self.choice = state.get("choice") if state.get("choice") in self.measured else None
        if state.get("current") in self.measured:  # not a candidate skipped here
            self.current = state["current"]
        for name, values in (state.get("measured") or {}).items():
            if name in self.measured:
                self.measured[name] = [float(v) for v in values]

    def push_local_weights(self, global_vars: GlobalVars | None = None) -> None:
        """Hand the local weights to the current strategy (and through it, everywhere)."""
        self._get(self.current).push_local_weights(global_vars)

    def stop(self) -> None:
        """Stop every candidate that was built."""
        for opt in self.optimizers.values():
            opt.stop()


register_optimizer(AutoOptimizer)
