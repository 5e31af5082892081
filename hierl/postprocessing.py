"""Trajectory postprocessing: discounted returns, GAE, n-step returns and V-trace.

All functions work on ONE trajectory segment of one agent: consecutive steps of a single
episode, possibly cut before the episode ended.  The caller supplies the bootstrap value
of the state after the last step:

* the episode *terminated* (a true terminal state)  → 0, no bootstrap;
* it was *truncated* (time limit) or the fragment was cut mid-episode → V(final obs).

GAE: Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", https://arxiv.org/abs/1506.02438
n-step returns: Sutton & Barto 2018, §7.1; as used in Rainbow (Hessel et al. 2018,
https://arxiv.org/abs/1710.02298) and Ape-X (Horgan et al. 2018).
V-trace: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures", https://arxiv.org/abs/1802.01561, §4.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import torch

from hierl.devices import to_device
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


def segment_ends(batch: SampleBatch) -> np.ndarray:
    """Boolean mask of the last row of each trajectory segment (EPS_ID changes).

    A batch without EPS_ID is a single segment.
    """
    ends = np.zeros(batch.count, dtype=bool)
    ends[-1:] = True
    if SampleBatch.EPS_ID in batch:
        eps = batch[SampleBatch.EPS_ID]
        ends[:-1] = eps[1:] != eps[:-1]
    return ends


def compute_gae_segments(
    rewards: np.ndarray,
    values: np.ndarray,
    ends: np.ndarray,
    bootstrap_values: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over many concatenated segments at once, vectorised across segments.

    ``ends`` marks each segment's last row; ``bootstrap_values[i]`` (read at those rows
    only) is V of the state after it (0 for a terminal state).  Rows are processed in
    rounds by their distance to their segment's end, so the Python loop runs once per
    step of the longest segment, not once per row.  Equals ``compute_gae`` per segment.
    """
    n = len(rewards)
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    next_values = np.empty(n)
    next_values[:-1] = values[1:]
    next_values[ends] = np.asarray(bootstrap_values, dtype=np.float64)[ends]
    deltas = rewards + gamma * next_values - values
    # distance of each row to the end of its segment
    end_idx = np.flatnonzero(ends)
    seg_of_row = np.searchsorted(end_idx, np.arange(n))
    dist = end_idx[seg_of_row] - np.arange(n)
    order = np.argsort(dist, kind="stable")
    bounds = np.searchsorted(dist[order], np.arange(dist.max(initial=-1) + 2))
    adv = np.zeros(n + 1)
    for k in range(len(bounds) - 1):
        rows = order[bounds[k] : bounds[k + 1]]
        carry = 0.0 if k == 0 else gamma * lam * adv[rows + 1]
        adv[rows] = deltas[rows] + carry
    advantages = adv[:n]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def compute_advantages(
    batch: SampleBatch,
    bootstrap_values: float | np.ndarray,
    gamma: float = 0.99,
    lambda_: float = 1.0,
    use_gae: bool = True,
    use_critic: bool = True,
) -> SampleBatch:
    """Add ADVANTAGES and VALUE_TARGETS to a batch of one or more trajectory segments.

    Segments are runs of equal EPS_ID (a batch without EPS_ID is one segment).
    ``bootstrap_values`` is V(state after the segment's last row), read at each
    segment's last row (a scalar for a single segment); pass 0 where the segment
    terminated.  With ``use_gae`` the value predictions ``VF_PREDS`` are needed.
    Without it the advantages are the bootstrapped discounted returns, minus
    ``VF_PREDS`` when ``use_critic`` (REINFORCE with a baseline).
    """
    n = batch.count
    ends = segment_ends(batch)
    boot = np.broadcast_to(np.asarray(bootstrap_values, dtype=np.float64), (n,))
    rewards = batch[SampleBatch.REWARDS]
    if use_gae:
        if not use_critic:
            raise ValueError("use_gae=True needs a critic (use_critic=True)")
        values = batch[SampleBatch.VF_PREDS]
        adv, targets = compute_gae_segments(rewards, values, ends, boot, gamma, lambda_)
    else:
        # lambda = 1 and V = 0 turn GAE into bootstrapped discounted returns
        targets, _ = compute_gae_segments(rewards, np.zeros(n), ends, boot, gamma, 1.0)
        adv = targets - batch[SampleBatch.VF_PREDS] if use_critic else targets.copy()
    batch[SampleBatch.ADVANTAGES] = adv.astype(np.float32)
    batch[SampleBatch.VALUE_TARGETS] = targets.astype(np.float32)
    return batch


