"""``es``: Evolution Strategies, a non-gradient optimizer over PolicyEvaluators.

Salimans et al. 2017, https://arxiv.org/abs/1703.03864, as ported in RLlib (ICML 2018,
§5 and appendix D).  One ``step()``:

    θ = local policy's flat weights; put θ in the object store (the noise table is there)
    repeat rounds until episodes_per_batch episodes (and timesteps_per_batch steps):
        draw offsets i and env seeds; split the pairs evenly over the evaluators
        each evaluator: episodes with θ + sigma ε_i and θ - sigma ε_i  (es/rollouts)
        (num_aggregators > 0: aggregator actors fan out and merge: driver fan-in = A)
    R = returns - return_shift · lengths;  keep the top_directions best pairs (0: all)
    F = centered_ranks(R);  g = 1/n Σ (F⁺ - F⁻) ε_i   (n = number of returns kept)
    θ ← Adam(θ, -g + l2_coeff·θ);  set on the local policy (shipped with the next round)

``return_shift``, ``top_directions``, ``fitness_shaping: reward_std`` and ``update_rule:
sgd`` are ARS's (Mania et al. 2018, https://arxiv.org/abs/1803.07055, V2-t); all off by
default, where the step is the paper's ES.

The scaling of ``g`` and the L2 term are those of the reference code
(openai/evolution-strategies-starter ``es_distributed/es.py``: ``g /= returns_n2.size``;
``optimizer.update(-g + config.l2coeff * theta)``), so the paper's ``l2_coeff`` means
what it meant there.

With no remote evaluators everything runs on the local evaluator, same math.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np

from hierl.evaluators.ray_runtime import ActorGroup
from hierl.evaluators.sampler import EpisodeRecord
from hierl.optimizers.base import OptimizerConfig, PolicyOptimizer, single_policy_stats
from hierl.optimizers.es.aggregator import AggregationTree
from hierl.optimizers.es.noise_table import DEFAULT_NOISE_SIZE, SharedNoiseTable
from hierl.optimizers.es.rollouts import (
    RolloutResult,
    RolloutTask,
    close_episode_runner,
    evaluate_perturbations,
    merge_results,
)
from hierl.optimizers.es.updates import (
    FlatAdam,
    centered_ranks,
    es_gradient,
    reward_std_scaled,
    top_directions,
)
from hierl.optimizers.registry import register_optimizer
from hierl.policy_graph import FlatWeights, LearnerStats

SHAPING = {
    "centered_ranks": centered_ranks,
    "reward_std": reward_std_scaled,
    "none": lambda returns: returns,
}
"""``fitness_shaping`` → the function from ``(P, 2)`` returns to update weights."""


@dataclasses.dataclass
class ESOptimizerConfig(OptimizerConfig):
    """Settings of the ``es`` optimizer (defaults: RLlib paper appendix D / Salimans).

    The defaults are the paper's, and so is their meaning: ``g`` is scaled as in the
    reference code (``es/updates`` module docstring), which ``l2_coeff`` is relative to.
    """

    noise_stdev: float = 0.02
    """``sigma``: standard deviation of the parameter perturbations."""
    stepsize: float = 0.01
    """Adam step size."""
    l2_coeff: float = 0.005
    """L2 coefficient: Adam descends ``-g + l2_coeff · θ`` with ``g = 1/n Σ (F⁺ - F⁻) ε_i``
    (not divided by sigma), as in the reference ``es_distributed/es.py``."""
    episodes_per_batch: int = 5000
    """Perturbed episodes per update (rounded up to whole antithetic pairs)."""
    timesteps_per_batch: int = 0
    """Also play on (in further rounds) until this many env steps (0: no minimum)."""
    eval_prob: float = 0.003
    """Chance per pair of one extra unperturbed episode (reported as ``eval_return_mean``)."""
    fitness_shaping: Literal["centered_ranks", "reward_std", "none"] = "centered_ranks"
    """Returns → weights: centered ranks in [-0.5, 0.5] (the paper's), the returns divided
    by their standard deviation (ARS's ``sigma_R``), or the raw returns."""
    return_shift: float = 0.0
    """Subtracted per env step from the perturbed episodes' returns before ``top_directions``
    and shaping: ARS's survival-bonus shift (1.0 on Hopper and Walker2d, their per-step
    alive bonus), which stops standing still from being the easy optimum.  Training only:
    evaluation returns and the reported episode rewards stay the env's."""
    top_directions: int = 0
    """ARS's ``b``: update with the ``b`` pairs whose better member returned most (after the
    shift), shaping over those ``2b`` returns only (0: every pair, the paper's ES)."""
    update_rule: Literal["adam", "sgd"] = "adam"
    """``adam``: Adam descends ``-g + l2_coeff · θ`` (the paper's).  ``sgd``: ARS's plain step
    ``θ ← θ + stepsize · (g - l2_coeff · θ)``; ``g`` divides by ``2b`` where ARS divides
    by ``b``, so ARS's step size ``alpha`` is ``stepsize = 2 alpha`` here."""
    noise_size: int = DEFAULT_NOISE_SIZE
    """Entries of the shared float32 noise table (must exceed the parameter count)."""
    noise_seed: int = 123
    """Seed of the noise table."""
    max_episode_steps: int = 0
    """Cut every episode after this many steps (0: the env's own time limit)."""
    num_aggregators: int = 0
    """Aggregator actors between driver and evaluators (0: the driver gathers directly)."""
    num_cpus_per_aggregator: float = 0.1
    """CPUs reserved by each aggregator actor."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("noise_stdev", self.noise_stdev > 0, "must be > 0")
        self.check("stepsize", self.stepsize > 0, "must be > 0")
        self.check("l2_coeff", self.l2_coeff >= 0, "must be >= 0")
        self.check("episodes_per_batch", self.episodes_per_batch >= 2, "must be >= 2")
        self.check("timesteps_per_batch", self.timesteps_per_batch >= 0, "must be >= 0")
        self.check("eval_prob", 0.0 <= self.eval_prob <= 1.0, "must be in [0, 1]")
        self.check("noise_size", self.noise_size >= 1, "must be >= 1")
        self.check("max_episode_steps", self.max_episode_steps >= 0, "must be >= 0")
        self.check("return_shift", math.isfinite(self.return_shift), "must be a finite number")
        pairs = math.ceil(self.episodes_per_batch / 2)
        self.check(
            "top_directions",
            0 <= self.top_directions <= pairs,
            f"must be in [0, {pairs}] (the pairs of episodes_per_batch; 0: all)",
        )
        self.check("num_aggregators", self.num_aggregators >= 0, "must be >= 0")
        self.check("num_cpus_per_aggregator", self.num_cpus_per_aggregator >= 0, ">= 0")
        self.check("adam_beta1", 0.0 <= self.adam_beta1 < 1.0, "must be in [0, 1)")
        self.check("adam_beta2", 0.0 <= self.adam_beta2 < 1.0, "must be in [0, 1)")


@register_optimizer
class ESOptimizer(PolicyOptimizer):
    """Antithetic ES with centered ranks and flat Adam; see the module docstring.

    ``stats()`` adds ``driver_fan_in`` (results the driver waited for per round of the
    last step), ``num_aggregators``, ``noise_stdev``, ``grad_norm``, ``update_ratio``
    (``|Δθ| / |θ|``), ``eval_return_mean`` and ``eval_episodes`` (of the last step).
    """

    name = "es"
    config_class = ESOptimizerConfig
    required_policy_protocols = (FlatWeights,)

    learns_on = "none"
    learns_from = "returns"

    @classmethod
    def check_config(cls, config: ESOptimizerConfig, num_evaluators: int) -> None:
        """At most one aggregator per remote evaluator."""
        config.check(
            "num_aggregators",
            config.num_aggregators <= num_evaluators,
            f"must be in [0, num_evaluators={num_evaluators}]",
        )

    @classmethod
    def actor_groups(cls, config: ESOptimizerConfig, num_evaluators: int) -> list[ActorGroup]:
        """The aggregator actors (only with remote evaluators)."""
        if not num_evaluators:
            return []
        return [
            ActorGroup.from_settings(
                "ES aggregator", config, "num_aggregators", "num_cpus_per_aggregator"
            )
        ]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        policy = self.local_evaluator.policy
        if not isinstance(policy, FlatWeights):
            raise TypeError(f"'es' needs get/set_flat_weights (FlatWeights), not {type(policy)}")
        self.dim = int(policy.get_flat_weights().size)
        self.noise = SharedNoiseTable(cfg.noise_size, cfg.noise_seed)
        self.noise.check_dim(self.dim)
        self.adam = FlatAdam(self.dim, cfg.stepsize, cfg.adam_beta1, cfg.adam_beta2)
        self.step_seed = int(np.random.SeedSequence(self.seed).entropy)
        """Seeds the offsets and env seeds of every step (with the update count)."""
        self.check_config(cfg, len(self.remote_evaluators))
        self.tree: AggregationTree | None = None
        if self.remote_evaluators:
            self.noise.put()
            if cfg.num_aggregators:
                self.tree = AggregationTree(cfg.num_aggregators, cfg.num_cpus_per_aggregator)
        self._episodes: list[EpisodeRecord] = []
        self.last_stats: dict[str, float] = {"driver_fan_in": 0, "noise_stdev": cfg.noise_stdev}

    def _tasks(self, rng: np.random.Generator, pairs: int, workers: int, evals: bool) -> list:
        """Split ``pairs`` evenly over ``workers`` (earlier ones get the remainder)."""
        cfg, tasks = self.config, []
        for w in range(workers):
            n = pairs // workers + (w < pairs % workers)
            n_eval = int(rng.binomial(n, cfg.eval_prob)) if evals and cfg.eval_prob else 0
            tasks.append(
                RolloutTask(
                    noise_indices=self.noise.sample_indices(rng, self.dim, n),
                    env_seeds=rng.integers(0, 2**31 - 1, size=n),
                    eval_seeds=rng.integers(0, 2**31 - 1, size=n_eval),
                    noise_stdev=cfg.noise_stdev,
                    max_episode_steps=cfg.max_episode_steps,
                )
            )
        return tasks

    def _run_round(self, tasks: list[RolloutTask], theta: np.ndarray) -> RolloutResult:
        """Evaluate ``tasks`` (one per healthy remote evaluator, or one locally)."""
        if not self.remote_evaluators:
            self.last_stats["driver_fan_in"] = 1
            return evaluate_perturbations(self.local_evaluator, self.noise.noise, theta, tasks[0])
        import ray

        actors, theta_ref = self.evaluators.healthy_evaluators(), ray.put(theta)
        if self.tree is None:
            by_actor = dict(zip(actors, tasks, strict=True))
            done = self.evaluators.call_remotes(
                lambda e: e.apply.remote(
                    evaluate_perturbations, self.noise.ref, theta_ref, by_actor[e]
                )
            )
            self.last_stats["driver_fan_in"] = len(actors)
            return merge_results([r for _, r in done])
        result, self.last_stats["driver_fan_in"] = self.tree.run(
            self.evaluators, actors, tasks, {"noise": self.noise.ref, "theta": theta_ref}
        )
        return result

    def step(self) -> LearnerStats:
        """Evaluate antithetic perturbations, then one Adam update of the flat weights."""
        cfg = self.config
        policy = self.local_evaluator.policy
        theta = policy.get_flat_weights()
        # CRUCIAL: the step's randomness is a function of (seed, update count), so a
        # restored checkpoint continues with exactly the offsets it would have drawn.
        rng = np.random.default_rng([self.step_seed, self.num_updates])
        pairs, results = math.ceil(cfg.episodes_per_batch / 2), []
        with self.timer("sample"):
            while True:
                workers = max(1, len(self.evaluators.healthy_evaluators()))
                tasks = self._tasks(rng, pairs, workers, evals=not results)
                results.append(self._run_round(tasks, theta))
                batch = merge_results(results)
                steps, missing = batch.num_steps, cfg.timesteps_per_batch - batch.num_steps
                if missing <= 0 or batch.lengths.size == 0:
                    break
                per_pair = max(1.0, 2 * batch.lengths.mean())
                pairs = max(workers, math.ceil(missing / per_pair))
        self.num_steps_sampled += steps
        self._episodes.extend(batch.episode_records())
        if not self.remote_evaluators:
            # In-process there is no filter sync: merge the step's observations here.
            local = self.local_evaluator
            for pid, buffer in local.get_filters(flush_after=True).items():
                local.filters[pid].apply_buffer(buffer)
        with self.timer("learn"):
            stats = self._update(policy, theta, batch)
        self.num_steps_trained += int(batch.lengths.sum())
        evals = batch.eval_returns
        self.last_stats.update(stats, eval_episodes=int(evals.size))
        self.last_stats["eval_return_mean"] = float(evals.mean()) if evals.size else math.nan
        self.learner_stats = single_policy_stats(stats)
        return self.learner_stats

    def _update(self, policy: Any, theta: np.ndarray, batch: RolloutResult) -> dict[str, float]:
        cfg = self.config
        if batch.returns.size == 0:
            return {}
        # CRUCIAL: the shift changes the training signal only (batch.returns, reported as
        # episode rewards, stay the env's).
        returns = batch.returns - cfg.return_shift * batch.lengths
        keep = top_directions(returns, cfg.top_directions)
        returns = returns[keep]
        shaped = SHAPING[cfg.fitness_shaping](returns)
        noise = self.noise.rows(batch.noise_indices[keep], self.dim)
        g = es_gradient(shaped[:, 0], shaped[:, 1], noise)
        if cfg.update_rule == "sgd":
            new_theta = (theta + cfg.stepsize * (g - cfg.l2_coeff * theta)).astype(theta.dtype)
        else:
            # CRUCIAL: Adam descends, ES ascends: pass -g, plus the L2 term's gradient,
            # exactly ``optimizer.update(-g + config.l2coeff * theta)`` of the reference es.py.
            new_theta = self.adam.step(theta, -g + cfg.l2_coeff * theta)
        policy.set_flat_weights(new_theta)
        self.num_updates += 1
        theta_norm = float(np.linalg.norm(theta))
        return {
            "grad_norm": float(np.linalg.norm(g)),
            "update_ratio": float(np.linalg.norm(new_theta - theta)) / max(theta_norm, 1e-12),
            "weights_norm": float(np.linalg.norm(new_theta)),
            "noise_stdev": cfg.noise_stdev,
            "perturbed_return_mean": float(batch.returns.mean()),
            "num_pairs": int(batch.returns.shape[0]),
            "num_pairs_used": int(keep.size),
        }

    def collect_episodes(self) -> list[EpisodeRecord]:
        """The local evaluator's episodes and the perturbed episodes played since the last
        call: those reach the driver with the step's results (through the aggregators
        when there are any), so no call per remote evaluator is needed."""
        out, self._episodes = self._episodes, []
        return self.local_evaluator.get_metrics() + out

    def stats(self) -> dict[str, float]:
        """Base counters and timers plus the last step's ES figures."""
        out = super().stats()
        out.update(self.last_stats)
        out["num_aggregators"] = len(self.tree.aggregators) if self.tree else 0
        return out

    def save(self) -> dict[str, Any]:
        """Counters, the Adam moments and step counter, and the step seed."""
        return {**super().save(), "adam": self.adam.get_state(), "seed": str(self.step_seed)}

    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of ``save``."""
        super().restore(state)
        self.adam.set_state(state["adam"])
        self.step_seed = int(state["seed"])

    def stop(self) -> None:
        """Kill the aggregators and close the local evaluator's ES env."""
        if self.tree is not None:
            self.tree.stop()
            self.tree = None
        close_episode_runner(self.local_evaluator)
