"""Acting from AlphaZero checkpoints: the player without Ray, acting settings, built-in
opponents on closed-form positions, matches, ``hierl play`` (terminal and matches),
``hierl export`` / ``serve`` / ``rollout`` of an AlphaZero checkpoint."""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from hierl.algorithms.alphazero import AlphaZeroPlayer, AlphaZeroTrainer
from hierl.algorithms.alphazero.export import SEARCH_NOTE, export_network
from hierl.algorithms.alphazero.games import ConnectFour, RandomPlayer, TicTacToe
from hierl.algorithms.alphazero.match import play_match
from hierl.algorithms.alphazero.opponents import (
    AlphaBetaPlayer,
    RolloutMCTSPlayer,
    make_opponent,
)
from hierl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from hierl.cli import main
from hierl.cli.play import play_human
from hierl.evaluators.wire import WireError
from hierl.serve.search import ServedSearch
from tests.support.benchmarks import import_benchmark

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "connect_four.py"
C4 = {"env": "hierl/ConnectFour-v0", "env_config": {"rows": 4, "cols": 5}}
TINY = {
    "num_self_play_workers": 0,
    "num_envs_per_self_play_worker": 4,
    "learning_starts": 128,
    "train_batch_size": 32,
    "sgd_steps_per_round": 4,
    "num_simulations": 8,
    "arena_games": 4,
    "strength_games": 2,
    "hidden_sizes": [16],
    "conv_channels": 4,
    "time_budget_s": None,
    "train_rounds_per_iter": 1,
    "seed": 0,
}


def _checkpoint(path, **config):
    with AlphaZeroTrainer({**TINY, **config}) as trainer:
        trainer.train()
        saved = trainer.save(path)
        weights = trainer.best_policy.get_weights()
    return saved, weights


@pytest.fixture(scope="module")
def c4(tmp_path_factory):
    """A 4x5 Connect Four checkpoint after one iteration, and its best weights."""
    return _checkpoint(tmp_path_factory.mktemp("az") / "c4", **C4)


@pytest.fixture(scope="module")
def ttt(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("az") / "ttt", env="hierl/TicTacToe-v0")[0]


def _board(game, mine=(), theirs=()):
    """A canonical board with the mover's (+1) and the opponent's (-1) stones at (row, col)."""
    board = game.initial_board()
    for r, c in mine:
        board[r, c] = 1
    for r, c in theirs:
        board[r, c] = -1
    return board


