"""The numerics of Evolution Strategies, free of Ray and torch: testable in isolation.

Salimans et al. 2017, "Evolution Strategies as a Scalable Alternative to Reinforcement
Learning", https://arxiv.org/abs/1703.03864 (Algorithm 2, §2.2 fitness shaping, mirrored
sampling): with ``n = 2P`` perturbed episodes in ``P`` antithetic pairs ``θ ± sigma ε_i``,

    g = 1/n · Σ_i (F⁺_i - F⁻_i) ε_i                    (es_gradient)

where ``F`` are the episode returns after fitness shaping (``centered_ranks``).  Adam
(``FlatAdam``) then *minimises* ``-g + l2_coeff · θ``.  This is the scaling of the
reference code, openai/evolution-strategies-starter ``es_distributed/es.py``
(``g, count = batched_weighted_sum(...); g /= returns_n2.size`` then
``optimizer.update(-g + config.l2coeff * theta)``), kept by RLlib's ES: ``g`` is *not*
divided by ``sigma``.  ``sigma · g`` would estimate ∇_θ E_ε[F(θ + sigma ε)]; Adam is
invariant to the scale of its input, so the scale only matters through its balance with
the L2 term, and the paper's ``l2_coeff`` (0.005) is relative to this ``g``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of all entries of ``x`` (any shape), scaled to ``[-0.5, 0.5]``.

    The smallest value maps to -0.5 and the largest to 0.5 (``rank / (x.size - 1) - 0.5``),
    so the update is invariant to any monotone transformation of the returns and a few
    outlier episodes cannot dominate it.  Tied values get the *average* of the ranks
    they span, hence equal shaped values: an antithetic pair with equal returns (e.g.
    both at the time limit) contributes nothing instead of a direction set by the order
    of the pair.  A single value maps to 0.

    >>> centered_ranks(np.array([3.0, -1.0, 10.0])).tolist()
    [0.0, -0.5, 0.5]
    """
    x = np.asarray(x)
    flat = x.reshape(-1)
    if flat.size <= 1:
        return np.zeros(x.shape, dtype=np.float64)
    _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts
    average_rank = first_rank + (counts - 1) / 2.0
    ranks = average_rank[inverse.reshape(-1)]
    return (ranks / (flat.size - 1) - 0.5).reshape(x.shape)


def top_directions(returns: np.ndarray, b: int) -> np.ndarray:
    """Indices (ascending) of the ``b`` antithetic pairs with the largest ``max(r⁺, r⁻)``.

    ARS (Mania et al. 2018, https://arxiv.org/abs/1803.07055, Algorithm 2 step 6, "V1-t /
    V2-t") keeps only the best ``b`` of its ``N`` directions, ranked by the better member
    of each pair, so the update follows the directions that found the most reward.
    ``b <= 0`` or ``b >= P`` keeps every pair.  Ties keep the earlier pair.

    >>> top_directions(np.array([[1.0, 9.0], [5.0, 2.0], [0.0, 3.0]]), 2).tolist()
    [0, 1]
    """
    returns = np.asarray(returns, dtype=np.float64).reshape(-1, 2)
    pairs = returns.shape[0]
    if b <= 0 or b >= pairs:
        return np.arange(pairs)
    best = returns.max(axis=1)
    # stable sort on -best: among equal maxima the earlier pair wins
    return np.sort(np.argsort(-best, kind="stable")[:b])


def reward_std_scaled(returns: np.ndarray) -> np.ndarray:
    """``returns / std(returns)`` (ARS V1/V2's ``sigma_R`` scaling; std over every entry).

    ARS divides its update by the standard deviation of the ``2b`` returns it uses
    (Algorithm 2 step 7); only differences ``r⁺ - r⁻`` enter the update, so dividing the
    returns is the same.  A zero std (all returns equal) leaves the returns as they are:
    their differences are zero and so is the update.

    >>> reward_std_scaled(np.array([[1.0, 3.0]])).tolist()
    [[1.0, 3.0]]
    """
    x = np.asarray(returns, dtype=np.float64)
    std = float(x.std()) if x.size else 0.0
    return x / std if std > 0 else x.copy()


