"""The evaluator side of ES: antithetic episodes inside a PolicyEvaluator.

``evaluate_perturbations`` runs inside a PolicyEvaluator (``evaluator.apply(fn, ...)``,
so PolicyEvaluator stays generic): for each assigned offset ``i`` it plays one complete
episode with ``θ + sigma ε_i`` and one with ``θ - sigma ε_i`` (same env seed: common random
numbers), plus a few unperturbed evaluation episodes.  Results are ``RolloutResult``s,
concatenated by ``merge_results`` (in an aggregator, ``hierl.optimizers.es.aggregator``,
and on the driver).

Observation filter: every episode of a call normalises with the filter as it was when
the call began (the *current* filter, identical for both members of a pair); the
observations seen are recorded in the filter's buffer only, and merged by the usual
filter synchronisation (``EvaluatorSet.sync_filters``) after the step.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.evaluators.rollout_core import EpisodePlayer, EpisodeRecord
from hierl.optimizers.es.noise_table import noise_slice
from hierl.policy_graph import FlatWeights
from hierl.sample_batch import DEFAULT_POLICY_ID


@dataclasses.dataclass
class RolloutTask:
    """One evaluator's share of a round."""

    noise_indices: np.ndarray
    """``(P,)`` table offsets of the perturbations to evaluate (one antithetic pair each)."""
    env_seeds: np.ndarray
    """``(P,)`` env reset seed of each pair (both members use it)."""
    eval_seeds: np.ndarray
    """``(E,)`` env seeds of unperturbed evaluation episodes."""
    noise_stdev: float
    """``sigma``."""
    max_episode_steps: int = 0
    """Cut episodes after this many steps (0: the env's own time limit)."""


@dataclasses.dataclass
class RolloutResult:
    """Returns of one or several evaluators' tasks, concatenated in request order."""

    noise_indices: np.ndarray
    """``(P,)`` offsets, as in the tasks."""
    returns: np.ndarray
    """``(P, 2)`` returns of ``θ + sigma ε`` (column 0) and ``θ - sigma ε`` (column 1)."""
    lengths: np.ndarray
    """``(P, 2)`` episode lengths, same layout."""
    eval_returns: np.ndarray
    """``(E,)`` returns of the unperturbed evaluation episodes."""
    eval_lengths: np.ndarray
    """``(E,)`` their lengths."""
    custom_metrics: list[dict[str, float]] = dataclasses.field(default_factory=list)
    """Per perturbed episode (pair-major, + before -) when callbacks are set; else empty."""
    failures: list[tuple[int, BaseException]] = dataclasses.field(default_factory=list)
    """Aggregators only: ``(position in the request, error)`` of evaluators that failed."""

    @property
    def num_steps(self) -> int:
        """Env steps of all episodes, evaluation episodes included."""
        return int(self.lengths.sum() + self.eval_lengths.sum())

    def episode_records(self) -> list[EpisodeRecord]:
        """The perturbed episodes as the Trainer's episode records (metrics)."""
        custom = self.custom_metrics or [{} for _ in range(self.returns.size)]
        return [
            EpisodeRecord(float(r), int(n), 0, dict(c))
            for r, n, c in zip(
                self.returns.reshape(-1).tolist(),
                self.lengths.reshape(-1).tolist(),
                custom,
                strict=True,
            )
        ]


def merge_results(results: list[RolloutResult]) -> RolloutResult:
    """Concatenate results in order (an aggregator's combine; also the driver's)."""
    return RolloutResult(
        noise_indices=np.concatenate([r.noise_indices for r in results] or [np.zeros(0, int)]),
        returns=np.concatenate([r.returns for r in results] or [np.zeros((0, 2))]),
        lengths=np.concatenate([r.lengths for r in results] or [np.zeros((0, 2), int)]),
        eval_returns=np.concatenate([r.eval_returns for r in results] or [np.zeros(0)]),
        eval_lengths=np.concatenate([r.eval_lengths for r in results] or [np.zeros(0, int)]),
        custom_metrics=[c for r in results for c in r.custom_metrics],
        failures=[f for r in results for f in r.failures],
    )


_PLAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""PolicyEvaluator → its ES EpisodePlayer (closed with the evaluator's process)."""


def episode_player(evaluator: PolicyEvaluator) -> EpisodePlayer:
    """The evaluator's ES episode player (a single env, vector index 0), created on first
    use; it runs the evaluator's callbacks."""
    player = _PLAYERS.get(evaluator)
    if player is None:
        player = evaluator.episode_player()
        _PLAYERS[evaluator] = player
    return player


def close_episode_runner(evaluator: PolicyEvaluator) -> None:
    """Close the evaluator's ES env if it has one."""
    player = _PLAYERS.pop(evaluator, None)
    if player is not None:
        player.close()


def evaluate_perturbations(
    evaluator: PolicyEvaluator, noise: np.ndarray, theta: np.ndarray, task: RolloutTask
) -> RolloutResult:
    """Evaluator side of one round (``evaluator.apply(evaluate_perturbations, ...)``).

    ``noise`` is the shared table (a zero-copy view when it arrives as an object ref),
    ``theta`` the current flat weights.  The evaluator's policy holds ``theta`` again
    when this returns.
    """
    player = episode_player(evaluator)
    player.pop_episodes()  # none are left unless a call failed half-way
    policy: FlatWeights = evaluator.policy
    obs_filter = evaluator.filters[DEFAULT_POLICY_ID]
    frozen = obs_filter.get_state()
    theta = np.asarray(theta, dtype=np.float32)
    max_steps = task.max_episode_steps or -1
    pairs = len(task.noise_indices)
    returns, lengths = np.zeros((pairs, 2)), np.zeros((pairs, 2), dtype=np.int64)

    def episode(weights: np.ndarray, seed: int) -> tuple[float, int]:
        policy.set_flat_weights(weights)
        played = player.play(seed=int(seed), max_steps=max_steps, record_observations=True)
        # The episode's observations go into the filter's buffer (merged into the
        # totals at the next filter sync); the totals revert to the frozen state.
        obs_filter.record(played.observations)
        obs_filter.set_state(frozen)
        return played.record.episode_reward, played.record.episode_length

    for i, (index, seed) in enumerate(zip(task.noise_indices, task.env_seeds, strict=True)):
        delta = task.noise_stdev * noise_slice(noise, index, theta.size)
        # CRUCIAL: mirrored sampling with the same env seed for both members of the
        # pair: the difference r⁺ - r⁻ then reflects the perturbation, not the start state.
        returns[i, 0], lengths[i, 0] = episode(theta + delta, seed)
        returns[i, 1], lengths[i, 1] = episode(theta - delta, seed)
    evals = [episode(theta, seed) for seed in task.eval_seeds]
    policy.set_flat_weights(theta)
    perturbed = player.pop_episodes()[: 2 * pairs]
    # custom metrics (set by callbacks) describe the perturbed episodes only
    custom = [e.custom_metrics for e in perturbed] if player.callbacks is not None else []
    return RolloutResult(
        noise_indices=np.asarray(task.noise_indices, dtype=np.int64),
        returns=returns,
        lengths=lengths,
        eval_returns=np.array([r for r, _ in evals], dtype=np.float64),
        eval_lengths=np.array([n for _, n in evals], dtype=np.int64),
        custom_metrics=custom,
    )