# -- 1. acting without Ray -------------------------------------------------------------
def test_acting_loads_only_the_best_model_without_ray_or_an_optimizer(c4, tmp_path):
    path, weights = c4
    # Acting builds the network alone: no Ray, and no Adam, whose first construction
    # imports torch._dynamo (seconds; the regression 895b8c9 fixed).
    script = f"""
import json, sys
from hierl.algorithms.alphazero import AlphaZeroTrainer
player = AlphaZeroTrainer.load_player({str(path)!r}, simulations=4)
move = player.compute_single_action(player.game.to_planes(player.game.initial_board()))
import ray
print(json.dumps({{"ray": ray.is_initialized(), "dynamo": "torch._dynamo" in sys.modules,
                  "move": move}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["ray"] is False  # no Ray, so no actor either
    assert report["dynamo"] is False, "acting built an optimizer"
    assert 0 <= report["move"] < 5
    player = AlphaZeroPlayer.from_checkpoint(path)
    got = player.get_weights()
    assert set(got) == set(weights)
    assert all(np.array_equal(got[k], weights[k]) for k in weights)


def test_load_checkpoint_keys_leave_the_other_entries_unread(tmp_path):
    path = save_checkpoint(tmp_path / "c", {"algorithm": "X"}, {"a": np.ones(3), "b": np.zeros(2)})
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["state"]["b"]["__array__"] = "missing"  # reading b would fail
    (path / "checkpoint.json").write_text(json.dumps(meta))
    _, state = load_checkpoint(path, keys=("a",))
    assert list(state) == ["a"] and np.array_equal(state["a"], np.ones(3))
    with pytest.raises(CheckpointError, match="no array 'missing'"):
        load_checkpoint(path)


def test_acting_settings_are_arguments(c4):
    player = AlphaZeroPlayer.from_checkpoint(c4[0], simulations=12)
    board = player.game.initial_board()
    (result,) = player.search([board])
    assert result.simulations == 12 and np.isclose(result.visits.sum(), 1.0)
    assert -1.0 <= result.value <= 1.0
    assert player.search([board], simulations=30)[0].simulations == 30
    assert player.simulations == 12 and player.config.num_simulations == 8  # training's
    # greedy is deterministic; noise and temperature change what is played
    greedy = {player.with_settings(seed=s).search([board])[0].visits.tobytes() for s in range(5)}
    sampled = {
        player.with_settings(temperature=1.0, noise=0.5, seed=s).select_moves([board])[0]
        for s in range(20)
    }
    assert len(greedy) == 1 and len(sampled) > 1
    noisy = player.with_settings(noise=1.0, seed=0).search([board])[0].visits
    assert not np.array_equal(noisy, result.visits)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"simulations": 0}, "simulations=0 is invalid"),
        ({"temperature": -1.0}, "temperature=-1.0 is invalid"),
        ({"temperature": float("nan")}, "temperature=nan is invalid"),
        ({"noise": 1.5}, "noise=1.5 is invalid"),
    ],
)
def test_bad_acting_settings_name_the_value(c4, settings, words):
    with pytest.raises(ValueError, match=words):
        AlphaZeroPlayer.from_checkpoint(c4[0], **settings)


def test_a_checkpoint_of_another_algorithm_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "ppo", {"algorithm": "PPO", "config": {}}, {})
    with pytest.raises(CheckpointError, match="checkpoint of PPO, not of ALPHAZERO"):
        AlphaZeroPlayer.from_checkpoint(path)


# -- 2. built-in opponents on closed-form positions ------------------------------------
C6x7 = ConnectFour()


def test_alphabeta_finds_the_forced_win_of_an_open_three():
    # bottom row: the mover's stones at columns 2 and 3, the opponent's on top of them;
    # playing 1 or 4 makes an open three: two threats, the opponent blocks one
    board = _board(C6x7, mine=[(5, 2), (5, 3)], theirs=[(4, 2), (4, 3)])
    for seed in range(3):
        ab = AlphaBetaPlayer(C6x7, depth=4, seed=seed)
        (move,) = ab.select_moves([board])
        assert move in (1, 4)
        after = C6x7.next_board(board, move)
        for reply in np.flatnonzero(C6x7.legal_mask(after)):
            mine = C6x7.next_board(after, reply)
            (win,) = ab.select_moves([mine])
            assert C6x7.outcome(C6x7.next_board(mine, win)) == -1.0  # the mover just won


@pytest.mark.parametrize("depth", [2, 4, 6])
def test_alphabeta_blocks_an_immediate_threat(depth):
    board = _board(C6x7, mine=[(4, 0), (4, 1), (5, 6)], theirs=[(5, 0), (5, 1), (5, 2)])
    assert AlphaBetaPlayer(C6x7, depth, seed=0).select_moves([board]) == [3]


def test_alphabeta_takes_a_win_in_one_and_refuses_other_games():
    board = _board(C6x7, mine=[(5, 0), (4, 0), (3, 0)], theirs=[(5, 1), (5, 2), (4, 1)])
    assert AlphaBetaPlayer(C6x7, 6, seed=0).select_moves([board]) == [0]
    with pytest.raises(ValueError, match="Connect Four only, not TicTacToe"):
        AlphaBetaPlayer(TicTacToe(), 4)
    with pytest.raises(ValueError, match="depth=0 is invalid"):
        AlphaBetaPlayer(C6x7, 0)


@pytest.mark.parametrize("seed", range(3))
def test_rollout_mcts_takes_a_win_in_one(seed):
    board = _board(C6x7, mine=[(5, 0), (4, 0), (3, 0)], theirs=[(5, 1), (5, 2), (4, 1)])
    assert RolloutMCTSPlayer(C6x7, 300, seed=seed).select_moves([board]) == [0]
    ttt = TicTacToe()  # X X . / O O . / . . .  with X to move: 2 wins
    tboard = _board(ttt, mine=[(0, 0), (0, 1)], theirs=[(1, 0), (1, 1)])
    assert RolloutMCTSPlayer(ttt, 300, seed=seed).select_moves([tboard]) == [2]


def test_rollout_mcts_beats_random_and_alphabeta_beats_rollout_mcts_of_few_rollouts():
    vs_random = play_match(C6x7, RolloutMCTSPlayer(C6x7, 200, seed=0), RandomPlayer(C6x7, 0), 6)
    assert vs_random.score >= 5 / 6
    ab = AlphaBetaPlayer(C6x7, 4, seed=0)
    assert play_match(C6x7, ab, RolloutMCTSPlayer(C6x7, 20, seed=0), 4, seed=0).score >= 0.75


# -- matches -----------------------------------------------------------------------------
class LowestMove:
    """Plays the lowest legal move: in Tic-Tac-Toe the first mover wins (0, 2, 4, 6)."""

    def __init__(self, game):
        self.game = game

    def select_moves(self, boards):
        return [int(np.flatnonzero(self.game.legal_mask(b))[0]) for b in boards]


def test_match_alternates_the_first_move_and_scores_wins_plus_half_draws():
    ttt = TicTacToe()
    result = play_match(ttt, LowestMove(ttt), LowestMove(ttt), 5)
    assert result.moved_first.tolist() == [True, False, True, False, True]
    assert result.scores.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert (result.wins, result.draws, result.losses) == (3, 0, 2) and result.score == 0.6
    from hierl.algorithms.alphazero.games import MinimaxPlayer

    perfect = play_match(ttt, MinimaxPlayer(ttt, 0), MinimaxPlayer(ttt, 1), 4)
    assert perfect.draws == 4 and perfect.score == 0.5
    with pytest.raises(ValueError, match="num_games=0 is invalid"):
        play_match(ttt, LowestMove(ttt), LowestMove(ttt), 0)


def test_random_openings_diversify_deterministic_games():
    ttt = TicTacToe()
    plain = play_match(ttt, LowestMove(ttt), LowestMove(ttt), 8)
    opened = play_match(ttt, LowestMove(ttt), LowestMove(ttt), 8, opening_moves=2, seed=0)
    assert len(set(plain.scores[plain.moved_first])) == 1
    assert not np.array_equal(plain.scores, opened.scores)
    again = play_match(ttt, LowestMove(ttt), LowestMove(ttt), 8, opening_moves=2, seed=0)
    assert np.array_equal(opened.scores, again.scores)


def test_make_opponent_names():
    assert isinstance(make_opponent("mcts", C6x7, rollouts=5), RolloutMCTSPlayer)
    assert make_opponent("alphabeta", C6x7, depth=8).depth == 8
    with pytest.raises(ValueError, match="unknown opponent 'minimax'; valid: random, mcts"):
        make_opponent("minimax", C6x7)


# -- hierl play --------------------------------------------------------------------------
def _score_line(out):
    (line,) = [ln for ln in out.splitlines() if ln.startswith("wins ")]
    return line


@pytest.mark.parametrize(
    "flags",
    [
        ["--opponent", "random"],
        ["--opponent", "mcts", "--rollouts", "20"],
        ["--opponent", "alphabeta", "--depth", "2", "--opening-moves", "1"],
    ],
)
def test_play_against_a_builtin_opponent_prints_the_score(c4, capsys, flags):
    assert main(["play", str(c4[0]), *flags, "--games", "4", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    line = _score_line(out)
    w, d, losses = (int(x) for x in re.findall(r"(\d+)", line.split(";")[0]))
    assert w + d + losses == 4
    assert f"score {(w + d / 2) / 4:.3f} (wins + draws/2 over 4 games)" in line
    assert "first move alternating" in out and "moving second: score" in out


def test_play_against_a_human_through_stdin(c4):
    # illegal answers are refused with one line and asked again; q ends the game
    out = subprocess.run(
        [sys.executable, "-m", "hierl.cli", "play", str(c4[0]), "--simulations", "4"],
        input="9\nabc\n1\nq\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "1 2 3 4 5" in text  # columns numbered
    assert "illegal move '9': type one of 1, 2, 3, 4, 5 (or q to quit)" in text
    assert "illegal move 'abc'" in text
    assert "X . . . ." in text and "model plays" in text
    assert text.rstrip().endswith("game abandoned")


@pytest.mark.parametrize("model_first", [False, True])
def test_a_whole_game_against_a_human_ends_with_its_result(c4, model_first):
    player = AlphaZeroPlayer.from_checkpoint(c4[0], simulations=4)
    lines = []

    def first_legal(prompt):
        return prompt.split("(")[1].split(",")[0].split(";")[0]

    assert play_human(player, model_first, first_legal, lines.append) == 0
    assert lines[-1] in ("draw", "the model wins", "you win")
    if model_first:
        assert lines[0] == "you play O, the model plays X; X moves first"
        assert lines[2].startswith("model plays")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--depth", "4"], "--depth is a setting of --opponent alphabeta, not human"),
        (["--opponent", "random", "--rollouts", "9"], "--rollouts is a setting of --opponent"),
        (["--opponent", "mcts", "--games", "0"], "'0' must be >= 1"),
        (["--opponent", "minimax"], "invalid choice: 'minimax'"),
        (["--opponent", "alphabeta", "--depth", "40"], "depth=40 is invalid"),
        (["--games", "3"], "--games and --opening-moves are for built-in opponents"),
        (["--opponent", "random", "--noise", "2"], "noise=2.0 is invalid"),
    ],
)
def test_bad_play_flags_get_one_line(c4, capsys, argv, words):
    assert main(["play", str(c4[0]), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("hierl: error: ")
    assert words in err


def test_alphabeta_on_tictactoe_is_one_line(ttt, capsys):
    assert main(["play", str(ttt), "--opponent", "alphabeta"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Connect Four only" in err


# -- 3. export and serve -----------------------------------------------------------------
def test_export_writes_the_network_with_a_note_that_search_is_not_in_it(c4, tmp_path, capsys):
    out = tmp_path / "exported"
    assert main(["export", str(c4[0]), "--output", str(out)]) == 0
    assert "search not included" in capsys.readouterr().err
    spec = json.loads((out / "policy.json").read_text())
    assert spec["search"] == SEARCH_NOTE and spec["algorithm"] == "ALPHAZERO"
    model = torch.jit.load(str(out / "policy.pt"))
    player = AlphaZeroPlayer.from_checkpoint(c4[0])
    boards = np.stack([_board(player.game, [(3, 1)], [(3, 2)]), player.game.initial_board()])
    with torch.no_grad():
        logits, value = model(torch.from_numpy(player.game.to_planes(boards)))
    priors, values = player.evaluate(boards)
    assert np.allclose(torch.softmax(logits, -1).numpy(), priors, atol=1e-5)
    assert np.allclose(value.numpy(), values, atol=1e-5)


def test_export_onnx(c4, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    player = AlphaZeroPlayer.from_checkpoint(c4[0])
    exported = export_network(player, tmp_path / "o", "onnx")
    session = onnxruntime.InferenceSession(str(exported.model_path))
    planes = player.game.to_planes(player.game.initial_board()[None])
    logits, value = session.run(None, {"board_planes": planes})
    assert logits.shape == (1, 5) and value.shape == (1,)


def test_export_of_a_resnet_checkpoint_matches_its_player(tmp_path):
    resnet = {"network": "resnet", "conv_channels": 4, "res_blocks": 1, **C4}
    trainer = AlphaZeroTrainer({**TINY, **resnet})
    try:
        trainer.train()  # one iteration, saved as a run saves it
        path = trainer.save(tmp_path / "resnet")
    finally:
        trainer.stop()
    player = AlphaZeroPlayer.from_checkpoint(path)
    boards = np.stack([_board(player.game, [(3, 1)], [(3, 2)]), player.game.initial_board()])
    priors, values = player.evaluate(boards)
    planes = player.game.to_planes(boards)
    model = torch.jit.load(str(export_network(player, tmp_path / "pt", "torchscript").model_path))
    with torch.no_grad():
        logits, value = model(torch.from_numpy(planes))
    np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), priors, atol=1e-5)
    np.testing.assert_allclose(value.numpy(), values, atol=1e-5)
    onnxruntime = pytest.importorskip("onnxruntime")
    exported = export_network(player, tmp_path / "onnx", "onnx")
    session = onnxruntime.InferenceSession(str(exported.model_path))
    logits, value = session.run(None, {"board_planes": planes})
    np.testing.assert_allclose(torch.softmax(torch.from_numpy(logits), -1), priors, atol=1e-5)
    np.testing.assert_allclose(value, values, atol=1e-5)


def test_served_search_answers_a_board_with_move_visits_and_value(c4):
    served = ServedSearch.from_checkpoint(c4[0], max_simulations=50)
    assert served.spec()["default_simulations"] == 8
    # absolute board: the first player (1) has one stone more: the second is to move
    board = [[0] * 5, [0] * 5, [0] * 5, [0, 0, 1, 0, 0]]
    query = served.parse({"board": board, "simulations": 20})
    (answer,) = served.act([query])
    assert answer["simulations"] == 20 and answer["to_play"] == 1
    assert np.isclose(sum(answer["visits"]), 1.0) and -1 <= answer["value"] <= 1
    canonical = -np.asarray(board, dtype=np.int8)
    expected = served.player.search([canonical], 20)[0]
    assert np.allclose(answer["visits"], expected.visits)
    most = np.flatnonzero(expected.visits == expected.visits.max())
    assert answer["move"] in most  # greedy (ties broken at random)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"board": [[0] * 5] * 4, "simulations": 51}, "simulations", "valid: 1..50"),
        ({"board": [[0] * 5] * 4, "simulations": "9"}, "simulations", "an integer"),
        ({"board": [[0] * 5] * 3}, "board", "a list of 4 rows of 5 values"),
        ({"board": [[2, 0, 0, 0, 0]] + [[0] * 5] * 3}, "board", "values in -1, 0, 1"),
        ({"board": [[0] * 5] * 3 + [[-1, 0, 0, 0, 0]]}, "board", "as many stones"),
        ({"board": [[0] * 5] * 3 + [[1, 1, 1, 1, 0]]}, "board", "as many stones"),
        ({"board": [[0] * 5] * 4, "explore": True}, "explore", "unknown field"),
        ({}, "board", "missing"),
    ],
)
def test_bad_board_requests_name_the_field(c4, body, field, words):
    served = ServedSearch.from_checkpoint(c4[0], max_simulations=50)
    with pytest.raises(WireError, match=words) as info:
        served.parse(body)
    assert info.value.field == field


def test_a_finished_game_is_refused(c4):
    served = ServedSearch.from_checkpoint(c4[0], max_simulations=50)
    won = [[0] * 5, [0] * 5, [-1, -1, -1, 0, 0], [1, 1, 1, 1, 0]]
    with pytest.raises(WireError, match="the game on this board is over"):
        served.parse({"board": won})


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_serve_over_http_runs_the_search_in_the_replica(c4, ray_session):
    from ray import serve

    from hierl.serve import deploy
    from tests.support.helpers import free_port

    port = free_port()
    app = deploy(
        c4[0], port=port, name="az", max_simulations=40, num_cpus_per_replica=0.25, auth_token=""
    )
    try:
        status, spec = http(app.url + "/spec")
        assert status == 200 and spec["algorithm"] == "ALPHAZERO"
        assert spec["max_simulations"] == 40
        board = [[0] * 5] * 4
        status, answer = http(app.url + "/act", {"board": board, "simulations": 16})
        assert status == 200, answer
        assert 0 <= answer["move"] < 5 and len(answer["visits"]) == 5
        assert answer["simulations"] == 16
        status, answer = http(app.url + "/act", {"board": board, "simulations": 41})
        assert status == 400 and answer["field"] == "simulations"
    finally:
        app.delete()
        serve.shutdown()


def http(url, body=None):
    """``(status, JSON answer)`` of a GET (no body) or POST, with a timeout."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# -- 5. the benchmark plays with hierl play's code -----------------------------------