def es_gradient(
    returns_pos: np.ndarray,
    returns_neg: np.ndarray,
    noise: np.ndarray,
) -> np.ndarray:
    """The antithetic ES update direction ``1/n Σ_i (r⁺_i - r⁻_i) ε_i``, ``n = 2P``.

    Args:
        returns_pos: ``(P,)`` (shaped) returns of the episodes run with ``θ + sigma ε_i``.
        returns_neg: ``(P,)`` (shaped) returns of the episodes run with ``θ - sigma ε_i``.
        noise: ``(P, dim)`` the perturbation directions ``ε_i``.

    Returns:
        ``(dim,)`` float64, divided by the number of returns ``n = 2P`` only, as in the
        reference code (see the module docstring).  For raw returns of a smooth
        objective ``g / sigma`` estimates the gradient of the Gaussian-smoothed objective
        (for a quadratic, exactly the gradient: the even Taylor terms cancel in
        ``r⁺ - r⁻``).
    """
    pos = np.asarray(returns_pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(returns_neg, dtype=np.float64).reshape(-1)
    noise = np.asarray(noise)
    if pos.shape != neg.shape or noise.ndim != 2 or noise.shape[0] != pos.size:
        raise ValueError(
            f"es_gradient needs P returns of each sign and a (P, dim) noise matrix; got "
            f"{pos.shape}, {neg.shape} and {noise.shape}"
        )
    if pos.size == 0:
        return np.zeros(noise.shape[1], dtype=np.float64)
    weights = pos - neg
    # CRUCIAL: divide by the number of returns (2P) only, not by sigma: the reference
    # (es_distributed/es.py, ``g /= returns_n2.size``) does so, and the L2 coefficient
    # is calibrated against this scale (with 1/sigma, sigma=0.02 weakened L2 50x).
    return (weights @ noise.astype(np.float64, copy=False)) / (2 * pos.size)


class FlatAdam:
    """Adam (Kingma & Ba 2015) on one flat parameter vector, with its state as arrays.

    ``step(theta, grad)`` returns ``theta - a · m / (sqrt(v) + eps)`` with the usual
    bias-corrected step size ``a = stepsize · sqrt(1 - β₂ᵗ) / (1 - β₁ᵗ)``: it descends
    ``grad``, so ES passes the *negative* ascent direction.
    """

    def __init__(
        self,
        dim: int,
        stepsize: float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
    ):
        self.dim = int(dim)
        self.stepsize = float(stepsize)
        self.beta1 = float(beta1)
        self.beta2 = float(beta2)
        self.epsilon = float(epsilon)
        self.m = np.zeros(self.dim, dtype=np.float64)
        self.v = np.zeros(self.dim, dtype=np.float64)
        self.t = 0

    def step(self, theta: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """One Adam step on ``theta`` (not modified) along ``-grad``; returns the new theta."""
        grad = np.asarray(grad, dtype=np.float64).reshape(-1)
        if grad.size != self.dim or np.size(theta) != self.dim:
            raise ValueError(
                f"FlatAdam of dim {self.dim} got theta of size {np.size(theta)} and a "
                f"gradient of size {grad.size}"
            )
        self.t += 1
        a = self.stepsize * np.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        step = -a * self.m / (np.sqrt(self.v) + self.epsilon)
        return (np.asarray(theta, dtype=np.float64) + step).astype(np.asarray(theta).dtype)

    def get_state(self) -> dict[str, Any]:
        """Moments (arrays) and the step counter (JSON) for checkpoints."""
        return {"m": self.m.copy(), "v": self.v.copy(), "t": self.t}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``; the moments must have this optimizer's dimension."""
        m = np.asarray(state["m"], dtype=np.float64)
        v = np.asarray(state["v"], dtype=np.float64)
        if m.shape != (self.dim,) or v.shape != (self.dim,):
            raise ValueError(
                f"Adam moments of shape {m.shape}/{v.shape} do not fit {self.dim} parameters"
            )
        self.m, self.v, self.t = m.copy(), v.copy(), int(state["t"])
