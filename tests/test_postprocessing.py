"""Closed-form checks of discounting, GAE and n-step returns, incl. termination vs truncation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.postprocessing import (
    N_STEP_DISCOUNTS,
    bootstrap_needed,
    compute_advantages,
    compute_gae,
    compute_n_step,
    discount_cumsum,
)
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


# -- n-step returns -----------------------------------------------------------------------
def _steps(rewards, terminated=False, truncated=False, eps_id=None) -> SampleBatch:
    """One segment; NEW_OBS of row t is [t + 1] so tests can see which row it came from."""
    n = len(rewards)
    ends = np.zeros(n, dtype=bool)
    ends[-1] = True
    batch = SampleBatch(
        {
            SampleBatch.OBS: np.arange(n, dtype=np.float32)[:, None],
            SampleBatch.NEW_OBS: np.arange(1, n + 1, dtype=np.float32)[:, None],
            SampleBatch.REWARDS: np.asarray(rewards, np.float32),
            SampleBatch.TERMINATEDS: ends & terminated,
            SampleBatch.TRUNCATEDS: ends & truncated,
        }
    )
    if eps_id is not None:
        batch[SampleBatch.EPS_ID] = np.full(n, eps_id)
    return batch


def test_n_step_episode_terminating_inside_the_window():
    g = 0.5
    out = compute_n_step(_steps([1.0, 2.0, 3.0, 4.0], terminated=True), n=3, gamma=g)
    np.testing.assert_allclose(
        out[SampleBatch.REWARDS],
        [1 + g * 2 + g * g * 3, 2 + g * 3 + g * g * 4, 3 + g * 4, 4],
        rtol=1e-6,
    )
    # the window of rows 1-3 reaches the terminal step: shortened, no bootstrap
    np.testing.assert_array_equal(out[SampleBatch.NEW_OBS][:, 0], [3, 4, 4, 4])
    np.testing.assert_array_equal(out[SampleBatch.TERMINATEDS], [False, True, True, True])
    np.testing.assert_allclose(out[N_STEP_DISCOUNTS], [g**3, g**3, g**2, g])
    np.testing.assert_array_equal(out[SampleBatch.OBS][:, 0], [0, 1, 2, 3])  # untouched


@pytest.mark.parametrize("truncated", [True, False])  # time limit, or a fragment cut
def test_n_step_truncated_or_cut_segments_still_bootstrap(truncated):
    g = 0.9
    batch = _steps([1.0, 1.0, 1.0], truncated=truncated)
    out = compute_n_step(batch, n=2, gamma=g)
    np.testing.assert_allclose(out[SampleBatch.REWARDS], [1 + g, 1 + g, 1], rtol=1e-6)
    np.testing.assert_array_equal(out[SampleBatch.NEW_OBS][:, 0], [2, 3, 3])
    assert not out[SampleBatch.TERMINATEDS].any()  # every row bootstraps
    np.testing.assert_array_equal(out[SampleBatch.TRUNCATEDS], [False, truncated, truncated])
    np.testing.assert_allclose(out[N_STEP_DISCOUNTS], [g**2, g**2, g], rtol=1e-6)
    # the input batch keeps its 1-step columns
    np.testing.assert_array_equal(batch[SampleBatch.NEW_OBS][:, 0], [1, 2, 3])
    assert N_STEP_DISCOUNTS not in batch


def test_n_step_windows_stop_at_segment_boundaries():
    g = 0.5
    a = _steps([1.0, 2.0, 3.0], terminated=True, eps_id=7)
    b = _steps([10.0, 20.0], eps_id=9)  # cut mid-episode
    c = _steps([5.0], terminated=True, eps_id=7)  # the same id again, later: a new segment
    batch = SampleBatch.concat_samples([a, b, c])
    out = compute_n_step(batch, n=3, gamma=g)
    np.testing.assert_allclose(
        out[SampleBatch.REWARDS],
        [1 + g * 2 + g * g * 3, 2 + g * 3, 3, 10 + g * 20, 20, 5],
        rtol=1e-6,
    )
    np.testing.assert_array_equal(out[SampleBatch.NEW_OBS][:, 0], [3, 3, 3, 2, 2, 1])
    np.testing.assert_array_equal(
        out[SampleBatch.TERMINATEDS], [True, True, True, False, False, True]
    )
    np.testing.assert_allclose(out[N_STEP_DISCOUNTS], [g**3, g**2, g, g**2, g, g])


def test_one_step_is_the_identity_plus_gamma():
    batch = _steps([1.0, -2.0, 3.0], terminated=True)
    out = compute_n_step(batch, n=1, gamma=0.97)
    for k in batch:
        np.testing.assert_array_equal(out[k], batch[k])
    np.testing.assert_allclose(out[N_STEP_DISCOUNTS], [0.97] * 3, rtol=1e-6)
    with pytest.raises(ValueError, match="n-step length must be >= 1, got 0"):
        compute_n_step(batch, n=0, gamma=0.97)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=6),
    st.integers(1, 5),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31),
)
def test_vectorised_n_step_equals_a_loop_over_rows(lengths, n, gamma, seed):
    rng = np.random.default_rng(seed)
    segments = [
        _steps(rng.normal(size=k), terminated=bool(rng.integers(2)), eps_id=i)
        for i, k in enumerate(lengths)
    ]
    out = compute_n_step(SampleBatch.concat_samples(segments), n, gamma)
    row = 0
    for seg in segments:
        r = seg[SampleBatch.REWARDS].astype(np.float64)
        for t in range(seg.count):
            m = min(n, seg.count - t)
            expected = sum(gamma**k * r[t + k] for k in range(m))
            assert out[SampleBatch.REWARDS][row] == pytest.approx(expected, rel=1e-4, abs=1e-4)
            assert out[N_STEP_DISCOUNTS][row] == pytest.approx(gamma**m, rel=1e-5, abs=1e-7)
            assert out[SampleBatch.TERMINATEDS][row] == seg[SampleBatch.TERMINATEDS][t + m - 1]
            assert out[SampleBatch.NEW_OBS][row, 0] == t + m
            row += 1
