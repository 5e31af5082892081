"""Built-in opponents that no network tuned: random, pure MCTS with random rollouts, and
depth-limited alpha-beta for Connect Four.

* ``RolloutMCTSPlayer``: UCT (Kocsis & Szepesvári 2006; Browne et al. 2012, "A
  Survey of Monte Carlo Tree Search Methods", Algorithm 2) with ``rollouts`` random
  playouts per move, UCB1 constant ``c``, the most visited move played.  No network.
* ``AlphaBetaPlayer``: negamax with alpha-beta pruning to ``depth`` plies on a
  Connect Four bitboard, a transposition table, centre-first move ordering and the
  classic window heuristic (open windows of 2 and 3 stones, centre column stones).
  Ties among the best root moves are broken at random (seeded).

Both search bitboards for Connect Four (``ConnectFourBits``; Python ints, a few
hundred nanoseconds a move) and the generic numpy rules for other games (MCTS only).
``make_opponent`` builds one by name; ``hierl play`` and ``benchmarks/connect_four.py``
use it, so the benchmark's table is reproducible with one command.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from hierl.algorithms.alphazero.games import BoardGame, ConnectFour, Player, RandomPlayer

OPPONENTS = ("random", "mcts", "alphabeta")
"""Names ``make_opponent`` knows."""
MAX_DEPTH = 12
"""Deepest alpha-beta search ``make_opponent`` accepts (depth 8 takes ~1 s a move)."""
WIN = 1_000_000
"""Alpha-beta's value of a win (minus the plies to reach it: faster wins first)."""