def test_connect_four_benchmark_rows_replay_with_the_printed_hierl_play_command(
    c4, tmp_path, capsys
):
    run, out = tmp_path / "run", tmp_path / "curve"
    shutil.copytree(c4[0], run / "checkpoints" / "000001")
    script = [sys.executable, str(BENCHMARK), str(run), "--out", str(out), "--games", "4"]
    script += ["--simulations", "4", "--seed", "3", "--opponents", "random"]
    subprocess.run([*script, "alphabeta-2"], check=True, timeout=300, capture_output=True)
    with (out / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["opponent"] for r in rows] == ["random", "alphabeta-2"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["goals"]) == {"mcts-1000", "alphabeta-6"}
    assert summary["git"] and (out / "curve.png").stat().st_size > 0
    for row in rows:  # the printed command replays the match exactly
        assert main(row["command"].split()[1:]) == 0
        line = _score_line(capsys.readouterr().out)
        assert f"wins {row['wins']}, draws {row['draws']}, losses {row['losses']}; " in line
        assert f"score {float(row['score']):.3f}" in line
    again = subprocess.run(script, check=True, timeout=300, capture_output=True, text=True)
    assert "iteration" not in again.stdout  # scored already: resumed, nothing replayed
    with (out / "scores.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 2
    # Two matches at once, in two processes: the same games, so the same rows.
    out2 = tmp_path / "curve-jobs"
    jobs = [*script[:4], str(out2), *script[5:], "alphabeta-2", "--jobs", "2"]
    subprocess.run(jobs, check=True, timeout=300, capture_output=True)
    with (out2 / "scores.csv").open() as f:
        parallel = {r["opponent"]: r for r in csv.DictReader(f)}
    thinking = {"model_ms_per_move": "", "opponent_ms_per_move": ""}
    timings = {"score_seconds": None, **thinking}
    for row in rows:
        assert float(row["model_ms_per_move"]) > 0 and float(row["opponent_ms_per_move"]) > 0
        assert {**parallel[row["opponent"]], **timings} == {**row, **timings}
    # A file from before the thinking-time columns: rewritten with them, its rows kept.
    old = [{k: v for k, v in r.items() if k not in thinking} for r in rows]
    with (out2 / "scores.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(old[0]))
        writer.writeheader()
        writer.writerows(old)
    more = [*script[:4], str(out2), *script[5:], "alphabeta-1"]  # one new row
    subprocess.run(more, check=True, timeout=300, capture_output=True)
    with (out2 / "scores.csv").open() as f:
        upgraded = list(csv.DictReader(f))
    assert upgraded[:2] == [{**r, **thinking} for r in old]
    assert upgraded[2]["opponent"] == "alphabeta-1" and float(upgraded[2]["model_ms_per_move"]) > 0
    bad = [*script, "--iterations", "2"]
    refused = subprocess.run(bad, timeout=300, capture_output=True, text=True)
    assert refused.returncode == 1
    assert "no checkpoint for iterations [2]; found: 000001" in refused.stderr


# -- 4. rollout --------------------------------------------------------------------------
def test_rollout_of_an_alphazero_checkpoint_points_at_hierl_play(c4, capsys):
    assert main(["rollout", str(c4[0])]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "ALPHAZERO checkpoint" in err and f"hierl play {c4[0]}" in err


def test_connect_four_goals_judge_the_last_checkpoint_within_three_hours(tmp_path):
    bench = import_benchmark("connect_four")
    # (iteration, training hours, score vs mcts-1000, score vs alphabeta-6)
    checkpoints = ((16, 2.72, 0.91, 0.4), (17, 2.89, 0.85, 0.6), (18, 3.06, 0.95, 0.3))
    rows = [
        {"iteration": it, "train_hours": hours, "opponent": label, "score": score}
        for it, hours, *scores in checkpoints
        for label, score in zip(("mcts-1000", "alphabeta-6"), scores, strict=True)
    ]
    rows = [{**{k: "" for k in bench.FIELDS}, **r} for r in rows]
    args = argparse.Namespace(
        run_dir=tmp_path, games=100, opening_moves=2, simulations=None, seed=0
    )
    summary = bench.summarize(rows, args, tmp_path)
    # iteration 18 ended past 3 hours: the latest row, but not the one the goals judge
    assert {k: int(r["iteration"]) for k, r in summary["latest"].items()} == {
        "mcts-1000": 18,
        "alphabeta-6": 18,
    }
    goals = summary["goals"]
    assert goals["mcts-1000"] == {
        "goal": 0.9,
        "within_hours": 3.0,
        "iteration": 17,
        "score": 0.85,
        "met": False,
    }
    assert goals["alphabeta-6"]["iteration"] == 17 and goals["alphabeta-6"]["met"]
    assert json.loads((tmp_path / "summary.json").read_text())["goals"] == goals


# -- 5b. the value head on solved positions (benchmarks/connect_four_values.py) ----------
VALUES = BENCHMARK.parent / "connect_four_values.py"


def test_solved_positions_parse_to_the_movers_board():
    board_of = import_benchmark("connect_four_values").board_of
    game = ConnectFour()
    # columns 4, 4, 5, 3 (1-based): the first player moves again, so its stones are +1
    want = _board(game, mine=[(5, 3), (5, 4)], theirs=[(4, 3), (5, 2)])
    np.testing.assert_array_equal(board_of(game, "4453", "x:1"), want)
    # after 4, 4, 5 the second player moves: the board is from its side
    want = _board(game, mine=[(4, 3)], theirs=[(5, 3), (5, 4)])
    np.testing.assert_array_equal(board_of(game, "445", "x:1"), want)
    for moves, why in (
        ("48", "move 2 ('8') is not legal"),
        ("1111111", "move 7 plays the full column 1"),
    ):
        with pytest.raises(ValueError, match=re.escape(f"x:1: {why}")):
            board_of(game, moves, "x:1")
    with pytest.raises(ValueError, match="the game is over"):
        board_of(game, "1212121", "x:1")  # four in column 1


def test_value_accuracy_of_a_constant_network_is_the_share_it_calls(tmp_path):
    """A network whose value is 0.5 everywhere calls every position a win: its decisive
    accuracy is wins / (wins + losses), its outcome accuracy wins / all, and |v| on draws
    0.5."""
    trainer = AlphaZeroTrainer({**TINY, "env": "hierl/ConnectFour-v0"})
    try:
        weights = trainer.best_policy.get_weights()
        weights["value_head.weight"] = np.zeros_like(weights["value_head.weight"])
        weights["value_head.bias"] = np.full_like(weights["value_head.bias"], np.arctanh(0.5))
        trainer.best_policy.set_weights(weights)
        trainer.save(tmp_path / "run" / "checkpoints" / "000001")
    finally:
        trainer.stop()
    positions = tmp_path / "positions"
    positions.mkdir()
    # 3 wins, 2 draws, 1 loss (scores as the test sets write them), a blank line, a file
    # that is not a test set
    lines = ["4 5", "44 -3", "445 0", "4453 2", "1 1", "2 0", "", ""]
    (positions / "Test_L1_R1").write_text("\n".join(lines))
    (positions / "README").write_text("not a test set\n")
    out = tmp_path / "curve"
    script = [sys.executable, str(VALUES), str(tmp_path / "run"), "--out", str(out)]
    subprocess.run([*script, "--positions", str(positions)], check=True, timeout=300)
    with (out / "values.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["test_set"] == "Test_L1_R1" and row["iteration"] == "0"
    assert (row["positions"], row["wins"], row["draws"], row["losses"]) == ("6", "3", "2", "1")
    assert float(row["decisive_accuracy"]) == pytest.approx(3 / 4)
    assert float(row["outcome_accuracy"]) == pytest.approx(3 / 6)
    assert float(row["draw_abs_value"]) == pytest.approx(0.5, abs=1e-6)
    assert (out / "values.png").stat().st_size > 0
    (positions / "Test_L1_R2").write_text("4 5\n" + "1" * 70 + " 1\n")
    refused = subprocess.run(
        [*script, "--positions", str(positions)], timeout=300, capture_output=True, text=True
    )
    assert refused.returncode == 1
    assert f"{positions / 'Test_L1_R2'}:2: expected 'MOVES SCORE'" in refused.stderr
