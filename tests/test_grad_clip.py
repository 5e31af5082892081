"""Gradient-norm clipping: ``hierl.torch_policy_graph.clip_grad_norm`` against torch's
``clip_grad_norm_``, and the ``grad_gnorm`` a policy reports after clipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.algorithms.ppo import PPOConfig, PPOPolicy
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.torch_policy_graph import clip_grad_norm

pytestmark = pytest.mark.timeout(120)

shapes = st.lists(
    st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple), min_size=1, max_size=5
)


def _params(shape_list, scale: float, seed: int, with_none: bool) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = []
    for i, shape in enumerate(shape_list):
        p = torch.nn.Parameter(torch.zeros(shape))
        if not (with_none and i == 0):
            p.grad = torch.randn(shape, generator=gen) * scale
        params.append(p)
    return params


@settings(max_examples=60, deadline=None)
@given(
    shape_list=shapes,
    scale=st.floats(1e-4, 1e3),
    max_norm=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**16),
    with_none=st.booleans(),
)
def test_clip_grad_norm_matches_torch(shape_list, scale, max_norm, seed, with_none):
    ours = _params(shape_list, scale, seed, with_none)
    ref = _params(shape_list, scale, seed, with_none)
    norm = clip_grad_norm(ours, max_norm)
    ref_norm = torch.nn.utils.clip_grad_norm_(ref, max_norm, foreach=True)
    torch.testing.assert_close(norm, ref_norm, rtol=1e-6, atol=0)
    for a, b in zip(ours, ref, strict=True):
        if b.grad is None:
            assert a.grad is None
        else:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)
    grads = [p.grad.flatten() for p in ours if p.grad is not None]
    if grads:  # the norm after clipping: min(norm, ~max_norm)
        clipped = float(torch.linalg.vector_norm(torch.cat(grads)))
        n = float(norm)
        assert clipped == pytest.approx(n * min(1.0, max_norm / (n + 1e-6)), rel=1e-5)


def test_clip_grad_norm_without_gradients_is_zero_and_changes_nothing():
    params = [torch.nn.Parameter(torch.ones(3))]
    assert float(clip_grad_norm(params, 0.5)) == 0.0
    assert params[0].grad is None


def test_policy_reports_the_norm_before_clipping_and_steps_on_the_clipped_gradient():
    """``grad_gnorm`` is the unclipped norm; the step uses gradients scaled to ``grad_clip``."""
    torch.manual_seed(0)
    config = PPOConfig.from_dict({"model": {"hiddens": [8]}, "grad_clip": 1e-3})
    ev = PolicyEvaluator(
        EvaluatorSpec.of(
            "CartPole-v1",
            PPOPolicy,
            config,
            num_envs_per_evaluator=1,
            rollout_fragment_length=64,
            seed=0,
        )
    )
    policy = ev.policy
    batch = ev.sample()
    raw, _ = policy.compute_gradients(batch, clip=False)
    raw_norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in raw)))
    clipped, stats = policy.compute_gradients(batch, clip=True)
    assert stats["grad_gnorm"] == pytest.approx(raw_norm, rel=1e-5)
    assert raw_norm > 1e-3  # so clipping scaled them
    clipped_norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in clipped)))
    assert clipped_norm == pytest.approx(1e-3, rel=1e-4)
    for g, r in zip(clipped, raw, strict=True):
        np.testing.assert_allclose(g, r * (1e-3 / (raw_norm + 1e-6)), rtol=1e-4, atol=1e-9)
