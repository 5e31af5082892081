"""Two-player board games for self-play: pure game logic, Gymnasium envs and exact players.

The game logic works on *canonical* boards: an ``int8`` array of shape ``(rows, cols)``
seen from the player to move, ``+1`` for that player's stones, ``-1`` for the
opponent's and ``0`` for empty cells.  Playing a move puts a ``+1`` stone and negates
the board, so the result is again canonical (for the next player to move).  A game is
over when the player who just moved (the ``-1`` stones of the new board) completed a
line, or the board is full (a draw).  Any search (minimax, MCTS) can therefore treat
every position as "my move" and flip the sign of values between plies.

Two games, registered with Gymnasium (by string entry points, so this module loads
only when an env is made) when ``hierl.evaluators`` is imported
(``hierl.evaluators.env.register_board_game_envs``):

* ``hierl/TicTacToe-v0``: 3x3, three in a row wins; action = cell ``row * 3 + col``.
* ``hierl/ConnectFour-v0``: ``rows`` x ``cols`` (default 6x7, e.g. ``env_config``
  ``{"rows": 4, "cols": 5}`` for tests), ``connect`` (default 4) in a row wins; action =
  column, the stone drops to the lowest empty cell.

The envs (``BoardGameEnv``) are single-agent views of the two-player game, meant
for self-play (one policy moves for both sides):

* observation: ``float32`` array ``(2, rows, cols)``: plane 0 = stones of the player to
  move, plane 1 = the opponent's (so the board is always from the mover's perspective);
* ``info["action_mask"]``: ``int8`` legal-move mask (``num_actions``), and
  ``info["to_play"]``: 0 if the first player is to move, else 1;
* reward: ``+1`` to the player who just moved when the move wins, 0 otherwise (draws,
  ongoing games); the episode terminates on a win, a full board or an illegal move;
* an illegal move (occupied cell, full column) is a documented loss by default:
  reward ``-1``, terminated, ``info["illegal_move"] = True``; with
  ``illegal_move="raise"`` it raises ``ValueError`` instead.

``MinimaxPlayer`` plays perfectly (memoized negamax over canonical boards; random
tie-break among optimal moves with a seeded RNG); it is exact for Tic-Tac-Toe and tiny
Connect Four boards.  ``play_games`` plays any two ``Player`` objects against
each other, many games in lockstep so batched players (MCTS) evaluate them together.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

TICTACTOE_ID = "hierl/TicTacToe-v0"
CONNECT_FOUR_ID = "hierl/ConnectFour-v0"


class BoardGame(abc.ABC):
    """Rules of a two-player, zero-sum, perfect-information game on canonical boards.

    Attributes:
        rows, cols: board shape.
        num_actions: size of the discrete action space.
        symmetries: ``(cell_perm, action_perm)`` pairs (identity first): a board
            transformed by the symmetry is ``board.flat[cell_perm]`` and a move
            distribution ``pi[action_perm]``; used to augment training data.
    """

    rows: int
    cols: int
    num_actions: int
    symmetries: list[tuple[np.ndarray, np.ndarray]]

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, cols)``."""
        return (self.rows, self.cols)

    def initial_board(self) -> np.ndarray:
        """The empty board (``int8``, first player to move)."""
        return np.zeros(self.shape, dtype=np.int8)

    @abc.abstractmethod
    def legal_mask(self, board: np.ndarray) -> np.ndarray:
        """Boolean ``(num_actions,)`` mask of the legal moves of the player to move."""

    @abc.abstractmethod
    def _place(self, board: np.ndarray, action: int) -> np.ndarray:
        """A copy of ``board`` with the mover's stone (+1) placed for ``action``."""

    @abc.abstractmethod
    def _lines(self) -> np.ndarray:
        """Flat cell indexes of every winning line, shape ``(num_lines, line_length)``."""

    def next_board(self, board: np.ndarray, action: int) -> np.ndarray:
        """The canonical board for the next player after the mover plays ``action``.

        Raises:
            ValueError: if ``action`` is not a legal move on ``board``.
        """
        action = int(action)
        if not 0 <= action < self.num_actions or not self.legal_mask(board)[action]:
            legal = np.flatnonzero(self.legal_mask(board)).tolist()
            raise ValueError(f"illegal move {action} on this board; legal moves: {legal}")
        # CRUCIAL: negate so the result is seen from the next mover (canonical form).
        return -self._place(board, action)

    def outcome(self, board: np.ndarray) -> float | None:
        """Value of the canonical ``board`` for the player to move if the game is over.

        ``-1.0`` if the opponent (who just moved) completed a line, ``0.0`` for a full
        board without a line (draw), ``None`` while the game goes on.
        """
        lines = self.__dict__.get("_line_cache")
        if lines is None:
            lines = self.__dict__["_line_cache"] = self._lines()
        if np.any(board.reshape(-1)[lines].sum(axis=1) == -lines.shape[1]):
            return -1.0
        if not self.legal_mask(board).any():
            return 0.0
        return None

    @staticmethod
    def move_number(board: np.ndarray) -> int:
        """Moves played so far (stones on the board)."""
        return int(np.count_nonzero(board))

    @staticmethod
    def to_play(board: np.ndarray) -> int:
        """0 if the first player is to move on ``board``, else 1."""
        return int(np.count_nonzero(board)) % 2

    def to_planes(self, boards: np.ndarray) -> np.ndarray:
        """``float32`` planes ``(..., 2, rows, cols)``: the mover's stones, the opponent's."""
        boards = np.asarray(boards)
        return np.stack([boards == 1, boards == -1], axis=-3).astype(np.float32)

    def from_planes(self, planes: np.ndarray) -> np.ndarray:
        """Inverse of ``to_planes``; accepts flattened planes ``(..., 2*rows*cols)``."""
        planes = np.asarray(planes)
        lead = planes.shape[:-3] if planes.shape[-3:] == (2, *self.shape) else planes.shape[:-1]
        planes = planes.reshape(*lead, -1)
        n = self.rows * self.cols
        if planes.shape[-1] != 2 * n:
            raise ValueError(
                f"expected {2 * n} plane values for a {self.rows}x{self.cols} board, got "
                f"{planes.shape[-1]}"
            )
        mine, theirs = planes[..., :n], planes[..., n:]
        boards = (mine > 0.5).astype(np.int8) - (theirs > 0.5).astype(np.int8)
        return boards.reshape(*planes.shape[:-1], self.rows, self.cols)

    def render(self, board: np.ndarray, first_player_to_move: bool | None = None) -> str:
        """Text picture: ``X`` = first player, ``O`` = second, ``.`` = empty."""
        if first_player_to_move is None:
            first_player_to_move = self.to_play(board) == 0
        absolute = board if first_player_to_move else -board
        chars = {1: "X", -1: "O", 0: "."}
        return "\n".join("".join(chars[int(v)] for v in row) for row in absolute)


