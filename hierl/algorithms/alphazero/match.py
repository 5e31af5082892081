"""Matches of N games with alternating first moves, scored ``(wins + draws/2) / games``.

What ``hierl play --opponent ...`` prints and ``benchmarks/connect_four.py`` records.
Game ``i`` is started by the player under test when ``i`` is even, by the opponent when
odd; the games of each side are played in lockstep (``play_games``), so a
batched player (AlphaZero's MCTS) evaluates all of them together.  ``opening_moves``
random plies start every game (both players are deterministic otherwise: the same two
games would repeat).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hierl.algorithms.alphazero.games import BoardGame, Player, play_games


@dataclasses.dataclass
class ArenaResult:
    """Outcome of a match, from the view of the player under test."""

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        """Games played."""
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """``(wins + draws / 2) / games`` (0 for no games)."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else 0.0

    @staticmethod
    def from_scores(scores: np.ndarray) -> ArenaResult:
        """From per-game results 1 / 0.5 / 0."""
        scores = np.asarray(scores)
        return ArenaResult(
            int(np.sum(scores == 1.0)), int(np.sum(scores == 0.5)), int(np.sum(scores == 0.0))
        )


@dataclasses.dataclass
class MatchResult(ArenaResult):
    """A match's counts plus its per-game results, in game order."""

    scores: np.ndarray
    """1 win, 0.5 draw, 0 loss, per game, for the player under test."""
    moved_first: np.ndarray
    """Whether the player under test moved first in each game (alternating from True)."""

    def summary(self) -> str:
        """``W wins, D draws, L losses over N games: score S``."""
        return (
            f"{self.wins} wins, {self.draws} draws, {self.losses} losses over {self.games} "
            f"games: score {self.score:.3f}"
        )


def play_match(
    game: BoardGame,
    player: Player,
    opponent: Player,
    num_games: int,
    opening_moves: int = 0,
    seed: int | None = None,
) -> MatchResult:
    """``player`` against ``opponent`` for ``num_games`` games, first move alternating.

    Raises:
        ValueError: ``num_games < 1`` or ``opening_moves < 0``.
    """
    if isinstance(num_games, bool) or not isinstance(num_games, int) or num_games < 1:
        raise ValueError(f"num_games={num_games!r} is invalid; valid: an integer >= 1")
    if opening_moves < 0:
        raise ValueError(f"opening_moves={opening_moves!r} is invalid; valid: >= 0")
    first = np.arange(num_games) % 2 == 0
    seeds = np.random.SeedSequence(seed).spawn(2)
    as_first = play_games(game, player, opponent, int(first.sum()), opening_moves, _int(seeds[0]))
    scores = np.empty(num_games)
    scores[first] = as_first
    if (~first).any():
        as_second = play_games(
            game, opponent, player, int((~first).sum()), opening_moves, _int(seeds[1])
        )
        scores[~first] = 1.0 - as_second
    counts = ArenaResult.from_scores(scores)
    return MatchResult(counts.wins, counts.draws, counts.losses, scores, first)


def _int(seq: np.random.SeedSequence) -> int:
    return int(seq.generate_state(1)[0])
