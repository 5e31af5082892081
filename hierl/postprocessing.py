"""Trajectory postprocessing: discounted returns and generalized advantage estimation.

All functions work on ONE trajectory segment of one agent: consecutive steps of a single
episode, possibly cut before the episode ended.  The caller supplies the bootstrap value
of the state after the last step:

* the episode *terminated* (a true terminal state)  → 0, no bootstrap;
* it was *truncated* (time limit) or the fragment was cut mid-episode → V(final obs).

GAE: Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", https://arxiv.org/abs/1506.02438
"""

from __future__ import annotations

import numpy as np

from hierl.sample_batch import SampleBatch


def discount_cumsum(x: np.ndarray, gamma: float) -> np.ndarray:
    """Return ``y[t] = sum_k gamma^k x[t+k]`` (reverse discounted cumulative sum), float32."""
    values = np.asarray(x, dtype=np.float64).tolist()
    out = [0.0] * len(values)
    running = 0.0
    for i in range(len(values) - 1, -1, -1):
        running = values[i] + gamma * running
        out[i] = running
    return np.asarray(out, dtype=np.float32)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: float,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimates and value targets for one trajectory segment.

    ``delta_t = r_t + gamma V(s_{t+1}) - V(s_t)`` with ``V(s_T) = bootstrap_value``;
    ``A_t = sum_k (gamma lam)^k delta_{t+k}``; value target ``= A_t + V(s_t)``.
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    values = np.asarray(values, dtype=np.float32)
    next_values = np.append(values[1:], np.float32(bootstrap_value))
    deltas = rewards + gamma * next_values - values
    advantages = discount_cumsum(deltas, gamma * lam)
    return advantages, (advantages + values).astype(np.float32)


def bootstrap_needed(batch: SampleBatch) -> bool:
    """True when the segment's last step did not end in a terminal state.

    A truncated episode (time limit) or a fragment cut mid-episode must be bootstrapped
    with the value of the final observation; a terminated one must not.
    """
    return batch.count > 0 and not bool(batch[SampleBatch.TERMINATEDS][-1])


def compute_advantages(
    batch: SampleBatch,
    bootstrap_value: float,
    gamma: float = 0.99,
    lambda_: float = 1.0,
    use_gae: bool = True,
    use_critic: bool = True,
) -> SampleBatch:
    """Add ADVANTAGES and VALUE_TARGETS columns to a single-trajectory ``batch``.

    With ``use_gae`` the value predictions ``VF_PREDS`` are needed.  Without it the
    advantages are the bootstrapped discounted returns, minus ``VF_PREDS`` when
    ``use_critic`` (a value baseline, as in REINFORCE with baseline).
    """
    rewards = batch[SampleBatch.REWARDS]
    if use_gae:
        if not use_critic:
            raise ValueError("use_gae=True needs a critic (use_critic=True)")
        adv, targets = compute_gae(
            rewards, batch[SampleBatch.VF_PREDS], bootstrap_value, gamma, lambda_
        )
    else:
        returns = discount_cumsum(np.append(rewards, np.float32(bootstrap_value)), gamma)[:-1]
        targets = returns
        adv = returns - batch[SampleBatch.VF_PREDS] if use_critic else returns.copy()
    batch[SampleBatch.ADVANTAGES] = adv.astype(np.float32)
    batch[SampleBatch.VALUE_TARGETS] = targets.astype(np.float32)
    return batch
