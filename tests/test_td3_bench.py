"""``benchmarks/td3_update.py``: the pure-torch baseline does the same update as hierl's
TD3 (so the ratio compares like with like), and the script runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.benchmarks import import_benchmark


@pytest.fixture(scope="module")
def bench():
    return import_benchmark("td3_update")


def test_the_baseline_update_equals_hierl_s(bench):
    """Four updates (two with the actor's step and the Polyak update): every network and
    its target copy end with the same weights on both sides, to 1e-6, after each moved by
    more than that."""
    policy = bench.make_policy(hiddens=(32, 32))
    baseline = bench.TorchTD3(policy)
    batch = import_benchmark("update_timing").replay_batch(rows=64)
    inputs = import_benchmark("update_timing").tensors(batch)
    for step in range(4):
        torch.manual_seed(step)  # the target smoothing noise
        policy.learn_on_replay_batch(batch)
        torch.manual_seed(step)
        baseline.update(*inputs)
    model = policy.model
    pairs = [
        (model.actor.net, baseline.actor),
        (model.target_actor.net, baseline.actor_target),
        (model.critic.net, baseline.q1),
        (model.critic2.net, baseline.q2),
        (model.target_critic.net, baseline.q1_target),
        (model.target_critic2.net, baseline.q2_target),
    ]
    for ours, theirs in pairs:
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=1e-6)
    start = bench.make_policy(hiddens=(32, 32)).model
    for online in ("actor", "target_actor", "critic2"):  # moved: the comparison can fail
        moved = max(
            float((a - b).detach().abs().max())
            for a, b in zip(
                getattr(start, online).parameters(),
                getattr(model, online).parameters(),
                strict=True,
            )
        )
        assert moved > 2e-6, online  # twice the tolerance
    assert baseline.updates == policy.num_updates == 4


def test_measure_reports_both_sides_and_their_ratio(bench):
    figures = bench.measure(updates=2, rounds=1, hiddens=(16, 16))
    assert figures["hierl_updates_per_s"] > 0 and figures["torch_updates_per_s"] > 0
    ratio = figures["hierl_updates_per_s"] / figures["torch_updates_per_s"]
    assert figures["ratio_of_medians"] == pytest.approx(ratio)
    with pytest.raises(SystemExit, match="even count"):
        bench.measure(updates=3, rounds=1, hiddens=(16, 16))
