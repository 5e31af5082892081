"""Off-policy estimation: the return of the current policy from logged episodes.

Precup et al. 2000, "Eligibility Traces for Off-Policy Policy Evaluation" (per-decision
importance sampling).  For a logged episode with behaviour probabilities ``mu_t`` (its
``action_logp`` column) and the current policy's ``pi_t``, ``p_t = prod_{k<=t} pi_k /
mu_k`` and

* ``is``:  ``V = sum_t gamma^t p_t r_t`` per episode (unbiased);
* ``wis``: ``V = sum_t gamma^t (p_t / w_t) r_t`` with ``w_t`` the mean of ``p_t`` over the
  episodes that reach step ``t`` (biased, consistent, far lower variance).

Each reports the mean over episodes (``v_target``), its standard error, the logged
discounted return (``v_behavior``), ``v_delta = v_target - v_behavior`` (> 0: the
target policy is estimated better, whatever the sign of the returns) and ``v_gain =
v_target / v_behavior`` (RLlib's figure; it reads > 1 for a *worse* policy when the
returns are negative, so compare policies by ``v_delta``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from hierl.config import ConfigError
from hierl.evaluators.offline.reader import iter_episodes, list_files
from hierl.sample_batch import SampleBatch

ESTIMATORS = ("is", "wis")


def check_estimators(names: Sequence[str]) -> None:
    """ConfigError for an unknown estimator name."""
    for name in names:
        if name not in ESTIMATORS:
            raise ConfigError(
                f"config field 'off_policy_estimation' names '{name}'; valid: "
                f"{', '.join(ESTIMATORS)}"
            )


def _ratios(
    episodes: Sequence[SampleBatch], target_logp: Callable[[SampleBatch], np.ndarray]
) -> list[np.ndarray]:
    out = []
    for ep in episodes:
        if SampleBatch.ACTION_LOGP not in ep:
            raise ValueError(
                "off-policy estimation needs the behaviour policy's 'action_logp' column in "
                "the logged data (written by policies that sample, e.g. PG / PPO / "
                "'hierl rollout --output')"
            )
        log_ratio = target_logp(ep) - ep[SampleBatch.ACTION_LOGP].astype(np.float64)
        out.append(np.exp(np.cumsum(log_ratio)))
    return out


def estimate(
    name: str,
    episodes: Sequence[SampleBatch],
    target_logp: Callable[[SampleBatch], np.ndarray],
    gamma: float,
) -> dict[str, float]:
    """Estimator ``name`` (``is`` / ``wis``) over whole logged ``episodes``; the target
    policy's log-probabilities of the logged actions come from ``target_logp``."""
    return estimate_all([name], episodes, target_logp, gamma)[name]


def estimate_all(
    names: Sequence[str],
    episodes: Sequence[SampleBatch],
    target_logp: Callable[[SampleBatch], np.ndarray],
    gamma: float,
) -> dict[str, dict[str, float]]:
    """``estimate`` for each of ``names``, evaluating the target policy once per episode."""
    check_estimators(names)
    if not episodes:
        raise ValueError("off-policy estimation needs at least one whole logged episode")
    ratios = _ratios(episodes, target_logp)
    rewards = [ep[SampleBatch.REWARDS].astype(np.float64) for ep in episodes]
    discounts = [gamma ** np.arange(len(r)) for r in rewards]
    v_behavior = float(np.mean([np.sum(d * r) for d, r in zip(discounts, rewards, strict=True)]))
    return {
        name: _figures(_weights(name, ratios), discounts, rewards, v_behavior) for name in names
    }


def result_metrics(
    names: Sequence[str],
    episodes: Sequence[SampleBatch],
    target_logp: Callable[[SampleBatch], np.ndarray],
    gamma: float,
) -> dict[str, float]:
    """``estimate_all``'s figures flat, as a trainer's results name them:
    ``off_policy_estimation/<estimator>/<figure>``."""
    estimates = estimate_all(names, episodes, target_logp, gamma)
    return {
        f"off_policy_estimation/{name}/{k}": v
        for name, figures in estimates.items()
        for k, v in figures.items()
    }


def load_episodes(
    paths: Sequence[str],
    max_rows: int,
    skip_bad_files: bool,
    source: str | Mapping[str, float],
) -> list[SampleBatch]:
    """The whole logged episodes of ``paths`` (files or folders) to estimate over: in
    order, until one more would pass ``max_rows`` rows (always at least one).

    Raises:
        ConfigError: no whole episode (``source``, the ``input`` or ``input_mix`` setting,
            names the input in the message).
    """
    episodes, rows = [], 0
    for ep in iter_episodes(list_files(list(paths)), skip_bad_files=skip_bad_files):
        if rows + ep.count > max_rows and episodes:
            break
        episodes.append(ep)
        rows += ep.count
    if not episodes:
        raise ConfigError(
            f"off_policy_estimation: the input {source!r} holds no whole logged "
            "episode (record with batch_mode 'complete_episodes' or 'hierl rollout "
            "--output')"
        )
    return episodes


def _weights(name: str, ratios: list[np.ndarray]) -> list[np.ndarray]:
    """Per-step importance weights: the cumulative ratios (``is``), or those divided by
    their mean over the episodes reaching each step (``wis``)."""
    if name == "is":
        return ratios
    horizon = max(len(p) for p in ratios)
    total = np.zeros(horizon)
    count = np.zeros(horizon)
    for p in ratios:
        total[: len(p)] += p
        count[: len(p)] += 1
    mean_p = total / count
    return [p / np.maximum(mean_p[: len(p)], 1e-300) for p in ratios]


def _figures(
    weights: list[np.ndarray],
    discounts: list[np.ndarray],
    rewards: list[np.ndarray],
    v_behavior: float,
) -> dict[str, float]:
    v_target = np.asarray(
        [np.sum(d * w * r) for d, w, r in zip(discounts, weights, rewards, strict=True)]
    )
    n = len(v_target)
    std_err = float(np.std(v_target, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {
        "v_target": float(v_target.mean()),
        "v_target_std_err": std_err,
        "v_behavior": v_behavior,
        "v_delta": float(v_target.mean()) - v_behavior,
        "v_gain": float(v_target.mean()) / v_behavior if v_behavior else math.nan,
        "episodes": n,
    }