def _dihedral_perms(n: int) -> list[np.ndarray]:
    """The 8 symmetries of an ``n`` x ``n`` grid as flat index permutations."""
    grid = np.arange(n * n).reshape(n, n)
    perms = []
    for k in range(4):
        rotated = np.rot90(grid, k)
        perms += [rotated.reshape(-1).copy(), np.fliplr(rotated).reshape(-1).copy()]
    return perms


class TicTacToe(BoardGame):
    """Tic-Tac-Toe on 3x3; action = cell index ``row * 3 + col``."""

    def __init__(self) -> None:
        self.rows = self.cols = 3
        self.num_actions = 9
        self.symmetries = [(p, p) for p in _dihedral_perms(3)]

    def legal_mask(self, board: np.ndarray) -> np.ndarray:
        """Empty cells (none once the game is won)."""
        return board.reshape(-1) == 0

    def _place(self, board: np.ndarray, action: int) -> np.ndarray:
        out = board.copy()
        out.reshape(-1)[action] = 1
        return out

    def _lines(self) -> np.ndarray:
        g = np.arange(9).reshape(3, 3)
        return np.array([*g, *g.T, g.diagonal(), np.fliplr(g).diagonal()])


class ConnectFour(BoardGame):
    """Connect Four on ``rows`` x ``cols`` with ``connect`` in a row to win; action = column.

    Row 0 is the top: a stone dropped into a column lands on its lowest empty cell.
    """

    def __init__(self, rows: int = 6, cols: int = 7, connect: int = 4) -> None:
        rows, cols, connect = int(rows), int(cols), int(connect)
        if connect < 2 or (connect > rows and connect > cols):
            raise ValueError(
                f"ConnectFour(rows={rows}, cols={cols}, connect={connect}) is invalid: need "
                "2 <= connect <= max(rows, cols)"
            )
        self.rows, self.cols, self.connect = rows, cols, connect
        self.num_actions = cols
        cells = np.arange(rows * cols).reshape(rows, cols)
        self.symmetries = [
            (cells.reshape(-1), np.arange(cols)),
            (np.fliplr(cells).reshape(-1).copy(), np.arange(cols)[::-1].copy()),
        ]

    def legal_mask(self, board: np.ndarray) -> np.ndarray:
        """Columns whose top cell is empty."""
        return board[0] == 0

    def _place(self, board: np.ndarray, action: int) -> np.ndarray:
        out = board.copy()
        row = int(np.flatnonzero(out[:, action] == 0)[-1])
        out[row, action] = 1
        return out

    def _lines(self) -> np.ndarray:
        g = np.arange(self.rows * self.cols).reshape(self.rows, self.cols)
        k = self.connect
        lines = []
        for r, c in itertools.product(range(self.rows), range(self.cols)):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end_r, end_c = r + dr * (k - 1), c + dc * (k - 1)
                if 0 <= end_r < self.rows and 0 <= end_c < self.cols:
                    lines.append([g[r + dr * i, c + dc * i] for i in range(k)])
        return np.array(lines)