class ConnectFourBits:
    """Connect Four on bitboards: column ``c``, height ``h`` (0 = bottom) is bit
    ``c * (rows + 1) + h``; a state is ``(mine, mask)``: the stones of the player to move
    and all stones."""

    def __init__(self, game: ConnectFour):
        self.game = game
        self.rows, self.cols, self.connect = game.rows, game.cols, game.connect
        h = self.rows + 1
        self.height = h
        self.bottom = [1 << (c * h) for c in range(self.cols)]
        self.top = [1 << (c * h + self.rows - 1) for c in range(self.cols)]
        self.full = sum(((1 << self.rows) - 1) << (c * h) for c in range(self.cols))
        centre = (self.cols - 1) / 2
        self.order = sorted(range(self.cols), key=lambda c: (abs(c - centre), c))
        self.centre_mask = sum(
            ((1 << self.rows) - 1) << (c * h) for c in {self.cols // 2, (self.cols - 1) // 2}
        )
        self.windows = [self._bits(line) for line in game._lines()]

    def _bits(self, cells: Sequence[int]) -> int:
        out = 0
        for cell in cells:
            r, c = divmod(int(cell), self.cols)
            out |= 1 << (c * self.height + self.rows - 1 - r)
        return out

    def from_board(self, board: np.ndarray) -> tuple[int, int]:
        """``(mine, mask)`` of a canonical board (+1: the player to move)."""
        mine = mask = 0
        for (r, c), v in np.ndenumerate(board):
            if v:
                bit = 1 << (c * self.height + self.rows - 1 - r)
                mask |= bit
                if v > 0:
                    mine |= bit
        return mine, mask

    def moves(self, mask: int) -> list[int]:
        """Playable columns, centre first."""
        return [c for c in self.order if not mask & self.top[c]]

    def play(self, mine: int, mask: int, column: int) -> tuple[int, int, bool]:
        """The next state (the opponent to move) and whether the mover just won."""
        new_mask = mask | (mask + self.bottom[column])
        stones = mine | (new_mask ^ mask)
        return stones ^ new_mask, new_mask, self.wins(stones)

    def wins(self, stones: int) -> bool:
        """Whether ``stones`` hold ``connect`` in a row."""
        h = self.height
        for shift in (1, h, h - 1, h + 1):  # vertical, horizontal, two diagonals
            m = stones
            for i in range(1, self.connect):
                m &= stones >> (i * shift)
                if not m:
                    break
            if m:
                return True
        return False

    def heuristic(self, mine: int, mask: int) -> int:
        """Windows that only one side can still complete (2 stones: 2, one short: 5) and
        centre stones (3 each), the mover's minus the opponent's."""
        theirs = mine ^ mask
        score = 3 * (
            (mine & self.centre_mask).bit_count() - (theirs & self.centre_mask).bit_count()
        )
        short = self.connect - 1
        for w in self.windows:
            a, b = w & mine, w & theirs
            if a and not b:
                n = a.bit_count()
                score += 5 if n == short else 2 if n == short - 1 else 0
            elif b and not a:
                n = b.bit_count()
                score -= 5 if n == short else 2 if n == short - 1 else 0
        return score


class AlphaBetaPlayer:
    """Depth-limited negamax with alpha-beta on Connect Four bitboards (module docstring).

    Args:
        game: a ``ConnectFour`` of any size.
        depth: plies searched (>= 1).
        seed: breaks ties among equally good root moves.
    """

    def __init__(self, game: BoardGame, depth: int = 6, seed: int | None = None):
        if not isinstance(game, ConnectFour):
            raise ValueError(
                f"the alphabeta opponent plays Connect Four only, not {type(game).__name__}; "
                "use random or mcts"
            )
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"depth={depth!r} is invalid; valid: an integer in 1..{MAX_DEPTH}")
        self.bits = ConnectFourBits(game)
        self.depth = depth
        self.rng = random.Random(seed)
        self.nodes = 0
        """Positions searched so far."""
        self._table: dict[tuple[int, int], tuple[int, int, int]] = {}
        """(mine, mask) → (depth, lower bound, upper bound) of the current root's search."""

    def _negamax(self, mine: int, mask: int, depth: int, alpha: int, beta: int, ply: int) -> int:
        self.nodes += 1
        bits = self.bits
        moves = bits.moves(mask)
        if not moves:
            return 0  # full board: a draw
        for c in moves:  # a win now beats any search
            if bits.play(mine, mask, c)[2]:
                return WIN - ply - 1
        if depth == 0:
            return bits.heuristic(mine, mask)
        key = (mine, mask)
        hit = self._table.get(key)
        if hit is not None and hit[0] >= depth:
            _, lower, upper = hit
            if lower >= beta:
                return lower
            if upper <= alpha:
                return upper
            alpha, beta = max(alpha, lower), min(beta, upper)
        a0, best = alpha, -math.inf
        for c in moves:
            nxt_mine, nxt_mask, _ = bits.play(mine, mask, c)
            value = -self._negamax(nxt_mine, nxt_mask, depth - 1, -beta, -alpha, ply + 1)
            if value > best:
                best = value
            if best > alpha:
                alpha = best
            if alpha >= beta:
                break
        best = int(best)
        lower = best if best > a0 else -WIN * 2
        upper = best if best < beta else WIN * 2
        self._table[key] = (depth, lower, upper)
        return best

    def best_moves(self, board: np.ndarray) -> list[int]:
        """The root moves of the best searched value."""
        self._table.clear()  # values count plies from this root
        mine, mask = self.bits.from_board(board)
        best, chosen = -math.inf, []
        for c in self.bits.moves(mask):
            nxt_mine, nxt_mask, won = self.bits.play(mine, mask, c)
            if won:
                value = WIN
            else:
                # alpha = best - 1: a move as good as the best so far is valued exactly
                alpha = -2 * WIN if best == -math.inf else int(best) - 1
                value = -self._negamax(nxt_mine, nxt_mask, self.depth - 1, -2 * WIN, -alpha, 1)
            if value > best:
                best, chosen = value, [c]
            elif value == best:
                chosen.append(c)
        return chosen

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """A best move per board (random among equals)."""
        return [self.rng.choice(sorted(self.best_moves(b))) for b in boards]


class _Rules:
    """Generic rules on numpy canonical boards, as ``RolloutMCTSPlayer`` needs them."""

    def __init__(self, game: BoardGame):
        self.game = game

    def state(self, board: np.ndarray) -> Any:
        return np.asarray(board, dtype=np.int8)

    def moves(self, state: Any) -> list[int]:
        if self.game.outcome(state) is not None:
            return []
        return [int(a) for a in np.flatnonzero(self.game.legal_mask(state))]

    def play(self, state: Any, move: int) -> tuple[Any, bool]:
        nxt = self.game.next_board(state, move)
        return nxt, self.game.outcome(nxt) == -1.0


class _BitRules:
    """Connect Four rules on bitboards (same interface as ``_Rules``)."""

    def __init__(self, game: ConnectFour):
        self.bits = ConnectFourBits(game)

    def state(self, board: np.ndarray) -> Any:
        return self.bits.from_board(board)

    def moves(self, state: Any) -> list[int]:
        return [c for c in range(self.bits.cols) if not state[1] & self.bits.top[c]]

    def play(self, state: Any, move: int) -> tuple[Any, bool]:
        mine, mask, won = self.bits.play(state[0], state[1], move)
        return (mine, mask), won


