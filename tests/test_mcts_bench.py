"""``benchmarks/mcts_search.py``: the baseline replays exactly the network calls the
search made (so the ratio is the network's share of the search), and the script runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hierl.algorithms.alphazero import AlphaZeroConfig, AlphaZeroPolicy, AlphaZeroTrainer
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


def test_self_play_with_tree_reuse_skips_the_root_call_of_kept_subtrees(bench):
    # 3 games of 4x5 Connect Four, 4 plies each (no game can end): without reuse every
    # move is a root call plus one per simulation round (1 + 6); with reuse the first
    # move is too, and a later one skips the root call (6) when all three boards search
    # from kept subtrees (two games on one board share one: the other starts afresh).
    figures = bench.run_reuse(
        AlphaZeroConfig.from_dict(SMALL), games=3, plies=4, rounds=1, seed=0, checkpoint=None
    )
    assert figures["fresh"]["network_calls_per_move"] == 7.0
    assert (7 + 3 * 6) / 4 <= figures["reuse"]["network_calls_per_move"] < 7.0
    for mode in ("fresh", "reuse"):  # every simulation descends from an expanded root
        assert figures[mode]["selections_per_simulation"] >= 1.0
    ratio = figures["reuse"]["moves_per_s"] / figures["fresh"]["moves_per_s"]
    assert figures["reuse_over_fresh_moves_per_s"] == pytest.approx(ratio)


def test_a_checkpoint_s_best_network_replaces_the_fresh_one(bench, tmp_path):
    config = AlphaZeroConfig.from_dict({**SMALL, "num_self_play_workers": 0, "seed": 7})
    trainer = AlphaZeroTrainer(config)
    try:
        path = trainer.save(tmp_path / "ckpt")
        best = trainer.best_policy.model.state_dict()
    finally:
        trainer.stop()
    policy = bench.make_policy(config, seed=1, checkpoint=Path(path))
    for name, tensor in policy.model.state_dict().items():
        torch.testing.assert_close(tensor, best[name])
    fresh = bench.make_policy(config, seed=1).model.state_dict()
    assert any(not torch.equal(fresh[k], best[k]) for k in best)