# -- Gymnasium envs --------------------------------------------------------------------
class BoardGameEnv(gym.Env):
    """Self-play view of a ``BoardGame`` (one policy moves for both players).

    See the module docstring for observation, reward and illegal-move conventions.

    Args:
        game: the rules.
        illegal_move: ``"lose"`` (reward -1, game over) or ``"raise"`` (ValueError).
        render_mode: ``None`` or ``"ansi"``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, game: BoardGame, illegal_move: str = "lose", render_mode: str | None = None):
        if illegal_move not in ("lose", "raise"):
            raise ValueError(f"illegal_move={illegal_move!r} is invalid; valid: 'lose', 'raise'")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r} is invalid; valid: None, 'ansi'")
        self.game = game
        self.illegal_move = illegal_move
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2, *game.shape), np.float32)
        self.action_space = gym.spaces.Discrete(game.num_actions)
        self.board = game.initial_board()
        self._done = False

    def _info(self) -> dict[str, Any]:
        return {
            "action_mask": self.game.legal_mask(self.board).astype(np.int8),
            "to_play": self.game.to_play(self.board),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Empty board, first player to move."""
        super().reset(seed=seed)
        self.board = self.game.initial_board()
        self._done = False
        return self.game.to_planes(self.board), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The player to move plays ``action``; reward is from that player's view."""
        if self._done:
            raise RuntimeError("step() called on a finished game; call reset() first")
        action = int(action)
        legal = self.game.legal_mask(self.board)
        if not (0 <= action < self.game.num_actions and legal[action]):
            if self.illegal_move == "raise":
                raise ValueError(
                    f"illegal move {action}; legal moves: {np.flatnonzero(legal).tolist()}"
                )
            self._done = True
            info = {**self._info(), "illegal_move": True}
            return self.game.to_planes(self.board), -1.0, True, False, info
        self.board = self.game.next_board(self.board, action)
        outcome = self.game.outcome(self.board)
        self._done = outcome is not None
        # outcome is from the NEXT mover's view: -1 means the player who just moved won.
        reward = 1.0 if outcome == -1.0 else 0.0
        return self.game.to_planes(self.board), reward, self._done, False, self._info()

    def render(self) -> str | None:
        """The board as text (``render_mode="ansi"``)."""
        if self.render_mode == "ansi":
            return self.game.render(self.board) + "\n"
        return None


class TicTacToeEnv(BoardGameEnv):
    """``hierl/TicTacToe-v0``: Tic-Tac-Toe (kwargs: ``illegal_move``, ``render_mode``)."""

    def __init__(self, illegal_move: str = "lose", render_mode: str | None = None):
        super().__init__(TicTacToe(), illegal_move, render_mode)


class ConnectFourEnv(BoardGameEnv):
    """``hierl/ConnectFour-v0``: Connect Four (kwargs: ``rows``, ``cols``, ``connect``,
    ``illegal_move``, ``render_mode``)."""

    def __init__(
        self,
        rows: int = 6,
        cols: int = 7,
        connect: int = 4,
        illegal_move: str = "lose",
        render_mode: str | None = None,
    ):
        super().__init__(ConnectFour(rows, cols, connect), illegal_move, render_mode)


