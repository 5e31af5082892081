"""AlphaZero on Connect Four: the value head of each checkpoint against solved positions
(issue 36, item 4, "the value head's accuracy").

The positions are Pascal Pons' six test sets (1,000 positions each,
http://blog.gamesolver.org/solving-connect-four/02-test-protocol/): ``Test_L<stage>_R<level>``,
stage 1-3 = beginning / middle / end of the game (≤ 14, 15-28, > 28 moves played), level
1-3 = easy / medium / hard (< 14, 14-28, > 28 moves left to the end of the game).
Each line is ``MOVES SCORE``: the columns played from the empty 6x7 board (1-7, left to
right), and the exact score for the player to move (> 0: a win, 0: a draw, < 0: a loss).
The files are not in this repository; ``--positions DIR`` names a folder holding any of
them as published (AlphaZero.jl keeps a copy in ``games/connect-four/benchmark/``).

Each position is replayed on hierl's Connect Four and evaluated by the checkpoint's best
network (no search): its value ``v`` in [-1, 1] for the player to move.  Per test set:

* ``decisive_accuracy``: the share of won and lost positions where ``sign(v)`` is the
  winner's sign;
* ``outcome_accuracy``: the share of all positions whose band of ``v`` (a loss below
  ``-DRAW_BAND``, a draw within it, a win above ``DRAW_BAND``) is the true outcome;
* ``draw_abs_value``: the mean ``|v|`` over drawn positions (0 for a perfect draw call).

Writes ``values.csv`` (one row per checkpoint and test set, rewritten in full: a
checkpoint takes about a second) and ``values.png`` into the curve folder of
``benchmarks/connect_four.py``::

    python benchmarks/connect_four_values.py RUN_DIR --positions DIR [--name NAME | --out DIR]
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from connect_four import CURVES_DIR, checkpoints

from hierl.algorithms.alphazero.games import BoardGame, ConnectFour
from hierl.algorithms.alphazero.player import AlphaZeroPlayer
from hierl.checkpoint import load_checkpoint
from hierl.files import atomic_write

TEST_SET = re.compile(r"^Test_L([123])_R([123])$")
"""The test sets' file names."""
DRAW_BAND = 1 / 3
"""``|v|`` at or below this calls a draw (``outcome_accuracy``): the middle third."""
MAX_LINE = 64
"""Characters a line may hold (42 moves, a space, a score of at most 3 characters)."""
FIELDS = (
    "iteration",
    "train_hours",
    "test_set",
    "positions",
    "wins",
    "draws",
    "losses",
    "decisive_accuracy",
    "outcome_accuracy",
    "draw_abs_value",
)


def board_of(game: BoardGame, moves: str, where: str) -> np.ndarray:
    """The canonical board (player to move) after ``moves`` (columns ``1..cols``).

    Raises:
        ValueError: naming ``where``: a column out of range, a full column, a move after
            the game ended, or a position whose game is over.
    """
    board = game.initial_board()
    for i, char in enumerate(moves):
        column = int(char) - 1
        if not 0 <= column < game.num_actions or game.outcome(board) is not None:
            raise ValueError(f"{where}: move {i + 1} ({char!r}) is not legal here")
        if not game.legal_mask(board)[column]:
            raise ValueError(f"{where}: move {i + 1} plays the full column {char}")
        board = game.next_board(board, column)
    if game.outcome(board) is not None:
        raise ValueError(f"{where}: the game is over after these moves; a test position is not")
    return board


