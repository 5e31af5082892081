"""PPO-ES and A3C-ES: an evolution-strategies loop over a population of whole trainers.

RLlib (ICML 2018) §3.4 and the arXiv version's appendix E.2: stock, unmodified trainers
(PPO or A3C, each with its own remote evaluators: two levels of nesting) run as Ray
actors; each ES round trains them for a time budget with ``ray.wait`` over their
``train()`` calls, ranks them by return, and the bottom half copies the weights of the
top half plus Gaussian noise.  Nothing in PPO or A3C knows about it.

Fault tolerance (the helpers at the end of ``PopulationTrainer``): a member whose actor
dies (or whose env error escapes it) is recreated with the same index and config and
given the complete state (weights, optimizer moments, filters, counters) of the best
surviving member, then rejoins the round; at most ``max_member_restarts`` times in all.
Each member recovers its own evaluators.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from hierl.algorithms.a2c import A3CTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.resources import start_trainer_actor, stop_trainer_actor, trainer_groups
from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer
from hierl.checkpoint import CheckpointError
from hierl.evaluators.evaluator_set import is_evaluator_failure
from hierl.evaluators.ray_runtime import ActorGroup, ensure_ray
from hierl.evaluators.restarts import RestartBudget
from hierl.policy_graph import Weights

logger = logging.getLogger(__name__)


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
    this config; member i gets ``seed * population_size + i``).  The default fits 4
    members in 2 CPUs."""
    round_time_s: float = 60.0
    """Each round keeps calling ``train()`` on every member until this many seconds
    passed (each member trains at least once per round)."""
    max_member_iterations_per_round: int = 0
    """Also end a member's round after this many ``train()`` calls (0: time only)."""
    noise_stdev: float = 0.01
    """Std of the Gaussian noise added to every copied weight."""
    copy_probability: float = 1.0
    """Chance that a bottom-half member copies its top-half partner (the paper: 0.5)."""
    max_member_restarts: int = 10
    """Member actors recreated after a failure, in all, before one ends training."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("population_size", self.population_size >= 2, "must be >= 2")
        self.check("round_time_s", self.round_time_s >= 0, "must be >= 0")
        self.check(
            "max_member_iterations_per_round", self.max_member_iterations_per_round >= 0, ">= 0"
        )
        self.check("noise_stdev", self.noise_stdev >= 0, "must be >= 0")
        self.check("copy_probability", 0 <= self.copy_probability <= 1, "must be in [0, 1]")
        self.check("max_member_restarts", self.max_member_restarts >= 0, "must be >= 0")


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


class MemberFailureError(RuntimeError):
    """A member failure that ends training (``max_member_restarts`` used up, or no
    surviving member to copy); the last failure's error is chained as ``__cause__``."""


