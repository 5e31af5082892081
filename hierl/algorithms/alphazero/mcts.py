"""Monte-Carlo tree search with PUCT, batched over several games' leaves.

AlphaGo Zero (Silver et al., Nature 2017, "Mastering the game of Go without human
knowledge", Methods "Search algorithm"); AlphaZero (Silver et al., Science 2018).
RLlib (arXiv:1712.09381v1, §2.3.2 and appendix E.3) runs it as a subroutine of the
self-play policy graph.

One ``MCTS.search`` call runs ``num_simulations`` simulations on each of a batch of
root positions.  Every simulation round descends once in every tree (PUCT selection),
collects the leaves that need the network, evaluates them in **one batched call**, then
expands them and backs the values up.  Positions are canonical boards
(``hierl.algorithms.alphazero.games``): values are always for the player to move, so the
sign flips at every ply of the backup.

Selection maximises ``Q(s, a) + c_puct * P(s, a) * sqrt(N(s) + 1) / (1 + N(s, a))``
where ``Q`` is the mean backed-up value (0 for unvisited moves) and ``P`` the network
prior (with Dirichlet noise mixed in at the root when exploring).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from hierl.algorithms.alphazero.games import BoardGame

EvaluateFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``boards (B, rows, cols) int8 -> (priors (B, num_actions), values (B,))``; values are
for the player to move, priors need not be masked (illegal moves are masked here)."""


class Node:
    """One position in a search tree; edge statistics are stored in the parent.

    Attributes:
        board: canonical board (player to move = +1).
        terminal: game value for the player to move if the game is over, else None.
        prior, visits, value_sum: per-action arrays, set on expansion.
        q: per-action mean value ``value_sum / visits`` (0 while unvisited), and
            total: ``visits.sum()``: both kept by the backup, read by selection.
        children: action → child Node (created on first visit).
    """

    __slots__ = (
        "board",
        "children",
        "illegal",
        "legal",
        "prior",
        "q",
        "terminal",
        "total",
        "value_sum",
        "visits",
    )

    def __init__(self, board: np.ndarray, terminal: float | None):
        self.board = board
        self.terminal = terminal
        self.prior: np.ndarray | None = None
        self.visits: np.ndarray | None = None
        self.value_sum: np.ndarray | None = None
        self.q: np.ndarray | None = None
        self.total = 0.0
        self.legal: np.ndarray | None = None
        self.illegal: np.ndarray | None = None
        self.children: dict[int, Node] = {}

    @property
    def expanded(self) -> bool:
        """Whether the network has evaluated this position."""
        return self.prior is not None

    def expand(self, prior: np.ndarray, legal: np.ndarray) -> None:
        """Store the masked, renormalized ``prior`` and zero edge statistics."""
        p = np.where(legal, np.maximum(prior, 0.0), 0.0)
        total = p.sum()
        # a network putting (almost) no mass on legal moves falls back to uniform
        self.prior = p / total if total > 1e-8 else legal / legal.sum()
        self.legal = legal
        self.illegal = np.where(legal, 0.0, -np.inf)  # added to scores: -inf off the board
        self.visits = np.zeros(len(prior))
        self.value_sum = np.zeros(len(prior))
        self.q = np.zeros(len(prior))

    def backup(self, action: int, value: float) -> None:
        """Count one simulation through ``action`` that returned ``value`` (for this
        node's player to move)."""
        assert self.visits is not None and self.value_sum is not None and self.q is not None
        self.visits[action] += 1
        self.value_sum[action] += value
        self.q[action] = self.value_sum[action] / self.visits[action]
        self.total += 1.0


