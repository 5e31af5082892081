"""PPO-ES and A3C-ES: an evolution-strategies loop over a population of whole trainers.

RLlib (ICML 2018) §3.4 and the arXiv version's appendix E.2: stock, unmodified trainers
(PPO or A3C, each with its own remote evaluators: two levels of nesting) run as Ray
actors; each ES round trains them for a time budget with ``ray.wait`` over their
``train()`` calls, ranks them by return, and the bottom half copies the weights of the
top half plus Gaussian noise.  Nothing in PPO or A3C knows about it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar

import numpy as np

from hierl.algorithms.a2c import A3CTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.resources import start_trainer_actor, stop_trainer_actor, trainer_bundles
from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer
from hierl.evaluators.ray_runtime import ensure_ray
from hierl.policy_graph import Weights


@dataclasses.dataclass
class PopulationConfig(BaseConfig):
    """Settings of the ES loop; ``member_config`` configures every member trainer."""

    num_cpus_for_driver: float = 0.0
    """CPUs the loop's own process reserves (it only waits on its members)."""
    population_size: int = 4
    """Member trainers, each a Ray actor with its own evaluators."""
    member_config: dict = dataclasses.field(
        default_factory=lambda: {
            "num_evaluators": 1,
            "num_cpus_per_evaluator": 0.25,
            "num_cpus_for_driver": 0.25,
        }
    )
    """The members' own algorithm config (``env``, ``env_config`` and ``seed`` come from
    this config; member i gets ``seed + i``).  The default fits 4 members in 2 CPUs."""
    round_time_s: float = 60.0
    """Each round keeps calling ``train()`` on every member until this many seconds
    passed (each member trains at least once per round)."""
    max_member_iterations_per_round: int = 0
    """Also end a member's round after this many ``train()`` calls (0: time only)."""
    noise_stdev: float = 0.01
    """Std of the Gaussian noise added to every copied weight."""
    copy_probability: float = 1.0
    """Chance that a bottom-half member copies its top-half partner (the paper: 0.5)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("population_size", self.population_size >= 2, "must be >= 2")
        self.check("round_time_s", self.round_time_s >= 0, "must be >= 0")
        self.check(
            "max_member_iterations_per_round", self.max_member_iterations_per_round >= 0, ">= 0"
        )
        self.check("noise_stdev", self.noise_stdev >= 0, "must be >= 0")
        self.check("copy_probability", 0 <= self.copy_probability <= 1, "must be in [0, 1]")


def perturbed(weights: dict[str, Weights], noise_stdev: float, seed: int) -> dict[str, Weights]:
    """``weights`` plus ``N(0, noise_stdev²)`` noise from ``seed``, in each array's dtype."""
    rng = np.random.default_rng(seed)
    return {
        pid: {
            name: (w + noise_stdev * rng.standard_normal(np.shape(w))).astype(np.asarray(w).dtype)
            for name, w in policy.items()
        }
        for pid, policy in weights.items()
    }