class _Node:
    __slots__ = ("children", "state", "untried", "value", "visits", "won")

    def __init__(self, state: Any, untried: list[int], won: bool):
        self.state = state
        self.untried = untried  # moves not expanded yet
        self.won = won  # the move into this node won the game
        self.children: dict[int, _Node] = {}
        self.visits = 0
        self.value = 0.0  # summed results for the player who moved into this node


class RolloutMCTSPlayer:
    """Pure UCT with random playouts (no network): ``rollouts`` simulations per move.

    Args:
        game: the rules (bitboards for Connect Four).
        rollouts: simulations (selection, expansion, one random playout, backup) per move.
        c: UCB1 exploration constant (sqrt(2) as in Kocsis & Szepesvári).
        seed: seeds expansion order and playouts.
    """

    def __init__(
        self,
        game: BoardGame,
        rollouts: int = 1000,
        c: float = math.sqrt(2),
        seed: int | None = None,
    ):
        if isinstance(rollouts, bool) or not isinstance(rollouts, int) or rollouts < 1:
            raise ValueError(f"rollouts={rollouts!r} is invalid; valid: an integer >= 1")
        self.rules: Any = _BitRules(game) if isinstance(game, ConnectFour) else _Rules(game)
        self.rollouts = rollouts
        self.c = float(c)
        self.rng = random.Random(seed)

    def _new(self, state: Any, won: bool) -> _Node:
        untried = [] if won else self.rules.moves(state)
        self.rng.shuffle(untried)
        return _Node(state, untried, won)

    def _playout(self, node: _Node) -> float:
        """Result of a random game from ``node`` for the player who moved into it."""
        if node.won:
            return 1.0
        rules, state, sign = self.rules, node.state, -1.0  # -1: the player to move at node
        while True:
            moves = rules.moves(state)
            if not moves:
                return 0.0
            state, won = rules.play(state, self.rng.choice(moves))
            if won:
                return sign
            sign = -sign

    def search(self, board: np.ndarray) -> dict[int, int]:
        """Visit count of each root move after ``rollouts`` simulations."""
        root = self._new(self.rules.state(board), False)
        log = math.log
        for _ in range(self.rollouts):
            node, path = root, [root]
            while not node.untried and node.children:  # selection (UCB1)
                scale = self.c * math.sqrt(log(node.visits))
                node = max(
                    node.children.values(),
                    key=lambda ch: ch.value / ch.visits + scale / math.sqrt(ch.visits),
                )
                path.append(node)
            if node.untried and not node.won:  # expansion
                move = node.untried.pop()
                child = self._new(*self.rules.play(node.state, move))
                node.children[move] = child
                node = child
                path.append(node)
            result = self._playout(node)  # for the player who moved into ``node``
            for n in reversed(path):  # backup, flipping the point of view every ply
                n.visits += 1
                n.value += result
                result = -result
        return {a: ch.visits for a, ch in root.children.items()}

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """The most visited move per board (ties: the first expanded)."""
        out = []
        for board in boards:
            visits = self.search(board)
            out.append(max(visits, key=visits.__getitem__))
        return out


def make_opponent(
    name: str, game: BoardGame, *, rollouts: int = 1000, depth: int = 6, seed: int | None = None
) -> Player:
    """A built-in opponent by name (``OPPONENTS``): ``random``, ``mcts`` (``rollouts``
    per move) or ``alphabeta`` (Connect Four, ``depth`` plies).

    Raises:
        ValueError: an unknown name, a setting out of range, alphabeta on another game.
    """
    if name == "random":
        return RandomPlayer(game, seed)
    if name == "mcts":
        return RolloutMCTSPlayer(game, rollouts, seed=seed)
    if name == "alphabeta":
        return AlphaBetaPlayer(game, depth, seed)
    raise ValueError(f"unknown opponent {name!r}; valid: {', '.join(OPPONENTS)}")


def describe_opponent(name: str, *, rollouts: int = 1000, depth: int = 6) -> str:
    """A short label: ``random``, ``mcts-1000``, ``alphabeta-6``."""
    return {"mcts": f"mcts-{rollouts}", "alphabeta": f"alphabeta-{depth}"}.get(name, name)
