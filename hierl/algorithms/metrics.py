"""The result of one ``train()`` iteration: where every trainer ends its iteration.

Flat trainers (``Trainer.train``) and nested ones (PPO-ES, A3C-ES, ES, AlphaZero, through
``BaseTrainer.finish_iteration``) count the iteration and its time with
``count_iteration`` and end it with ``finish_iteration``, so
``training_iteration``, ``time_this_iter_s`` and ``time_total_s`` mean the same in every
result.  A flat trainer's episode statistics (``episode_reward_mean`` over the last
``metrics_smoothing_episodes`` episodes, ``episodes_total``, ``custom_metrics/*``,
``policy_reward_*``) are kept by ``EpisodeStats``; its sampling and learner figures
are assembled by ``sampling_metrics`` and ``learner_metrics``.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hierl.algorithms.multi_agent import PolicyRewards
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, LearnerStats

if TYPE_CHECKING:
    from hierl.algorithms.trainer_base import BaseTrainer
    from hierl.evaluators import EvaluatorSet
    from hierl.optimizers import PolicyOptimizer


def count_iteration(trainer: BaseTrainer, start: float) -> dict[str, Any]:
    """Count an iteration of ``trainer`` that began at ``time.perf_counter()`` =
    ``start``: the ``training_iteration`` / ``time_this_iter_s`` / ``time_total_s`` keys."""
    trainer.iteration += 1
    elapsed = time.perf_counter() - start
    trainer.time_total_s += elapsed
    return {
        "training_iteration": trainer.iteration,
        "time_this_iter_s": elapsed,
        "time_total_s": trainer.time_total_s,
    }


def finish_iteration(
    trainer: BaseTrainer, result: dict[str, Any], start: float | None = None
) -> dict[str, Any]:
    """The last step of every ``train()``: count the iteration (when ``start`` is given;
    a flat trainer has counted it already, before its evaluation) and write ``result`` to
    the trainer's logs; returns ``result``."""
    if start is not None:
        result.update(count_iteration(trainer, start))
    trainer.log_result(result)
    return result


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


class EpisodeStats:
    """A flat trainer's episode counters: the returns and lengths of the last ``maxlen``
    episodes, the episodes in all and each policy's returns (multi-agent).

    Args:
        maxlen: episodes kept (the trainer's ``metrics_smoothing_episodes``).
    """

    def __init__(self, maxlen: int):
        self.episodes_total = 0
        self.window: collections.deque = collections.deque(maxlen=maxlen)
        self.policy_rewards = PolicyRewards(maxlen)

    def add(self, episodes: list[Any]) -> dict[str, Any]:
        """Count the episodes finished this iteration; the ``episode_*`` and
        ``episodes_*`` keys of its result."""
        self.window.extend((e.episode_reward, e.episode_length) for e in episodes)
        self.episodes_total += len(episodes)
        self.policy_rewards.add(episodes)
        rewards = [r for r, _ in self.window]
        return {
            "episode_reward_mean": _mean(rewards),
            "episode_reward_min": float(np.min(rewards)) if rewards else math.nan,
            "episode_reward_max": float(np.max(rewards)) if rewards else math.nan,
            "episode_len_mean": _mean([n for _, n in self.window]),
            "episodes_this_iter": len(episodes),
            "episodes_total": self.episodes_total,
        }

    def episode_metrics(self, episodes: Iterable[Any]) -> dict[str, float]:
        """``custom_metrics/<name>_{mean,min,max}`` of this iteration's episodes, then
        ``policy_reward_{mean,min,max}/<policy_id>`` over each policy's window."""
        custom: dict[str, list[float]] = collections.defaultdict(list)
        for e in episodes:
            for k, v in e.custom_metrics.items():
                custom[k].append(float(v))
        result = {}
        for k, values in custom.items():
            result[f"custom_metrics/{k}_mean"] = float(np.mean(values))
            result[f"custom_metrics/{k}_min"] = float(np.min(values))
            result[f"custom_metrics/{k}_max"] = float(np.max(values))
        result.update(self.policy_rewards.metrics())
        return result

    def get_state(self) -> dict[str, Any]:
        """``episodes_total``, the window as an ``(n, 2)`` float64 array and the policy
        rewards (the checkpoint entries of ``Trainer.get_state``)."""
        return {
            "episodes_total": self.episodes_total,
            "episodes": np.asarray(list(self.window), dtype=np.float64).reshape(-1, 2),
            "policy_rewards": self.policy_rewards.get_state(),
        }

    def set_state(
        self,
        episodes_total: int,
        episodes: Iterable[Any],
        policy_rewards: Mapping[str, Any],
    ) -> None:
        """Inverse of ``get_state``."""
        self.episodes_total = int(episodes_total)
        self.window.clear()
        self.window.extend((float(r), int(n)) for r, n in episodes)
        self.policy_rewards.set_state(policy_rewards)


def sampling_metrics(
    optimizer: PolicyOptimizer, evaluators: EvaluatorSet, steps: int, elapsed: float
) -> dict[str, Any]:
    """The trained-steps, throughput and evaluator-health keys of an iteration that
    sampled ``steps`` env steps in ``elapsed`` seconds."""
    return {
        "num_steps_trained": optimizer.num_steps_trained,
        "sample_throughput": steps / elapsed if elapsed > 0 else 0.0,
        "num_evaluators": len(evaluators.remote_evaluators),
        "num_healthy_evaluators": evaluators.num_healthy_evaluators,
        "num_evaluator_restarts": evaluators.num_evaluator_restarts,
    }


def optimizer_metrics(optimizer: PolicyOptimizer, result: Mapping[str, Any]) -> dict[str, Any]:
    """The optimizer's own stats (keys ``result`` does not have yet) and
    ``learn_throughput`` (steps trained per second of its ``learn`` timer)."""
    out = {k: v for k, v in optimizer.stats().items() if k not in result}
    learn = optimizer.timers.get("learn")
    if learn is not None and learn.total_s > 0:
        out["learn_throughput"] = optimizer.num_steps_trained / learn.total_s
    return out


def mean_stats(stats: list[LearnerStats]) -> LearnerStats:
    """Per policy and stat, the mean over the optimizer steps of an iteration that
    reported it; the refused updates (``NONFINITE_GRADS_SKIPPED``) are summed."""
    out: LearnerStats = {}
    for pid in dict.fromkeys(p for s in stats for p in s):
        reported = [s[pid] for s in stats if pid in s]
        out[pid] = {}
        for key in dict.fromkeys(k for s in reported for k in s):
            values = [s[key] for s in reported if key in s]
            numeric = all(isinstance(v, (int, float, np.number)) for v in values)
            if key == NONFINITE_GRADS_SKIPPED:
                out[pid][key] = float(np.sum(values))
            else:
                out[pid][key] = float(np.mean(values)) if numeric else values[-1]
    return out


def learner_metrics(learner_stats: LearnerStats, multi_agent: bool) -> dict[str, Any]:
    """``learner/<stat>`` of the single-agent policy; ``learner/<policy_id>/<stat>``
    multi-agent."""
    out = {}
    for pid, stats in learner_stats.items():
        prefix = f"learner/{pid}/" if multi_agent else "learner/"
        out.update({prefix + k: v for k, v in stats.items()})
    return out