N_STEP_DISCOUNTS = "n_step_discounts"
"""Column added by ``compute_n_step``: ``gamma ** m`` per row, the discount of the
bootstrap value of its (new) NEW_OBS, where ``m`` is the number of rewards its return sums."""


def compute_n_step(batch: SampleBatch, n: int, gamma: float) -> SampleBatch:
    """n-step transitions for a batch of one or more trajectory segments (runs of EPS_ID).

    Row ``t`` of a segment gets, with ``m = min(n, rows left in its segment from t)``:

    * REWARDS = ``sum_{k<m} gamma^k r_{t+k}``;
    * NEW_OBS, TERMINATEDS (and TRUNCATEDS) = those of row ``t+m-1``;
    * ``N_STEP_DISCOUNTS`` = ``gamma^m``.

    The target of row t is then ``REWARDS + N_STEP_DISCOUNTS * (1 - TERMINATEDS) * V(NEW_OBS)``:
    an episode that terminates inside the window shortens it and is not bootstrapped, while
    a truncated (time-limit) or fragment-cut segment still bootstraps from its last NEW_OBS.
    Vectorised over rows (the Python loop runs ``n`` times).  Returns a new batch; the
    other columns are shared with ``batch``, which is left unchanged.
    """
    if n < 1:
        raise ValueError(f"n-step length must be >= 1, got {n}")
    out = SampleBatch(batch)  # shallow copy: the input keeps its 1-step columns
    count = out.count
    if count == 0:
        out[N_STEP_DISCOUNTS] = np.zeros(0, np.float32)
        return out
    out.decompress_if_needed([SampleBatch.NEW_OBS])
    rows = np.arange(count)
    end_idx = np.flatnonzero(segment_ends(out))
    seg_end = end_idx[np.searchsorted(end_idx, rows)]
    m = np.minimum(n, seg_end - rows + 1)
    rewards = np.asarray(out[SampleBatch.REWARDS], dtype=np.float64)
    returns = np.zeros(count)
    for k in range(int(m.max())):
        # CRUCIAL: a window never crosses its segment's end (another episode or env).
        valid = k < m
        returns[valid] += gamma**k * rewards[rows[valid] + k]
    last = rows + m - 1
    out[SampleBatch.REWARDS] = returns.astype(np.float32)
    for column in (SampleBatch.NEW_OBS, SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS):
        if column in out:
            out[column] = np.asarray(out[column])[last]
    out[N_STEP_DISCOUNTS] = np.power(np.float64(gamma), m).astype(np.float32)
    return out


def trajectory_ends(
    eps_id: np.ndarray, t: np.ndarray | None = None, agent_index: np.ndarray | None = None
) -> np.ndarray:
    """Boolean mask of the last row of each run of consecutive steps of one agent in one
    episode.

    A run ends where the episode id or, given ``agent_index``, the agent changes (two
    agents of one multi-agent episode are two trajectories), or, given the per-row
    timestep ``t``, where the next row is not the next step (two pieces of one episode
    that a shuffle made adjacent are two runs).  The last row always ends a run.
    """
    eps_id = np.asarray(eps_id)
    ends = np.ones(len(eps_id), dtype=bool)
    if len(eps_id):
        ends[:-1] = eps_id[1:] != eps_id[:-1]
        if agent_index is not None:
            agent_index = np.asarray(agent_index)
            ends[:-1] |= agent_index[1:] != agent_index[:-1]
        if t is not None:
            t = np.asarray(t)
            ends[:-1] |= t[1:] != t[:-1] + 1
    return ends


