"""V-trace (``hierl.postprocessing.vtrace``) against a per-step reference of IMPALA's
eq. 1, and on on-policy data against GAE / n-step returns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.postprocessing import compute_advantages, trajectory_ends, vtrace
from hierl.sample_batch import SampleBatch as SB


def _clip(x: float, bound: float | None) -> float:
    return x if bound is None else min(bound, x)


def reference_vtrace(
    log_rhos, rewards, values, bootstrap, ends, gamma, lam, rho_bar, pg_bar, c_bar
):
    """Eq. 1 of Espeholt et al. 2018 term by term, one run at a time (float64 loops)."""
    n = len(rewards)
    vs, pg = np.zeros(n), np.zeros(n)
    start = 0
    for end in np.flatnonzero(ends):
        v_next = [*values[start + 1 : end + 1], bootstrap[end]]  # V(x_{t+1}) for t in the run
        for s in range(start, end + 1):
            total = 0.0
            for t in range(s, end + 1):
                rho_t = _clip(math.exp(log_rhos[t]), rho_bar)
                delta = rho_t * (rewards[t] + gamma * v_next[t - start] - values[t])
                c_prod = math.prod(lam * _clip(math.exp(log_rhos[i]), c_bar) for i in range(s, t))
                total += gamma ** (t - s) * c_prod * delta
            vs[s] = values[s] + total
        for s in range(start, end + 1):
            after = vs[s + 1] if s < end else bootstrap[end]
            pg[s] = _clip(math.exp(log_rhos[s]), pg_bar) * (rewards[s] + gamma * after - values[s])
        start = end + 1
    return vs, pg


def _runs(draw, n: int) -> np.ndarray:
    ends = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    ends[-1] = True
    return ends


floats = st.floats(-5, 5, allow_nan=False, width=64)
thresholds = st.sampled_from([None, 0.5, 1.0, 2.0])


@st.composite
def vtrace_inputs(draw):
    n = draw(st.integers(1, 30))
    arrays = [np.array(draw(st.lists(floats, min_size=n, max_size=n))) for _ in range(4)]
    log_rhos = np.clip(arrays[0] / 2.5, -2, 2)
    return dict(
        log_rhos=log_rhos,
        rewards=arrays[1],
        values=arrays[2],
        bootstrap=arrays[3],
        ends=_runs(draw, n),
        gamma=draw(st.floats(0, 1)),
        lam=draw(st.floats(0, 1)),
        rho_bar=draw(thresholds),
        pg_bar=draw(thresholds),
        c_bar=draw(thresholds),
    )


def _vtrace(x, **overrides):
    x = {**x, **overrides}
    t = {k: torch.as_tensor(x[k]) for k in ("log_rhos", "rewards", "values", "bootstrap")}
    return vtrace(
        t["log_rhos"],
        t["rewards"],
        t["values"],
        t["bootstrap"],
        x["ends"],
        x["gamma"],
        x["lam"],
        clip_rho_threshold=x["rho_bar"],
        clip_pg_rho_threshold=x["pg_bar"],
        clip_c_threshold=x["c_bar"],
    )


@settings(max_examples=150, deadline=None)
@given(vtrace_inputs())
def test_vtrace_equals_the_per_step_reference(x):
    out = _vtrace(x)
    vs, pg = reference_vtrace(**x)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.rhos.numpy(), np.exp(x["log_rhos"]), rtol=1e-12)


def _batch_of_runs(x) -> tuple[SB, np.ndarray]:
    ends = x["ends"]
    eps_id = np.concatenate(([0], np.cumsum(ends[:-1])))
    batch = SB(
        {
            SB.REWARDS: x["rewards"].astype(np.float32),
            SB.VF_PREDS: x["values"].astype(np.float32),
            SB.EPS_ID: eps_id,
        }
    )
    return batch, np.where(ends, x["bootstrap"], 0.0)


@settings(max_examples=100, deadline=None)
@given(vtrace_inputs())
def test_on_policy_vtrace_is_the_gae_lambda_return(x):
    """rho = c = 1 (on-policy, thresholds >= 1): v_s is GAE(lambda)'s value target; with
    lambda = 1 the policy-gradient advantage is GAE(1)'s (the n-step return minus V)."""
    on_policy = dict(log_rhos=np.zeros_like(x["log_rhos"]), rho_bar=1.0, pg_bar=None, c_bar=2.0)
    batch, boot = _batch_of_runs(x)
    gae = compute_advantages(batch, boot, x["gamma"], x["lam"], use_gae=True)
    out = _vtrace(x, **on_policy)
    np.testing.assert_allclose(out.vs.numpy(), gae[SB.VALUE_TARGETS], rtol=1e-4, atol=1e-4)
    batch, boot = _batch_of_runs(x)
    gae1 = compute_advantages(batch, boot, x["gamma"], 1.0, use_gae=True)
    out1 = _vtrace(x, lam=1.0, **on_policy)
    np.testing.assert_allclose(
        out1.pg_advantages.numpy(), gae1[SB.ADVANTAGES], rtol=1e-4, atol=1e-4
    )
    nstep = compute_advantages(batch, boot, x["gamma"], use_gae=False)  # returns minus V
    np.testing.assert_allclose(out1.vs.numpy(), nstep[SB.VALUE_TARGETS], rtol=1e-4, atol=1e-4)


def test_vtrace_closed_form_two_steps():
    """Two steps, one run: v_1 = V1 + rho1 (r1 + g B - V1); v_0 = V0 + rho0 (r0 + g V1 - V0)
    + g c0 (v_1 - V1), with rho = min(1, e^lr), c = lam min(1, e^lr)."""
    lr, r, v, b, g, lam = [math.log(2.0), math.log(0.5)], [1.0, 2.0], [0.5, -1.0], 3.0, 0.9, 0.8
    x = dict(log_rhos=np.array(lr), rewards=np.array(r), values=np.array(v))
    x.update(bootstrap=np.array([0.0, b]), ends=np.array([False, True]), gamma=g, lam=lam)
    out = _vtrace(x, rho_bar=1.0, pg_bar=1.0, c_bar=1.0)
    v1 = v[1] + 0.5 * (r[1] + g * b - v[1])
    v0 = v[0] + 1.0 * (r[0] + g * v[1] - v[0]) + g * lam * 1.0 * (v1 - v[1])
    np.testing.assert_allclose(out.vs.numpy(), [v0, v1], rtol=1e-12)
    np.testing.assert_allclose(
        out.pg_advantages.numpy(), [r[0] + g * v1 - v[0], 0.5 * (r[1] + g * b - v[1])], rtol=1e-12
    )


@pytest.mark.parametrize(
    ("eps_id", "t", "expected"),
    [
        ([1, 1, 1, 2, 2], None, [0, 0, 1, 0, 1]),
        ([1, 1, 1, 1], [0, 1, 5, 6], [0, 1, 0, 1]),  # two pieces of one episode
        ([7], [3], [1]),
        ([], [], []),
    ],
)
def test_trajectory_ends(eps_id, t, expected):
    ends = trajectory_ends(np.array(eps_id), None if t is None else np.array(t))
    assert ends.tolist() == [bool(e) for e in expected]
