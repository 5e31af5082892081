"""``benchmarks/sac_update.py``: the pure-torch baseline does the same update as hierl's
SAC (so the ratio compares like with like), and the script runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.benchmarks import import_benchmark


@pytest.fixture(scope="module")
def bench():
    return import_benchmark("sac_update")


def test_the_baseline_update_equals_hierl_s(bench):
    policy = bench.make_policy(hiddens=(32, 32))
    baseline = bench.TorchSAC(policy)
    batch = import_benchmark("update_timing").replay_batch(rows=64)
    inputs = import_benchmark("update_timing").tensors(batch)
    for step in range(3):
        torch.manual_seed(step)
        policy.learn_on_replay_batch(batch)
        torch.manual_seed(step)
        baseline.update(*inputs)
    model = policy.model
    pairs = [
        (model.actor.net, baseline.actor),
        (model.critic.net, baseline.q1),
        (model.critic2.net, baseline.q2),
        (model.target_critic.net, baseline.q1_target),
        (model.target_critic2.net, baseline.q2_target),
    ]
    moved = 0.0
    for ours, theirs in pairs:
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-5)
    start = bench.make_policy(hiddens=(32, 32)).model.actor.net
    for a, b in zip(start.parameters(), model.actor.net.parameters(), strict=True):
        moved = max(moved, float((a - b).detach().abs().max()))
    assert moved > 1e-4  # three updates moved the weights: the comparison can fail
    assert float(model.log_alpha.detach()) == pytest.approx(
        float(baseline.log_alpha.detach()), abs=1e-6
    )
    assert float(model.log_alpha.detach()) != 0.0


def test_measure_reports_both_sides_and_their_ratio(bench):
    figures = bench.measure(updates=2, rounds=1, hiddens=(16, 16))
    assert figures["hierl_updates_per_s"] > 0 and figures["torch_updates_per_s"] > 0
    ratio = figures["hierl_updates_per_s"] / figures["torch_updates_per_s"]
    assert figures["ratio_of_medians"] == pytest.approx(ratio)
    (hierl,), (torch_rate,) = figures["hierl_rounds"], figures["torch_rounds"]
    assert figures["ratio"] == pytest.approx(hierl / torch_rate)  # one pair: its ratio


@pytest.mark.parametrize("algo", ["SAC", "TD3"])
def test_sb3_peer_of_learning_py_gets_the_experiment_s_settings(algo, tmp_path):
    pytest.importorskip("stable_baselines3")  # the bench extra: not in README's test install
    from hierl.tune.experiments import load_experiments

    learning = import_benchmark("learning")
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"x:\n  run: {algo}\n  env: Pendulum-v1\n  config:\n    tau: 0.01\n"
        "    model: {hiddens: [32, 16], activation: relu}\n"
        "    timesteps_per_iteration: 100\n    evaluation_interval: 1\n"
        "    optimizer_config: {learning_starts: 50, buffer_size: 5000}\n"
    )
    ((_, spec),) = load_experiments(str(path)).items()
    model, _, _ = learning.SB3_PEERS[algo](spec, seed=3)
    assert (model.tau, model.gamma, model.batch_size) == (0.01, 0.99, 256)
    assert (model.learning_starts, model.buffer_size) == (50, 5000)
    assert model.policy_kwargs["net_arch"] == [32, 16]
    assert model.learning_rate == 3e-4  # SAC: lr; TD3: actor_lr = critic_lr
    if algo == "SAC":
        assert model.target_entropy == -1.0 and float(model.log_ent_coef.detach().exp()) == 1.0
    else:
        assert model.policy_delay == 2 and model.target_policy_noise == 0.2
    csv_path = learning.run_sb3(spec, 3, 200, tmp_path)  # evaluated every 100 steps
    rows = learning.read_curve(csv_path)
    assert [r["timesteps"] for r in rows] == [100, 200]