def read_test_set(path: Path, game: BoardGame) -> tuple[np.ndarray, np.ndarray]:
    """``(boards, scores)`` of a test set file; one clear error for a bad line."""
    boards, scores = [], []
    with path.open("r", encoding="ascii", errors="replace") as f:
        # bounded reads: a line is short, whatever the file holds
        for number, line in enumerate(iter(lambda: f.readline(MAX_LINE + 2), ""), start=1):
            where = f"{path}:{number}"
            text = line.rstrip("\r\n")
            fields = text.split()
            if not fields:
                continue
            if len(text) > MAX_LINE or len(fields) != 2:
                raise ValueError(f"{where}: expected 'MOVES SCORE', got {text[:MAX_LINE]!r}")
            moves, score = fields
            if not moves.isdigit() or not re.fullmatch(r"-?\d{1,2}", score):
                raise ValueError(f"{where}: expected columns 1-7 and an integer score: {text!r}")
            boards.append(board_of(game, moves, where))
            scores.append(int(score))
    if not boards:
        raise ValueError(f"{path}: no positions")
    return np.stack(boards), np.array(scores)


def accuracy(values: np.ndarray, scores: np.ndarray) -> dict[str, Any]:
    """The three measures (module docstring) of ``values`` against the true ``scores``."""
    truth = np.sign(scores)
    called = np.where(values > DRAW_BAND, 1, np.where(values < -DRAW_BAND, -1, 0))
    decisive = truth != 0
    draws = ~decisive
    return {
        "positions": len(scores),
        "wins": int((truth > 0).sum()),
        "draws": int(draws.sum()),
        "losses": int((truth < 0).sum()),
        "decisive_accuracy": float(np.mean(np.sign(values[decisive]) == truth[decisive]))
        if decisive.any()
        else float("nan"),
        "outcome_accuracy": float(np.mean(called == truth)),
        "draw_abs_value": float(np.mean(np.abs(values[draws]))) if draws.any() else float("nan"),
    }


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in sorted({r["test_set"] for r in rows}):
        mine = [r for r in rows if r["test_set"] == name]
        ax.plot(
            [r["train_hours"] for r in mine],
            [r["outcome_accuracy"] for r in mine],
            marker="o",
            label=name,
        )
    ax.set_xlabel("training wall-clock (hours)")
    ax.set_ylabel("value head: outcome accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("AlphaZero, Connect Four: value head on Pons' solved positions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the training run's output dir")
    parser.add_argument("--positions", type=Path, required=True, help="folder of Test_L*_R*")
    parser.add_argument("--name", default="connect-four-alphazero", help="curves/<name>/")
    parser.add_argument("--out", type=Path, help="write here instead of curves/<name>/")
    args = parser.parse_args(argv)
    files = sorted(p for p in args.positions.iterdir() if TEST_SET.match(p.name))
    if not files:
        raise SystemExit(f"no Test_L<1-3>_R<1-3> files in {args.positions}")
    found = checkpoints(args.run_dir)
    if not found:
        raise SystemExit(f"no checkpoints under {args.run_dir}")
    game = ConnectFour()  # the test sets' board: 6x7, four in a row
    try:
        sets = {p.name: read_test_set(p, game) for p in files}
    except ValueError as e:
        raise SystemExit(str(e)) from None
    rows = []
    for path in found:
        player = AlphaZeroPlayer.from_checkpoint(path)
        played = player.game
        shape = (played.rows, played.cols, getattr(played, "connect", None))
        if not isinstance(played, ConnectFour) or shape != (6, 7, 4):
            raise SystemExit(
                f"{path} plays {type(played).__name__} on {played.rows}x{played.cols}; the "
                "test sets are Connect Four on 6x7, four in a row"
            )
        _, state = load_checkpoint(path, keys=("iteration", "time_total_s"))
        for name, (boards, scores) in sets.items():
            _, values = player.evaluate(boards)
            row = {
                "iteration": int(state["iteration"]),
                "train_hours": float(state["time_total_s"]) / 3600.0,
                "test_set": name,
                **accuracy(values, scores),
            }
            rows.append(row)
            print(
                f"iteration {row['iteration']} ({row['train_hours']:.2f} h) {name}: outcome "
                f"{row['outcome_accuracy']:.3f}, decisive {row['decisive_accuracy']:.3f}, "
                f"|v| on draws {row['draw_abs_value']:.2f}",
                flush=True,
            )
    out = args.out or CURVES_DIR / args.name
    out.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(out / "values.csv", write)
    plot(rows, out / "values.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