class PopulationTrainer(BaseTrainer):
    """ES over ``population_size`` stock ``member_class`` trainers (see module doc)."""

    config_class = PopulationConfig
    member_class: ClassVar[type[BaseTrainer]]

    def __init__(self, config: PopulationConfig | dict | None = None, env: Any = None):
        super().__init__(config, env)  # fails fast if the members can never all be placed
        cfg = self.config
        self.member_configs = [
            self.member_class.config_class.from_dict(self._member_dict(cfg, i))
            for i in range(cfg.population_size)
        ]
        ensure_ray(cfg.ray_address)  # started by check_resources already, unless it skipped
        self.members = [start_trainer_actor(self.member_class, c) for c in self.member_configs]
        self.timesteps_total = 0
        self.rng = np.random.default_rng(cfg.seed)
        self.scores = [float("nan")] * cfg.population_size
        """Each member's latest ``episode_reward_mean`` (picks the state a new member gets)."""
        self.restarts = RestartBudget(
            cfg.max_member_restarts, "max_member_restarts", MemberFailureError
        )
        """Member actors recreated, by member index, against ``max_member_restarts``."""
        self.member_failures: list[tuple[int, str]] = []
        """``(member index, error text)`` of every failure handled, oldest first."""

    @property
    def num_member_restarts(self) -> int:
        """Member actors recreated so far."""
        return self.restarts.made

    @staticmethod
    def _member_dict(cfg: PopulationConfig, i: int) -> dict[str, Any]:
        # CRUCIAL: not seed + i: populations of consecutive seeds (learning.py's seeds,
        # Tune's trials) would share all members but one.
        seed = None if cfg.seed is None else cfg.seed * cfg.population_size + i
        return {**cfg.member_config, "env": cfg.env, "env_config": cfg.env_config, "seed": seed}

    @classmethod
    def actor_groups(cls, config: PopulationConfig) -> list[ActorGroup]:
        """The driver, then every member's actors: its driver (a Ray actor), evaluators
        and other actors, ``population_size`` times (the members differ in their seeds
        only)."""
        n = config.population_size
        member = cls.member_class.config_class.from_dict(cls._member_dict(config, 0))
        driver, *actors = trainer_groups(cls.member_class, member)
        label = f"{cls.member_class.name or cls.member_class.__name__} member"

        def in_member_config(setting: str) -> str:
            return setting and f"member_config.{setting}"

        # CRUCIAL: as in start_trainer_actor, a member driver reserving nothing still
        # takes a token CPU share (Ray rejects empty bundles).
        groups = [
            *super().actor_groups(config),
            ActorGroup(
                f"{label} driver",
                n,
                driver.bundle or {"CPU": 0.01},
                "population_size",
                {r: in_member_config(s) for r, s in driver.share_settings.items()},
            ),
        ]
        for g in actors:
            groups.append(
                ActorGroup(
                    f"{label} {g.what}",
                    g.count * n,
                    g.bundle,
                    in_member_config(g.count_setting),
                    {r: in_member_config(s) for r, s in g.share_settings.items()},
                )
            )
        return groups

    def _get(self, refs: Any) -> Any:
        import ray

        return ray.get(refs, timeout=self.config.sample_timeout_s)

    def train(self) -> dict[str, Any]:
        """One ES round: train every member for the time budget, then exploit/explore."""
        cfg, start, steps_before = self.config, time.perf_counter(), self.timesteps_total
        n, limit = len(self.members), cfg.max_member_iterations_per_round
        iterations, last = [0] * n, [{}] * n

        def wants_more(i: int) -> bool:  # every member trains at least once per round
            more = limit in (0, None) or iterations[i] < limit
            return iterations[i] == 0 or (more and time.perf_counter() - start < cfg.round_time_s)

        pending = {self.members[i][0].train.remote(): i for i in range(n)}
        while pending:
            i, result = self._next_result(pending)  # a failed member is recreated in it
            if result is not None:
                last[i], iterations[i] = result, iterations[i] + 1
                self.scores[i] = result.get("episode_reward_mean", float("nan"))
                self.timesteps_total += int(result.get("timesteps_this_iter", 0))
            if wants_more(i):
                pending[self.members[i][0].train.remote()] = i
        ranked = _ranked(self.scores)  # CRUCIAL: NaN (no finished episode yet) ranks lowest
        mid = len(ranked) // 2
        copies, copied_bytes = [], 0
        for winner, loser in zip(ranked[len(ranked) - mid :], ranked[:mid], strict=True):
            if self.rng.random() < cfg.copy_probability:
                seed = int(self.rng.integers(2**31))
                copied_bytes += self._copy_member(winner, loser, seed)
                copies.append({"winner": winner, "loser": loser, "seed": seed})
        best, steps = ranked[-1], self.timesteps_total - steps_before
        result = {
            # the best member's greedy evaluation too, on rounds whose last iteration of
            # it evaluated (member_config's evaluation_interval)
            **{k: v for k, v in last[best].items() if k.startswith(("episode_", "evaluation/"))},
            "timesteps_this_iter": steps,
            "timesteps_total": self.timesteps_total,
            "sample_throughput": steps / max(time.perf_counter() - start, 1e-9),
            "population/best_member": best,
            "population/copies": copies,
            "population/bytes_copied": copied_bytes,
            "population/num_member_restarts": self.num_member_restarts,
        }
        for i in range(n):
            result[f"population/episode_reward_mean/{i}"] = self.scores[i]
            result[f"population/iterations/{i}"] = iterations[i]
            if "evaluation/episode_reward_mean" in last[i]:
                result[f"population/evaluation_reward_mean/{i}"] = last[i][
                    "evaluation/episode_reward_mean"
                ]
        return self.finish_iteration(result, start)

    @property
    def best_member(self) -> int:
        """The member that represents the population: the best by latest score, as a
        round's ``population/best_member`` (the last on ties, also before any finished
        episode)."""
        return _ranked(self.scores)[-1]

    def _copy_member(self, winner: int, loser: int, seed: int) -> int:
        """Exploit and explore: member ``loser`` gets ``winner``'s weights plus noise
        from ``seed`` and its observation filters; the bytes of the arrays copied."""
        weights = self._call(winner, "get_weights")
        # CRUCIAL: the filters too: under its own observation statistics the loser's
        # copy of the weights would compute another function than the winner's.
        filters = self._call(winner, "get_filters")
        self._call(loser, "set_weights", perturbed(weights, self.config.noise_stdev, seed))
        self._call(loser, "set_filters", filters)
        return _nbytes(weights) + _nbytes(filters)

    def get_state(self) -> dict[str, Any]:
        """Every member's complete state, each one's latest score, the best member (who
        acts for the checkpoint: ``acting_checkpoint``), the loop's counters and RNG."""
        members = self._call_all("get_state")
        return {
            "members": {str(i): s for i, s in enumerate(members)},
            "scores": [float(x) for x in self.scores],
            "best_member": self.best_member,
            "counters": {
                "iteration": self.iteration,
                "time_total_s": self.time_total_s,
                "timesteps_total": self.timesteps_total,
                "num_member_restarts": self.restarts.get_state(),
            },
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``get_state``."""
        self._call_all("set_state", [(state["members"][str(i)],) for i in range(len(self.members))])
        counters = state["counters"]
        self.iteration = int(counters["iteration"])
        self.time_total_s = float(counters["time_total_s"])
        self.timesteps_total = int(counters["timesteps_total"])
        self.restarts.set_state(counters.get("num_member_restarts", 0))
        self.rng.bit_generator.state = state["rng"]
        scores = state.get("scores")  # absent in checkpoints older than the record
        if scores is not None:
            self.scores = _checked_scores(scores, len(self.members))

    @classmethod
    def acting_checkpoint(
        cls, config: dict[str, Any], state: Mapping[str, Any]
    ) -> tuple[type[BaseTrainer], dict[str, Any], Mapping[str, Any]]:
        """The best member (recorded as ``best_member``: the best latest score when the
        checkpoint was written) acts: its own config and complete state."""
        if "best_member" not in state:
            raise CheckpointError(
                f"this {cls.name} checkpoint records no best member (it was written before "
                "checkpoints named one); train it one more round to record one (hierl "
                "train --resume RUN_DIR --stop training_iteration=N+1)"
            )
        best = state["best_member"]
        members = state["members"]
        if not isinstance(best, int) or str(best) not in members:
            raise CheckpointError(
                f"this {cls.name} checkpoint names best member {best!r}, but holds members "
                f"{sorted(members, key=str)}"
            )
        stored = {k: v for k, v in config.items() if k != "env_callable"}
        typed = cls.config_class.from_dict(stored)
        return cls.member_class, cls._member_dict(typed, best), members[str(best)]

    def stop(self) -> None:
        """Stop every member and release its reservation."""
        for actor, pg in self.members:
            stop_trainer_actor(actor, pg)
        self.members = []
        super().stop()

    # -- member failures -----------------------------------------------------------------
    def recreate_member(self, index: int, error: BaseException | None = None) -> Any:
        """Replace member ``index`` (its actor died or failed with ``error``): stop it,
        start a new actor with the same config and give it the complete state of the
        best surviving member (by latest ``episode_reward_mean``).  Returns the new actor.

        Raises MemberFailureError once ``max_member_restarts`` recreations were made.
        """
        self.restarts.check(f"member {index}", error)
        stop_trainer_actor(*self.members[index], timeout_s=10.0)  # tolerates a dead actor
        self.members[index] = start_trainer_actor(self.member_class, self.member_configs[index])
        source, state = self._best_surviving_state(exclude=index)
        # CRUCIAL: the whole state (weights, Adam moments, filters, counters), not just the
        # weights: fresh optimizer moments or observation filters would change what the
        # copied weights compute.  Its evaluators keep member ``index``'s own env seeds.
        self._get(self.members[index][0].set_state.remote(state))
        self.scores[index] = self.scores[source]  # a copy of the source until it trains
        self.restarts.record(index)
        logger.warning("member %d recreated with the state of member %d", index, source)
        return self.members[index][0]

    def _best_surviving_state(self, exclude: int) -> tuple[int, dict[str, Any]]:
        """``(i, get_state())`` of the best-scoring member i != ``exclude`` that answers."""
        others = sorted(
            (i for i in range(len(self.members)) if i != exclude),
            key=lambda i: _rank_key(self.scores[i]),
            reverse=True,
        )
        error: BaseException | None = None
        for i in others:  # one that fails too is recreated when its own call fails
            try:
                return i, self._get(self.members[i][0].get_state.remote())
            except Exception as e:
                if not is_evaluator_failure(e):
                    raise
                error = e
        raise MemberFailureError(
            f"no surviving member to copy into recreated member {exclude}; the last error: {error}"
        ) from error

    def _recover(self, index: int, error: BaseException) -> Any:
        """Recreate member ``index`` if ``error`` is a member failure; else re-raise it."""
        if not is_evaluator_failure(error):
            raise error
        self.member_failures.append((index, f"{type(error).__name__}: {error}"))
        logger.warning("member %d failed: %s: %s", index, type(error).__name__, error)
        return self.recreate_member(index, error)

    def _next_result(self, pending: dict[Any, int]) -> tuple[int, dict[str, Any] | None]:
        """Pop the first finished ``train()`` of ``pending`` (ref → member index):
        ``(index, result)``, or ``(index, None)`` after its member failed and was
        recreated (the failed call does not count as one of its iterations)."""
        import ray

        ready, _ = ray.wait(list(pending), timeout=self.config.sample_timeout_s)
        if not ready:
            raise TimeoutError(
                f"no member finished train() within sample_timeout_s="
                f"{self.config.sample_timeout_s}s (waiting on members "
                f"{sorted(pending.values())})"
            )
        index = pending.pop(ready[0])
        try:
            return index, self._get(ready[0])
        except Exception as error:
            self._recover(index, error)
            return index, None

    def _call(self, index: int, method: str, *args: Any) -> Any:
        """Member ``index``'s ``method(*args)``; see ``_get_member``."""
        ref = getattr(self.members[index][0], method).remote(*args)
        return self._get_member(index, ref, method, args)

    def _call_all(self, method: str, args: list[tuple] | None = None) -> list[Any]:
        """``method(*args[i])`` on every member i in parallel; see ``_get_member``."""
        args = args or [()] * len(self.members)
        refs = [getattr(a, method).remote(*args[i]) for i, (a, _) in enumerate(self.members)]
        return [self._get_member(i, ref, method, args[i]) for i, ref in enumerate(refs)]

    def _get_member(self, index: int, ref: Any, method: str, args: tuple) -> Any:
        """The value of ``ref`` (member ``index``'s ``method(*args)``); if the member
        failed, the value of the same call on the member recreated in its place."""
        try:
            return self._get(ref)
        except Exception as error:
            actor = self._recover(index, error)
            return self._get(getattr(actor, method).remote(*args))


def _checked_scores(scores: Any, n: int) -> list[float]:
    """A checkpoint's recorded member scores as floats, one per member."""
    if not isinstance(scores, list) or len(scores) != n:
        raise ValueError(f"'scores' must be a list of {n} numbers, got {scores!r}")
    return [float(x) for x in scores]


def _ranked(scores: list[float]) -> list[int]:
    """Member indices from the worst score to the best (ties in index order)."""
    return sorted(range(len(scores)), key=lambda i: _rank_key(scores[i]))


def _nbytes(tree: Any) -> int:
    """The bytes of the numpy arrays in a nested dict (weights, filter statistics)."""
    if isinstance(tree, dict):
        return sum(_nbytes(v) for v in tree.values())
    return int(tree.nbytes) if isinstance(tree, np.ndarray) else 0


def _rank_key(score: float) -> float:
    """Sort key of a member's score: NaN (no finished episode yet) lowest."""
    return -np.inf if np.isnan(score) else score


class PPOESTrainer(PopulationTrainer):
    """PPO-ES: a population of stock PPO trainers under an ES loop."""

    name = "PPO_ES"
    member_class = PPOTrainer


class A3CESTrainer(PopulationTrainer):
    """A3C-ES: a population of stock A3C trainers under an ES loop."""

    name = "A3C_ES"
    member_class = A3CTrainer
