"""Board games: rules, canonical perspective, Gymnasium envs, minimax."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import hierl.evaluators  # noqa: F401  (registers the envs)
from hierl.algorithms.alphazero.games import (
    CONNECT_FOUR_ID,
    TICTACTOE_ID,
    ConnectFour,
    MinimaxPlayer,
    RandomPlayer,
    TicTacToe,
    game_of_env,
    play_games,
)
from hierl.evaluators.env import BOARD_GAME_ENVS, register_board_game_envs


def play(game, moves):
    board = game.initial_board()
    for m in moves:
        board = game.next_board(board, m)
    return board


# -- Tic-Tac-Toe rules ------------------------------------------------------------------
@pytest.mark.parametrize(
    "moves",
    [
        [0, 3, 1, 4, 2],  # top row
        [6, 0, 7, 1, 8],  # bottom row
        [0, 1, 3, 2, 6],  # left column
        [2, 0, 5, 1, 8],  # right column
        [0, 1, 4, 2, 8],  # main diagonal
        [2, 0, 4, 1, 6],  # anti-diagonal
    ],
)
def test_tictactoe_wins_rows_cols_diagonals(moves):
    game = TicTacToe()
    board = play(game, moves[:-1])
    assert game.outcome(board) is None
    board = game.next_board(board, moves[-1])
    # from the view of the player to move (O), X just won
    assert game.outcome(board) == -1.0
    assert not game.legal_mask(board).all()


def test_tictactoe_second_player_win_and_draw():
    game = TicTacToe()
    board = play(game, [0, 3, 1, 4, 8, 5])  # O completes the middle row
    assert game.outcome(board) == -1.0 and game.to_play(board) == 0
    draw = play(game, [0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert game.outcome(draw) == 0.0
    assert not game.legal_mask(draw).any()
    assert game.render(draw) == "XOX\nXOO\nOXX"


def test_canonical_perspective():
    game = TicTacToe()
    board = game.next_board(game.initial_board(), 4)
    # after X plays the centre, O is to move: X's stone is the opponent's (-1)
    assert board[1, 1] == -1 and game.to_play(board) == 1
    board = game.next_board(board, 0)
    assert board[0, 0] == -1 and board[1, 1] == 1 and game.to_play(board) == 0
    planes = game.to_planes(board)
    assert planes.shape == (2, 3, 3) and planes[0, 1, 1] == 1 and planes[1, 0, 0] == 1
    np.testing.assert_array_equal(game.from_planes(planes), board)
    np.testing.assert_array_equal(game.from_planes(planes.reshape(1, -1))[0], board)


def test_illegal_moves_raise_in_the_rules():
    game = TicTacToe()
    board = play(game, [4])
    with pytest.raises(ValueError, match=r"illegal move 4.*legal moves: \[0, 1, 2, 3, 5"):
        game.next_board(board, 4)
    with pytest.raises(ValueError, match="illegal move 9"):
        game.next_board(board, 9)


def test_symmetries_are_permutations_that_preserve_the_rules():
    game = TicTacToe()
    won = play(game, [0, 3, 1, 4, 2])  # X's top row
    open_board = play(game, [0, 4, 5])
    assert len(game.symmetries) == 8
    seen = set()
    for cells, actions in game.symmetries:
        assert sorted(cells.tolist()) == list(range(9))
        np.testing.assert_array_equal(cells, actions)
        assert game.outcome(won.reshape(-1)[cells].reshape(3, 3)) == -1.0
        moved = open_board.reshape(-1)[cells].reshape(3, 3)
        np.testing.assert_array_equal(game.legal_mask(moved), game.legal_mask(open_board)[actions])
        seen.add(moved.tobytes())
    assert len(seen) == 8  # all distinct on an asymmetric board
    c4 = ConnectFour(4, 5)
    board = play(c4, [0, 0, 0, 0, 1])  # column 0 full
    _, (cells, actions) = c4.symmetries
    mirrored = board.reshape(-1)[cells].reshape(4, 5)
    np.testing.assert_array_equal(mirrored, board[:, ::-1])
    np.testing.assert_array_equal(c4.legal_mask(mirrored), c4.legal_mask(board)[actions])


# -- Connect Four rules ----------------------------------------------------------------
def test_connect_four_gravity_and_wins():
    game = ConnectFour(4, 5)
    board = play(game, [2])
    assert board[3, 2] == -1 and board[:3].sum() == 0  # bottom row is row 3
    # vertical: X plays column 0 four times, O column 1
    board = play(game, [0, 1, 0, 1, 0, 1])
    assert game.outcome(board) is None
    assert game.outcome(game.next_board(board, 0)) == -1.0
    # horizontal on the bottom row
    board = play(game, [0, 0, 1, 1, 2, 2, 3])
    assert game.outcome(board) == -1.0
    # diagonals (boards set directly: the player who just moved owns the -1 stones)
    for cells in ([(3, 0), (2, 1), (1, 2), (0, 3)], [(0, 1), (1, 2), (2, 3), (3, 4)]):
        board = np.zeros((4, 5), np.int8)
        for r, c in cells:
            board[r, c] = -1
        assert game.outcome(board) == -1.0
        board[cells[-1]] = 0
        assert game.outcome(board) is None


def test_connect_four_full_column_and_draw():
    game = ConnectFour(rows=2, cols=2, connect=2)
    board = play(game, [0])
    assert game.legal_mask(board).tolist() == [True, True]
    board = game.next_board(board, 1)  # O
    assert game.outcome(board) is None
    board = game.next_board(board, 0)  # X on top of X: vertical pair
    assert game.outcome(board) == -1.0
    g3 = ConnectFour(rows=1, cols=3, connect=3)
    board = play(g3, [0, 1, 2])
    assert g3.outcome(board) == 0.0 and not g3.legal_mask(board).any()
    with pytest.raises(ValueError, match="illegal move 0"):
        g3.next_board(play(g3, [0]), 0)
    with pytest.raises(ValueError, match="connect=5"):
        ConnectFour(rows=3, cols=4, connect=5)


# -- envs ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "env_id,kwargs",
    [(TICTACTOE_ID, {}), (CONNECT_FOUR_ID, {}), (CONNECT_FOUR_ID, {"rows": 4, "cols": 5})],
)
def test_envs_pass_the_gymnasium_checker(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    check_env(env.unwrapped, skip_render_check=True)
    assert isinstance(game_of_env(env), TicTacToe if env_id == TICTACTOE_ID else ConnectFour)


def test_env_rewards_to_the_winner_and_info():
    env = gym.make(TICTACTOE_ID)
    obs, info = env.reset(seed=0)
    assert obs.shape == (2, 3, 3) and obs.sum() == 0
    assert info["action_mask"].tolist() == [1] * 9 and info["to_play"] == 0
    rewards = []
    for move in [0, 3, 1, 4, 2]:
        obs, reward, terminated, truncated, info = env.step(move)
        rewards.append(reward)
    assert rewards == [0, 0, 0, 0, 1.0] and terminated and not truncated
    # the observation is from O's view: X's three stones are on plane 1
    assert obs[1].reshape(-1)[[0, 1, 2]].tolist() == [1, 1, 1]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(5)


def test_env_illegal_move_lose_or_raise():
    env = gym.make(TICTACTOE_ID)
    env.reset()
    env.step(4)
    _, reward, terminated, _, info = env.step(4)
    assert reward == -1.0 and terminated and info["illegal_move"]
    strict = gym.make(TICTACTOE_ID, illegal_move="raise")
    strict.reset()
    strict.step(4)
    with pytest.raises(ValueError, match="illegal move 4"):
        strict.step(4)
    with pytest.raises(ValueError, match="illegal_move='maybe'"):
        gym.make(TICTACTOE_ID, illegal_move="maybe")


def test_connect_four_env_config_and_render():
    env = gym.make(CONNECT_FOUR_ID, rows=4, cols=5, render_mode="ansi")
    obs, _ = env.reset()
    assert obs.shape == (2, 4, 5) and env.action_space.n == 5
    env.step(2)
    assert env.render() == ".....\n.....\n.....\n..X..\n"


def test_registration_is_idempotent():
    register_board_game_envs()
    register_board_game_envs()
    assert TICTACTOE_ID in gym.registry and CONNECT_FOUR_ID in gym.registry
    assert set(BOARD_GAME_ENVS) == {TICTACTOE_ID, CONNECT_FOUR_ID}


def test_registration_imports_no_algorithm():
    # String entry points: the ids exist once hierl.evaluators is imported, and the
    # AlphaZero package loads only when one of the envs is made.
    code = (
        "import sys, gymnasium as gym, hierl.evaluators\n"
        f"assert {TICTACTOE_ID!r} in gym.registry and {CONNECT_FOUR_ID!r} in gym.registry\n"
        "assert not [m for m in sys.modules if m.startswith('hierl.algorithms')]\n"
        f"gym.make({TICTACTOE_ID!r})\n"
        "assert 'hierl.algorithms.alphazero.games' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# -- minimax ---------------------------------------------------------------------------
def test_minimax_values_of_known_positions():
    game = TicTacToe()
    mm = MinimaxPlayer(game, seed=0)
    assert mm.value(game.initial_board()) == 0.0  # Tic-Tac-Toe is a draw
    # X threatens the top row and it is X's move: win now (5 stones after the move)
    board = play(game, [0, 3, 1, 4])
    assert mm.value(board) == pytest.approx(0.95)
    assert mm.optimal_moves(board) == [2]
    # O to move must block cell 2 (else X wins); blocking leads to a draw or better
    board = play(game, [0, 4, 1])
    values = mm.action_values(board)
    assert mm.optimal_moves(board) == [2]
    assert all(v < 0 for a, v in values.items() if a != 2)
    # after X takes a corner, O's only non-losing reply is the centre
    board = play(game, [0])
    assert mm.optimal_moves(board) == [4]


def test_minimax_vs_minimax_always_draws():
    game = TicTacToe()
    results = play_games(game, MinimaxPlayer(game, 1), MinimaxPlayer(game, 2), 30)
    assert results.tolist() == [0.5] * 30


def test_minimax_never_loses_to_random():
    game = TicTacToe()
    as_first = play_games(game, MinimaxPlayer(game, 3), RandomPlayer(game, 4), 40)
    as_second = 1.0 - play_games(game, RandomPlayer(game, 5), MinimaxPlayer(game, 6), 40)
    assert as_first.min() >= 0.5 and as_second.min() >= 0.5
    assert as_first.mean() > 0.9  # random play loses most games against perfect play


def test_minimax_tie_break_is_seeded():
    game = TicTacToe()
    board = game.initial_board()
    player = MinimaxPlayer(game, 0)
    picks = player.select_moves([board] * 30)
    assert len(set(picks)) > 1  # all 9 first moves draw: ties are broken at random
    again = MinimaxPlayer(game, 0)
    again._cache = player._cache  # (skip re-solving the game)
    assert again.select_moves([board] * 30) == picks


def test_play_games_opening_moves_diversify():
    game = TicTacToe()
    results = play_games(
        game, MinimaxPlayer(game, 0), MinimaxPlayer(game, 0), 10, opening_moves=1, seed=3
    )
    assert results.tolist() == [0.5] * 10