def uniform_evaluator(game: BoardGame) -> EvaluateFn:
    """Uniform priors over all actions and value 0: pure search (a baseline, tests)."""

    def evaluate(boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(boards)
        return np.full((n, game.num_actions), 1.0 / game.num_actions), np.zeros(n)

    return evaluate


class MCTS:
    """PUCT search over batches of positions with one network call per simulation round.

    Args:
        game: the rules.
        evaluate: the network (see ``EvaluateFn``).
        num_simulations: simulations per root (>= 1).
        c_puct: exploration constant.
        dirichlet_alpha: concentration of the root noise.
        dirichlet_fraction: weight of the noise in the root priors (0: none).
        rng: seeds the root noise.
    """

    def __init__(
        self,
        game: BoardGame,
        evaluate: EvaluateFn,
        num_simulations: int = 50,
        c_puct: float = 1.5,
        dirichlet_alpha: float = 1.0,
        dirichlet_fraction: float = 0.25,
        rng: np.random.Generator | None = None,
    ):
        if num_simulations < 1:
            raise ValueError(f"num_simulations must be >= 1, got {num_simulations}")
        self.game = game
        self.evaluate = evaluate
        self.num_simulations = int(num_simulations)
        self.c_puct = float(c_puct)
        self.dirichlet_alpha = float(dirichlet_alpha)
        self.dirichlet_fraction = float(dirichlet_fraction)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.num_evaluations = 0
        """Network calls made so far (one per simulation round)."""

    def _expand(self, nodes: Sequence[Node]) -> np.ndarray:
        """Evaluate and expand ``nodes`` with one network call; return their values."""
        priors, values = self.evaluate(np.stack([n.board for n in nodes]))
        self.num_evaluations += 1
        for node, prior in zip(nodes, np.asarray(priors, dtype=np.float64), strict=True):
            node.expand(prior, self.game.legal_mask(node.board))
        return np.asarray(values, dtype=np.float64).reshape(-1)

    def _select(self, node: Node) -> int:
        """The legal move maximising ``Q + U`` (the first of equal ones)."""
        assert node.visits is not None and node.prior is not None and node.q is not None
        u = self.c_puct * node.prior * math.sqrt(node.total + 1.0) / (1.0 + node.visits)
        return int((node.q + u + node.illegal).argmax())

    def _child(self, node: Node, action: int) -> Node:
        child = node.children.get(action)
        if child is None:
            board = self.game.next_board(node.board, action)
            child = node.children[action] = Node(board, self.game.outcome(board))
        return child

    def _roots(
        self, boards: Sequence[np.ndarray], subtrees: Sequence[Node | None] | None
    ) -> list[Node]:
        """A root per board: its given subtree, else a new node; all checked."""
        given = subtrees if subtrees is not None else [None] * len(boards)
        roots = [
            node if node is not None else Node(np.asarray(b, dtype=np.int8), None)
            for b, node in zip(boards, given, strict=True)
        ]
        for root, board in zip(roots, boards, strict=True):
            if not np.array_equal(root.board, board):
                raise ValueError("a subtree given to search_roots is not its board's")
            if self.game.outcome(root.board) is not None:
                raise ValueError("MCTS needs non-terminal root positions")
        if len({id(root) for root in roots}) != len(roots):
            raise ValueError("search_roots got one subtree for two boards")
        return roots

    def search_roots(
        self,
        boards: Sequence[np.ndarray],
        add_noise: bool = False,
        subtrees: Sequence[Node | None] | None = None,
    ) -> list[Node]:
        """Run the search on each (non-terminal) board; return the root nodes.

        ``subtrees[i]``, if given and not None, is a node of an earlier search whose
        board is ``boards[i]``: the search goes on from it, its statistics kept
        (AlphaGo Zero's tree reuse), and ``num_simulations`` more are run.
        """
        roots = self._roots(boards, subtrees)
        if not roots:
            return roots
        fresh = [root for root in roots if not root.expanded]
        if fresh:
            self._expand(fresh)
        if add_noise and self.dirichlet_fraction > 0:
            for root in roots:
                assert root.prior is not None and root.legal is not None
                legal = np.flatnonzero(root.legal)
                noise = self.rng.dirichlet(np.full(len(legal), self.dirichlet_alpha))
                # CRUCIAL: noise only at the root, only on legal moves: exploration of
                # self-play openings without corrupting the search below the root.
                root.prior[legal] = (1 - self.dirichlet_fraction) * root.prior[
                    legal
                ] + self.dirichlet_fraction * noise
        for _ in range(self.num_simulations):
            paths: list[list[tuple[Node, int]]] = []
            leaves: list[Node] = []
            leaf_values = np.zeros(len(roots))
            for i, root in enumerate(roots):
                node, path = root, []
                while node.expanded and node.terminal is None:
                    action = self._select(node)
                    path.append((node, action))
                    node = self._child(node, action)
                paths.append(path)
                leaves.append(node)
                if node.terminal is not None:
                    leaf_values[i] = node.terminal
            pending = [i for i, leaf in enumerate(leaves) if leaf.terminal is None]
            if pending:
                # one network call for the leaves of all trees (batched evaluation)
                leaf_values[pending] = self._expand([leaves[i] for i in pending])
            for path, value in zip(paths, leaf_values, strict=True):
                for node, action in reversed(path):
                    # CRUCIAL: the value is for the player to move at the child; the
                    # parent's mover is the opponent, so flip the sign at every ply.
                    value = -value
                    node.backup(action, value)
        return roots

    def search(self, boards: Sequence[np.ndarray], add_noise: bool = False) -> np.ndarray:
        """Root visit counts ``(B, num_actions)`` after the search on each board."""
        return self.root_visits(self.search_roots(boards, add_noise))

    def root_visits(self, roots: Sequence[Node]) -> np.ndarray:
        """The searched ``roots``' visit counts, ``(len(roots), num_actions)``."""
        if not roots:
            return np.zeros((0, self.game.num_actions))
        return np.stack([r.visits for r in roots])


def root_value(root: Node) -> float:
    """The search's value of ``root`` for its player to move: the visit-weighted mean of
    its edges' Q (the mean of every simulation's backed-up value), 0 before any visit."""
    assert root.visits is not None and root.value_sum is not None
    n = root.visits.sum()
    return float(root.value_sum.sum() / n) if n > 0 else 0.0


def visit_policy(visits: np.ndarray) -> np.ndarray:
    """The search policy π: visit counts normalized per row (τ = 1)."""
    visits = np.asarray(visits, dtype=np.float64)
    return visits / np.maximum(visits.sum(axis=-1, keepdims=True), 1e-12)


def select_actions(
    visits: np.ndarray, temperatures: np.ndarray | float, rng: np.random.Generator
) -> np.ndarray:
    """Sample a move per row with probability ∝ ``N^(1/τ)``; ``τ = 0`` is greedy.

    Greedy ties are broken uniformly at random (with ``rng``).
    """
    visits = np.asarray(visits, dtype=np.float64)
    temps = np.broadcast_to(np.asarray(temperatures, dtype=np.float64), (len(visits),))
    actions = np.empty(len(visits), dtype=np.int64)
    for i, (n, tau) in enumerate(zip(visits, temps, strict=True)):
        if tau <= 0:
            best = np.flatnonzero(n == n.max())
            actions[i] = best[0] if len(best) == 1 else rng.choice(best)
        else:
            p = n ** (1.0 / tau)
            actions[i] = rng.choice(len(n), p=p / p.sum())
    return actions


class MCTSPlayer:
    """A ``Player`` that searches, then plays greedily.

    Args:
        mcts: the search (its ``evaluate`` is the network, or a uniform evaluator).
        temperature_moves: moves ``< temperature_moves`` of a game are sampled with
            τ = 1 from the visit counts (diverse openings), later ones greedily.
        rng: for sampling and tie-breaks.
    """

    def __init__(
        self, mcts: MCTS, temperature_moves: int = 0, rng: np.random.Generator | None = None
    ):
        self.mcts = mcts
        self.temperature_moves = int(temperature_moves)
        self.rng = rng if rng is not None else np.random.default_rng()

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """One move per board: greedy after ``temperature_moves`` moves of the game."""
        if not len(boards):
            return []
        visits = self.mcts.search(boards, add_noise=False)
        temps = np.array(
            [1.0 if BoardGame.move_number(b) < self.temperature_moves else 0.0 for b in boards]
        )
        return [int(a) for a in select_actions(visits, temps, self.rng)]