class VTrace(NamedTuple):
    """V-trace targets for a batch of trajectory runs (all tensors of shape ``(N,)``)."""

    vs: torch.Tensor
    """Value targets ``v_s``."""
    pg_advantages: torch.Tensor
    """Policy-gradient advantages ``rho^pg_s (r_s + gamma v_{s+1} - V(x_s))``."""
    rhos: torch.Tensor
    """Unclipped importance ratios ``pi(a_s|x_s) / mu(a_s|x_s)``."""


@torch.no_grad()
def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_values: torch.Tensor,
    ends: np.ndarray,
    gamma: float,
    lambda_: float = 1.0,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
) -> VTrace:
    """V-trace (IMPALA, Espeholt et al. 2018, eq. 1 and §4.2) over runs of rows.

    Rows are trajectory runs laid end to end; ``ends`` marks each run's last row
    (``trajectory_ends``).  ``log_rhos = log pi(a|x) - log mu(a|x)`` (target minus
    behaviour policy), ``values = V(x_s)`` under the current value function,
    ``bootstrap_values`` (read at run ends only) ``= V(x after the run)``, 0 where the
    episode terminated.  With ``rho_s = min(rho_bar, e^log_rho_s)``, ``c_s = lambda
    min(c_bar, e^log_rho_s)`` and ``delta_s = rho_s (r_s + gamma V(x_{s+1}) - V(x_s))``:

        v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1}))     (0 past the run's end)

    computed for every row at once, vectorised over rows and runs: the recursion runs in
    rounds by distance to the run's end (one round per step of the longest run).  A
    threshold of None does not clip.  Returns targets without gradient.
    """
    device = values.device
    n = values.shape[0]
    ends_t = to_device(np.asarray(ends, dtype=bool), device)
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
    cs = rhos if clip_c_threshold is None else rhos.clamp(max=clip_c_threshold)
    cs = lambda_ * cs
    next_values = torch.empty_like(values)
    next_values[:-1] = values[1:]
    next_values = torch.where(ends_t, bootstrap_values.to(values.dtype), next_values)
    deltas = clipped_rhos * (rewards + gamma * next_values - values)
    # Rounds by distance to the run's end: rows at distance k read the row after them.
    # Rows are laid out in round order once, so each round is three kernels on slices.
    end_idx = np.flatnonzero(ends)
    dist = end_idx[np.searchsorted(end_idx, np.arange(n))] - np.arange(n)
    order = np.argsort(dist, kind="stable")
    bounds = np.searchsorted(dist[order], np.arange(dist.max(initial=-1) + 2)).tolist()
    order_t = to_device(order, device)
    after_t = order_t + 1  # where each row's successor sits in ``acc``
    discounts = (gamma * cs)[order_t]
    ordered_deltas = deltas[order_t]
    acc = torch.zeros(n + 1, dtype=values.dtype, device=device)  # v_s - V(x_s)
    for a, b in itertools.pairwise(bounds):
        rows = order_t[a:b]
        if a == 0:  # the runs' last rows: nothing follows them inside the run
            acc[rows] = ordered_deltas[a:b]
        else:
            acc[rows] = torch.addcmul(ordered_deltas[a:b], discounts[a:b], acc[after_t[a:b]])
    vs_minus_v = acc[:n]
    vs = values + vs_minus_v
    # v_{s+1}: the next row's target inside a run, the bootstrap value after its end.
    next_vs = torch.where(ends_t, next_values, next_values + acc[1:])
    pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + gamma * next_vs - values)
    return VTrace(vs, pg_advantages, rhos)