def game_of_env(env: gym.Env) -> BoardGame:
    """The ``BoardGame`` behind a (possibly wrapped) board-game env.

    Raises:
        TypeError: if ``env`` is not a ``BoardGameEnv``.
    """
    game = getattr(env.unwrapped, "game", None)
    if not isinstance(game, BoardGame):
        raise TypeError(
            f"env {env.unwrapped!r} is not a board-game env (hierl.algorithms.alphazero.games."
            "BoardGameEnv, e.g. hierl/TicTacToe-v0 or hierl/ConnectFour-v0)"
        )
    return game


# -- players ---------------------------------------------------------------------------
class Player(Protocol):
    """Something that picks moves for several canonical boards at once."""

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """One legal move for each (non-terminal, canonical) board."""
        ...


class RandomPlayer:
    """Uniformly random legal moves (seeded)."""

    def __init__(self, game: BoardGame, seed: int | None = None):
        self.game = game
        self.rng = np.random.default_rng(seed)

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """A random legal move per board."""
        return [int(self.rng.choice(np.flatnonzero(self.game.legal_mask(b)))) for b in boards]


class MinimaxPlayer:
    """Perfect play by memoized negamax; ties among optimal moves broken at random.

    Among moves of equal game-theoretic value it prefers faster wins and slower losses
    (values are scaled by ``1 - moves / 100``), then breaks ties with a seeded RNG.
    Exact but exhaustive: use it on Tic-Tac-Toe and tiny Connect Four boards only.
    """

    def __init__(self, game: BoardGame, seed: int | None = None):
        self.game = game
        self.rng = np.random.default_rng(seed)
        self._cache: dict[bytes, float] = {}

    def value(self, board: np.ndarray) -> float:
        """Value of ``board`` for the player to move: > 0 win, 0 draw, < 0 loss."""
        key = board.tobytes()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        outcome = self.game.outcome(board)
        if outcome is not None:
            value = outcome * (1.0 - self.game.move_number(board) / 100.0) + 0.0  # no -0.0
        else:
            value = max(
                -self.value(self.game.next_board(board, a))
                for a in np.flatnonzero(self.game.legal_mask(board))
            )
        self._cache[key] = value
        return value

    def action_values(self, board: np.ndarray) -> dict[int, float]:
        """Value of each legal move for the player to move."""
        return {
            int(a): -self.value(self.game.next_board(board, a))
            for a in np.flatnonzero(self.game.legal_mask(board))
        }

    def optimal_moves(self, board: np.ndarray) -> list[int]:
        """All moves achieving the best value."""
        values = self.action_values(board)
        best = max(values.values())
        return [a for a, v in values.items() if v >= best - 1e-9]

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """An optimal move per board (random among equals)."""
        return [int(self.rng.choice(self.optimal_moves(b))) for b in boards]


def play_games(
    game: BoardGame,
    first: Player,
    second: Player,
    num_games: int,
    opening_moves: int = 0,
    seed: int | None = None,
) -> np.ndarray:
    """Play ``num_games`` games of ``first`` (moves first) against ``second``, in lockstep.

    Each round asks a player for the moves of all unfinished games where it is to move
    (one batched call).  The first ``opening_moves`` plies of every game are random
    legal moves (seeded), to diversify games between deterministic players.

    Returns:
        ``(num_games,)`` float array of results for ``first``: 1 win, 0.5 draw, 0 loss.
    """
    rng = np.random.default_rng(seed)
    boards = [game.initial_board() for _ in range(num_games)]
    results = np.full(num_games, np.nan)
    ply = 0
    while np.isnan(results).any():
        live = [i for i in range(num_games) if np.isnan(results[i])]
        if ply < opening_moves:
            moves = [int(rng.choice(np.flatnonzero(game.legal_mask(boards[i])))) for i in live]
        else:
            player = first if ply % 2 == 0 else second
            moves = player.select_moves([boards[i] for i in live])
        for i, move in zip(live, moves, strict=True):
            boards[i] = game.next_board(boards[i], move)
            outcome = game.outcome(boards[i])
            if outcome is not None:
                # outcome is for the player to move next; the mover of this ply gets -outcome
                mover_score = 0.5 * (1.0 - outcome)
                results[i] = mover_score if ply % 2 == 0 else 1.0 - mover_score
        ply += 1
    return results