class PopulationTrainer(BaseTrainer):
    """ES over ``population_size`` stock ``member_class`` trainers (see module doc)."""

    config_class = PopulationConfig
    member_class: ClassVar[type[BaseTrainer]]

    def __init__(self, config: PopulationConfig | dict | None = None, env: Any = None):
        super().__init__(config, env)
        cfg = self.config
        self.member_configs = [
            self.member_class.config_class.from_dict(self._member_dict(cfg, i))
            for i in range(cfg.population_size)
        ]
        ensure_ray(cfg.ray_address)
        self.members = [start_trainer_actor(self.member_class, c) for c in self.member_configs]
        self.timesteps_total = 0
        self.rng = np.random.default_rng(cfg.seed)

    @staticmethod
    def _member_dict(cfg: PopulationConfig, i: int) -> dict[str, Any]:
        seed = None if cfg.seed is None else cfg.seed + i
        return {**cfg.member_config, "env": cfg.env, "env_config": cfg.env_config, "seed": seed}

    @classmethod
    def extra_actor_bundles(cls, config: PopulationConfig) -> list[dict[str, float]]:
        """Every member's bundles (its driver, evaluators and other actors)."""
        bundles = []
        for i in range(config.population_size):
            member = cls.member_class.config_class.from_dict(cls._member_dict(config, i))
            bundles += [b or {"CPU": 0.01} for b in trainer_bundles(cls.member_class, member)]
        return bundles

    def _get(self, refs: Any) -> Any:
        import ray

        return ray.get(refs, timeout=self.config.sample_timeout_s)

    def train(self) -> dict[str, Any]:
        """One ES round: train every member for the time budget, then exploit/explore."""
        import ray

        cfg, start, steps_before = self.config, time.perf_counter(), self.timesteps_total
        actors = [actor for actor, _ in self.members]
        pending = {a.train.remote(): i for i, a in enumerate(actors)}
        iterations, last = [0] * len(actors), [{}] * len(actors)
        while pending:
            [ref], _ = ray.wait(list(pending), timeout=cfg.sample_timeout_s)
            i = pending.pop(ref)
            last[i], iterations[i] = self._get(ref), iterations[i] + 1
            self.timesteps_total += int(last[i].get("timesteps_this_iter", 0))
            more = cfg.max_member_iterations_per_round in (0, None) or (
                iterations[i] < cfg.max_member_iterations_per_round
            )
            if more and time.perf_counter() - start < cfg.round_time_s:
                pending[actors[i].train.remote()] = i
        scores = [r.get("episode_reward_mean", float("nan")) for r in last]
        # CRUCIAL: NaN (no finished episode yet) ranks lowest, not arbitrarily.
        ranked = sorted(
            range(len(actors)), key=lambda i: -np.inf if np.isnan(scores[i]) else scores[i]
        )
        mid = len(ranked) // 2
        copies = []
        for winner, loser in zip(ranked[len(ranked) - mid :], ranked[:mid], strict=True):
            if self.rng.random() < cfg.copy_probability:
                seed = int(self.rng.integers(2**31))
                weights = self._get(actors[winner].get_weights.remote())
                new = perturbed(weights, cfg.noise_stdev, seed)
                self._get(actors[loser].set_weights.remote(new))
                copies.append({"winner": winner, "loser": loser, "seed": seed})
        best, steps = ranked[-1], self.timesteps_total - steps_before
        result = {
            **{k: v for k, v in last[best].items() if k.startswith("episode_")},
            "timesteps_this_iter": steps,
            "timesteps_total": self.timesteps_total,
            "sample_throughput": steps / max(time.perf_counter() - start, 1e-9),
            "population/best_member": best,
            "population/copies": copies,
        }
        for i, score in enumerate(scores):
            result[f"population/episode_reward_mean/{i}"] = score
            result[f"population/iterations/{i}"] = iterations[i]
        return self.finish_iteration(result, start)

    def get_state(self) -> dict[str, Any]:
        """Every member's complete state plus the loop's counters and RNG."""
        members = self._get([actor.get_state.remote() for actor, _ in self.members])
        return {
            "members": {str(i): s for i, s in enumerate(members)},
            "counters": {
                "iteration": self.iteration,
                "time_total_s": self.time_total_s,
                "timesteps_total": self.timesteps_total,
            },
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``get_state``."""
        refs = [
            a.set_state.remote(state["members"][str(i)]) for i, (a, _) in enumerate(self.members)
        ]
        self._get(refs)
        counters = state["counters"]
        self.iteration = int(counters["iteration"])
        self.time_total_s = float(counters["time_total_s"])
        self.timesteps_total = int(counters["timesteps_total"])
        self.rng.bit_generator.state = state["rng"]

    def stop(self) -> None:
        """Stop every member and release its reservation."""
        for actor, pg in self.members:
            stop_trainer_actor(actor, pg)
        self.members = []


class PPOESTrainer(PopulationTrainer):
    """PPO-ES: a population of stock PPO trainers under an ES loop."""

    name = "PPO_ES"
    member_class = PPOTrainer


class A3CESTrainer(PopulationTrainer):
    """A3C-ES: a population of stock A3C trainers under an ES loop."""

    name = "A3C_ES"
    member_class = A3CTrainer
