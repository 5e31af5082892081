"""``benchmarks/mcts_search.py``: the baseline replays exactly the network calls the
search made (so the ratio is the network's share of the search), and the script runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hierl.algorithms.alphazero import AlphaZeroConfig, AlphaZeroPolicy
from hierl.algorithms.alphazero.policy import evaluate_boards
from tests.support.benchmarks import import_benchmark

SMALL = {
    "env": "hierl/ConnectFour-v0",
    "env_config": {"rows": 4, "cols": 5},
    "network": "conv",
    "conv_channels": 8,
    "hidden_sizes": [16],
    "num_simulations": 6,
    "num_envs_per_self_play_worker": 3,
}


@pytest.fixture(scope="module")
def bench():
    return import_benchmark("mcts_search")


def test_the_baseline_replays_the_search_s_network_calls(bench):
    torch.manual_seed(0)
    np.random.seed(0)  # the policy's search RNG
    policy = AlphaZeroPolicy(None, None, AlphaZeroConfig.from_dict(SMALL))
    game = policy.game
    boards = bench.random_positions(game, 5, 8, seed=1)
    assert all(game.outcome(b) is None for b in boards)
    assert len({b.tobytes() for b in boards}) > 1  # random games, not one position
    recorder = bench.RecordingEvaluator(policy)
    mcts = policy.make_mcts(6)
    mcts.evaluate = recorder
    mcts.search_roots(boards, add_noise=True)
    # the roots' call, then one per simulation round (no 6-move game ends in 6 plies
    # on every board at once); each batch is the boards the network saw
    assert len(recorder.batches) == mcts.num_evaluations == 7
    assert len(recorder.batches[0]) == 5 and all(1 <= len(b) <= 5 for b in recorder.batches)
    np.testing.assert_array_equal(recorder.batches[0], np.stack(boards))
    # the baseline's computation is the search's evaluation, call for call
    batch = recorder.batches[-1]
    with torch.inference_mode():
        logits, _ = policy.model(torch.from_numpy(game.to_planes(batch)))
    priors, _ = evaluate_boards(policy.model, game, batch)
    np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), priors, rtol=1e-6)


def test_run_reports_consistent_figures(bench):
    figures = bench.run(AlphaZeroConfig.from_dict(SMALL), positions=3, rounds=2, seed=0)
    assert figures["network_calls_per_search"] == 7
    assert figures["moves_per_s"] == pytest.approx(3 / figures["search_s"])
    assert figures["simulations_per_s"] == pytest.approx(18 / figures["search_s"])
    share = figures["network_only_s"] / figures["search_s"]
    assert share > 0 and figures["network_share"] == pytest.approx(share)


def test_load_config_reads_a_tuned_file_and_refuses_another_algorithm(bench, tmp_path):
    config = bench.load_config(bench.DEFAULT_FILE)
    assert config.env == "hierl/ConnectFour-v0" and config.reuse_tree
    other = tmp_path / "ppo.yaml"
    other.write_text("x:\n  run: PPO\n  env: CartPole-v1\n")
    with pytest.raises(SystemExit, match="runs PPO, not ALPHAZERO"):
        bench.load_config(other)
