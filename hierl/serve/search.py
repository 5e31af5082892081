"""The served board-game player: an AlphaZero checkpoint's network with the MCTS run in
the replica.

``ServedSearch`` answers ``POST /act`` for an ALPHAZERO checkpoint (the deployment
picks it instead of ``hierl.serve.policy.ServedPolicy``; the same methods).  A
request holds a board and optionally a simulation count, bounded by the server setting
``max_simulations``:

    {"board": [[0, 0, 0, 0, 0, 0, 0], ..., [0, 0, 0, 1, -1, 0, 0]],  # rows x cols, row 0 at
                                       # the top; 1: the first player's stones, -1: the second's
     "simulations": 200}               # optional, 1..max_simulations (default: the run's
                                       # num_simulations, at most max_simulations)

The player to move follows from the stone counts (equal: the first player).  The answer
is ``{"move": 3, "visits": [...], "value": 0.12, "simulations": 200, "to_play": 0,
"version": {...}}``: the most visited move (greedy), the root visit distribution, the
search's value of the position for the player to move, in [-1, 1].  Concurrent requests
with the same simulation count are searched together (their leaves share network calls).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hierl.algorithms.alphazero.player import AlphaZeroPlayer
from hierl.evaluators.wire import WireError, encode, short_repr
from hierl.utils import array_digest

REQUEST_FIELDS = ("board", "simulations")
"""The keys a board-game ``/act`` request may hold."""


class BoardQuery:
    """One decoded board-game request: the canonical board and the simulations."""

    __slots__ = ("board", "simulations", "to_play")

    def __init__(self, board: np.ndarray, simulations: int, to_play: int):
        self.board = board
        self.simulations = simulations
        self.to_play = to_play


class ServedSearch:
    """An AlphaZero player answering ``/act`` with a search per board (module docstring).

    Args:
        player: the checkpoint's player (greedy, no noise).
        max_simulations: the most simulations one request may ask for.
        checkpoint: where it came from (``/spec`` shows its name).
    """

    def __init__(self, player: AlphaZeroPlayer, max_simulations: int, checkpoint: str = ""):
        self.player = player
        self.game = player.game
        self.max_simulations = int(max_simulations)
        self.default_simulations = min(player.simulations, self.max_simulations)
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        digest = array_digest(player.get_weights())
        self.version: dict[str, Any] = {"iteration": player.iteration, "hash": digest}
        """The weights answering (they never change: no pushes to a search app)."""

    @classmethod
    def from_checkpoint(
        cls, checkpoint: str | Path, max_simulations: int, allow_imports: Collection[str] = ()
    ) -> ServedSearch:
        """Load only the best model of an ALPHAZERO checkpoint (no Ray, no actors).

        Raises:
            CheckpointError: missing, corrupt, not AlphaZero, or a refused import.
        """
        player = AlphaZeroPlayer.from_checkpoint(checkpoint, allow_imports=allow_imports)
        return cls(player, max_simulations, str(checkpoint))

    def spec(self) -> dict[str, Any]:
        """``GET /spec``: the game, the request fields and limits, the weights' version."""
        return {
            "algorithm": "ALPHAZERO",
            "checkpoint": Path(self.checkpoint).name,
            "env": self.player.config.env,
            "iteration": self.version["iteration"],
            "hash": self.version["hash"],
            "version": self.version,
            "board": {
                "rows": self.game.rows,
                "cols": self.game.cols,
                "num_actions": self.game.num_actions,
                "cells": "1: the first player's stones, -1: the second's, 0: empty; row 0 "
                "is the top",
            },
            "request_fields": list(REQUEST_FIELDS),
            "max_simulations": self.max_simulations,
            "default_simulations": self.default_simulations,
        }

    def parse(self, data: Any) -> BoardQuery:
        """A request's JSON value as a ``BoardQuery``.

        Raises:
            WireError: naming the field that does not fit and what is valid.
        """
        if not isinstance(data, Mapping):
            raise WireError("body", f"expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(REQUEST_FIELDS))
        if unknown:
            raise WireError(unknown[0], f"unknown field; valid: {', '.join(REQUEST_FIELDS)}")
        sims = data.get("simulations", self.default_simulations)
        if isinstance(sims, bool) or not isinstance(sims, int):
            raise WireError("simulations", f"must be an integer, got {short_repr(sims)}")
        if not 1 <= sims <= self.max_simulations:
            raise WireError(
                "simulations",
                f"{sims} is out of range; valid: 1..{self.max_simulations} (the server's "
                "max_simulations)",
            )
        if "board" not in data:
            raise WireError("board", f"missing; expected {self._board_format()}")
        board, to_play = self._decode_board(data["board"])
        return BoardQuery(board, sims, to_play)

    def _board_format(self) -> str:
        return (
            f"a list of {self.game.rows} rows of {self.game.cols} values in -1, 0, 1 (1: the "
            "first player's stones, -1: the second's)"
        )

    def _decode_board(self, value: Any) -> tuple[np.ndarray, int]:
        game = self.game
        rows_ok = isinstance(value, list) and len(value) == game.rows
        if not rows_ok or not all(
            isinstance(r, list)
            and len(r) == game.cols
            and all(isinstance(v, int) and not isinstance(v, bool) and -1 <= v <= 1 for v in r)
            for r in value
        ):
            raise WireError("board", f"expected {self._board_format()}, got {short_repr(value)}")
        absolute = np.asarray(value, dtype=np.int8)
        first, second = int((absolute == 1).sum()), int((absolute == -1).sum())
        if first - second not in (0, 1):
            raise WireError(
                "board",
                f"{first} stones of the first player (1) and {second} of the second (-1): the "
                "first player has as many stones as the second, or one more",
            )
        to_play = first - second
        board = absolute if to_play == 0 else -absolute  # canonical: +1 = the player to move
        if game.outcome(board) is not None:
            raise WireError("board", "the game on this board is over: no move to search")
        return board, to_play

    def act(self, queries: Sequence[BoardQuery]) -> list[dict[str, Any]]:
        """The answers to ``queries`` (a dynamic batch), in order; queries with the same
        simulation count share one batched search."""
        groups: dict[int, list[int]] = {}
        for i, q in enumerate(queries):
            groups.setdefault(q.simulations, []).append(i)
        answers: list[dict[str, Any]] = [{} for _ in queries]
        with self._lock:
            for sims, idx in groups.items():
                results = self.player.search([queries[i].board for i in idx], sims)
                for i, r in zip(idx, results, strict=True):
                    answers[i] = {
                        "move": r.move,
                        "visits": encode(r.visits),
                        "value": r.value,
                        "simulations": r.simulations,
                        "to_play": queries[i].to_play,
                        "version": self.version,
                    }
        return answers

    def update(self, snapshot: Any) -> dict[str, Any]:
        """Pushed weights are not taken: a search app serves its checkpoint's best model.

        Raises:
            ValueError: always.
        """
        raise ValueError(
            "an ALPHAZERO app serves its checkpoint's best model and takes no pushed weights; "
            "deploy the new checkpoint instead"
        )

    def stop(self) -> None:
        """Nothing to release (no trainer, no actors)."""
