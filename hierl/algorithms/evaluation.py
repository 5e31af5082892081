"""Evaluation during training: whole episodes with the current weights, greedy by default.

Every ``evaluation_interval`` iterations the trainer hands its weights and observation
filters to a separate set of evaluation evaluators (in the driver with
``evaluation_num_evaluators=0``, else Ray actors) that play ``evaluation_num_episodes``
episodes from fresh resets, without exploration (``evaluation_explore``), reward
clipping or any effect on training.  Atari envs keep the training pipeline; their
returns are the full-game, unclipped ones (``RecordEpisodeStatistics`` below the
episodic-life wrapper), as in SB3's ``EvalCallback`` and RLlib's evaluation workers.
The results are reported as ``evaluation/episode_reward_mean`` (and ``_min``, ``_max``,
``evaluation/episode_len_mean``, ``evaluation/episodes``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from hierl.evaluators import EvaluatorSet, EvaluatorSpec, PolicyEvaluator, env_state

EVALUATION_SEED_OFFSET = 1_000_003
"""Evaluation evaluators' seeds are the trainer's plus this (no env shares a training seed)."""


def evaluates_at(iteration: int, interval: int) -> bool:
    """Whether training iteration ``iteration`` (counted from 1) is one that evaluates:
    every ``interval``-th (every one when ``interval`` is 0)."""
    return iteration % max(1, interval) == 0


@contextlib.contextmanager
def _driver_rng_kept() -> Iterator[None]:
    """Restore the driver's Python / numpy / torch generators afterwards: building and
    running evaluators in the driver seeds and draws from them, and training must draw
    the same numbers with evaluation on as with it off."""
    state = env_state.get_rng_state()
    try:
        yield
    finally:
        env_state.set_rng_state(state)


class Evaluation:
    """The evaluation evaluators of one trainer and the episodes they play.

    Args:
        spec: the training evaluators' spec; the evaluation one is its
            ``for_acting`` variant (``SamplingSettings.for_acting``, the env as input).
        num_episodes: episodes per evaluation, split over the evaluators.
        interval: evaluate every this many training iterations.
        attach_latest: between evaluations, results carry the latest one's metrics
            (``always_attach_evaluation_results``).
        explore: sample actions (False: greedy).
        num_evaluators: Ray actors (0: play in the driver).
        evaluator_options: the keyword arguments of ``EvaluatorSet`` besides the spec.
    """

    def __init__(
        self,
        spec: EvaluatorSpec,
        *,
        num_episodes: int,
        interval: int,
        attach_latest: bool,
        explore: bool,
        num_evaluators: int,
        **evaluator_options: Any,
    ):
        self.num_episodes = num_episodes
        self.interval = interval
        self.attach_latest = attach_latest
        self.latest: dict[str, float] = self.not_yet()
        """The metrics of the latest ``run`` that played episodes (``not_yet()`` before the
        first and after ``forget``): what ``attach_latest`` carries between evaluations."""
        per_evaluator = math.ceil(num_episodes / max(1, num_evaluators))
        eval_spec = spec.for_acting(
            explore=explore,
            seed=None if spec.seed is None else spec.seed + EVALUATION_SEED_OFFSET,
            num_envs=max(1, min(spec.sampling.num_envs_per_evaluator, per_evaluator)),
        )
        with _driver_rng_kept():
            self.evaluators = EvaluatorSet(
                eval_spec, num_evaluators=num_evaluators, **evaluator_options
            )

    def metrics(self, iteration: int, trainer_evaluator: PolicyEvaluator) -> dict[str, float]:
        """What training iteration ``iteration``'s result gets: a fresh ``run`` every
        ``interval`` iterations; with ``attach_latest`` also the latest metrics, so every
        result has the same keys (a failed run adds only ``evaluation/episodes`` 0)."""
        fresh = (
            self.run(trainer_evaluator, seed_round=iteration)
            if evaluates_at(iteration, self.interval)
            else {}
        )
        return {**self.latest, **fresh} if self.attach_latest else fresh

    def forget(self) -> None:
        """Stop carrying the latest metrics: the weights they measured were replaced
        (a restore, or weights copied from another trainer)."""
        self.latest = self.not_yet()

    def run(self, trainer_evaluator: PolicyEvaluator, seed_round: int = 0) -> dict[str, float]:
        """Evaluate the weights and filters of ``trainer_evaluator``; the metrics (only
        ``evaluation/episodes`` 0 if every evaluation evaluator failed).

        The episodes start from round ``seed_round``'s resets (``metrics`` passes the
        training iteration): each evaluation of a run plays new start states, as SB3's
        and RLlib's do, and a resumed run's evaluations are those of one unbroken run."""
        weights = trainer_evaluator.get_weights()
        filters = trainer_evaluator.get_filters(flush_after=False)
        remotes = self.evaluators.remote_evaluators
        if not remotes:
            with _driver_rng_kept():
                local = self.evaluators.local_evaluator
                records = local.evaluate(self.num_episodes, weights, filters, seed_round)
        else:
            import ray

            ref = ray.put(weights)
            n = len(remotes)
            quotas = iter([(self.num_episodes + i) // n for i in range(n)])
            pairs = self.evaluators.call_remotes(
                lambda e: e.evaluate.remote(next(quotas), ref, filters, seed_round),
                weights=ref,
            )
            records = [r for _, played in pairs for r in played]
        if not records:  # every evaluation evaluator failed: nothing measured
            return {"evaluation/episodes": 0}
        returns = np.array([r.episode_reward for r in records], dtype=np.float64)
        lengths = np.array([r.episode_length for r in records], dtype=np.float64)
        self.latest = {
            "evaluation/episode_reward_mean": float(returns.mean()),
            "evaluation/episode_reward_min": float(returns.min()),
            "evaluation/episode_reward_max": float(returns.max()),
            "evaluation/episode_len_mean": float(lengths.mean()),
            "evaluation/episodes": len(records),
        }
        return dict(self.latest)

    @staticmethod
    def not_yet() -> dict[str, float]:
        """The metrics ``run`` reports, before any evaluation: NaN, no episodes."""
        return {
            "evaluation/episode_reward_mean": math.nan,
            "evaluation/episode_reward_min": math.nan,
            "evaluation/episode_reward_max": math.nan,
            "evaluation/episode_len_mean": math.nan,
            "evaluation/episodes": 0,
        }

    def stop(self) -> None:
        """Stop the evaluation evaluators."""
        self.evaluators.stop()
