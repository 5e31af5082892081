"""Closed-form checks of discounting and GAE, including termination vs truncation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.postprocessing import bootstrap_needed, compute_advantages, compute_gae, discount_cumsum
from hierl.sample_batch import SampleBatch


def test_discount_cumsum_closed_form():
    x = np.array([1.0, 2.0, 3.0])
    g = 0.9
    expected = [1 + g * 2 + g * g * 3, 2 + g * 3, 3]
    np.testing.assert_allclose(discount_cumsum(x, g), expected, rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-10, 10), min_size=1, max_size=30),
    st.floats(0.0, 1.0),
)
def test_discount_cumsum_matches_direct_sum(rewards, gamma):
    x = np.array(rewards)
    direct = [sum(gamma**k * x[t + k] for k in range(len(x) - t)) for t in range(len(x))]
    np.testing.assert_allclose(discount_cumsum(x, gamma), direct, rtol=1e-4, atol=1e-4)


def test_gae_two_steps_closed_form():
    r = np.array([1.0, 2.0])
    v = np.array([0.5, 0.25])
    g, lam, boot = 0.9, 0.8, 3.0
    d1 = 2.0 + g * boot - 0.25
    d0 = 1.0 + g * 0.25 - 0.5
    adv, targets = compute_gae(r, v, boot, g, lam)
    np.testing.assert_allclose(adv, [d0 + g * lam * d1, d1], rtol=1e-6)
    np.testing.assert_allclose(targets, adv + v, rtol=1e-6)


def test_gae_lambda_one_equals_bootstrapped_returns_minus_values():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=7), rng.normal(size=7)
    adv, _ = compute_gae(r, v, 1.5, 0.97, 1.0)
    returns = discount_cumsum(np.append(r, 1.5), 0.97)[:-1]
    np.testing.assert_allclose(adv, returns - v, rtol=1e-5, atol=1e-5)


def test_gae_lambda_zero_is_one_step_td_error():
    r, v = np.array([1.0, 0.0, 2.0]), np.array([0.1, 0.2, 0.3])
    adv, _ = compute_gae(r, v, 0.7, 0.9, 0.0)
    np.testing.assert_allclose(
        adv, [1 + 0.9 * 0.2 - 0.1, 0 + 0.9 * 0.3 - 0.2, 2 + 0.9 * 0.7 - 0.3], rtol=1e-5
    )


def _segment(terminated: bool, truncated: bool) -> SampleBatch:
    return SampleBatch(
        {
            SampleBatch.REWARDS: np.array([1.0, 1.0], np.float32),
            SampleBatch.VF_PREDS: np.array([0.0, 0.0], np.float32),
            SampleBatch.TERMINATEDS: np.array([False, terminated]),
            SampleBatch.TRUNCATEDS: np.array([False, truncated]),
        }
    )


@pytest.mark.parametrize(
    ("terminated", "truncated", "needed"),
    [(True, False, False), (False, True, True), (False, False, True)],
)
def test_bootstrap_only_when_not_terminated(terminated, truncated, needed):
    assert bootstrap_needed(_segment(terminated, truncated)) is needed


def test_truncation_bootstraps_and_termination_does_not():
    g, v_final = 0.5, 10.0
    term = compute_advantages(_segment(True, False), 0.0, gamma=g, lambda_=1.0)
    trunc = compute_advantages(_segment(False, True), v_final, gamma=g, lambda_=1.0)
    np.testing.assert_allclose(term[SampleBatch.VALUE_TARGETS], [1 + g, 1])
    np.testing.assert_allclose(trunc[SampleBatch.VALUE_TARGETS], [1 + g + g * g * 10, 1 + g * 10])


def test_returns_without_gae_and_critic():
    b = compute_advantages(_segment(False, True), 4.0, gamma=0.5, use_gae=False, use_critic=False)
    np.testing.assert_allclose(b[SampleBatch.ADVANTAGES], [1 + 0.5 + 0.25 * 4, 1 + 0.5 * 4])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=8),
    st.floats(0.5, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31),
)
def test_vectorised_gae_equals_per_segment(lengths, gamma, lam, seed):
    from hierl.postprocessing import compute_gae_segments

    rng = np.random.default_rng(seed)
    n = sum(lengths)
    r, v, boot = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    ends = np.zeros(n, dtype=bool)
    ends[np.cumsum(lengths) - 1] = True
    adv, targets = compute_gae_segments(r, v, ends, boot, gamma, lam)
    start = 0
    for length in lengths:
        end = start + length
        a, t = compute_gae(r[start:end], v[start:end], boot[end - 1], gamma, lam)
        np.testing.assert_allclose(adv[start:end], a, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(targets[start:end], t, rtol=1e-4, atol=1e-4)
        start = end
