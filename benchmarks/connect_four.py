"""AlphaZero on Connect Four: the score of each saved checkpoint against fixed opponents,
as a curve over training wall-clock (issue 36, item 4).

Every checkpoint of a run (``RUN_DIR/checkpoints/<iteration>/``, saved by ``hierl train
--config examples/tuned/connect-four-alphazero.yaml``, one per iteration) plays
``--games`` games (first move alternating, ``--opening-moves`` random plies to start each
game) against each opponent: pure MCTS with 1,000 random rollouts per move and alpha-beta
at depth 4, 6 and 8 by default.  The score is ``(wins + draws/2) / games``.  The games
are played by the code of ``hierl play`` (``AlphaZeroPlayer``, ``make_opponent``,
``play_match`` with the same seeds), so each row is reproduced by the command printed
beside it::

    hierl play RUN_DIR/checkpoints/000012 --opponent alphabeta --depth 6 --games 100 \\
        --opening-moves 2 --seed 0

Writes ``benchmarks/curves/<name>/scores.csv`` (one row per checkpoint and opponent,
appended as they finish: rerunning skips the rows already there, so a long scoring run
resumes), ``curve.png`` (score against training hours, the goals drawn) and
``summary.json`` (commit, command, settings, the latest checkpoint's scores, and the
goals: >= 0.9 against mcts-1000, >= 0.5 against alphabeta-6, judged on the last
checkpoint saved within 3 hours of training).

    python benchmarks/connect_four.py RUN_DIR [--games 100] [--name connect-four-alphazero]

Each row also records each side's thinking time per move made (the model searches its
games' boards in one batched call: its time per move is the compute a move costs it), so
that a search budget can be compared with the opponent's at equal time.

``--jobs N`` plays N matches at once, each in its own process with one torch thread (one
per core); a match's games and seeds are those it plays alone, so the rows are the same.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from common import BENCH_DIR

from hierl.algorithms.alphazero.games import Player
from hierl.algorithms.alphazero.match import play_match
from hierl.algorithms.alphazero.opponents import describe_opponent, make_opponent
from hierl.algorithms.alphazero.player import AlphaZeroPlayer
from hierl.bench.report import git_info
from hierl.checkpoint import load_checkpoint
from hierl.files import atomic_write

CURVES_DIR = BENCH_DIR / "curves"
DEFAULT_OPPONENTS = ("mcts-1000", "alphabeta-4", "alphabeta-6", "alphabeta-8")
GOALS = {"mcts-1000": 0.9, "alphabeta-6": 0.5}
"""Issue 36's goals: the score to reach within ``GOAL_HOURS`` of training."""
GOAL_HOURS = 3.0
"""The goals judge each opponent's last checkpoint saved within this much training."""
FIELDS = (
    "iteration",
    "train_hours",
    "opponent",
    "games",
    "wins",
    "draws",
    "losses",
    "score",
    "score_seconds",
    "command",
    "model_ms_per_move",
    "opponent_ms_per_move",
)
"""A row's columns; the last two (each side's thinking time, added later) are empty in
rows scored before they were."""


def parse_opponent(label: str) -> tuple[str, dict[str, int]]:
    """``mcts-1000`` → ``("mcts", {"rollouts": 1000})``, ``alphabeta-6`` → depth 6."""
    name, _, number = label.partition("-")
    if name == "random" and not number:
        return name, {}
    if name in ("mcts", "alphabeta") and number.isdigit():
        return name, {"rollouts" if name == "mcts" else "depth": int(number)}
    raise SystemExit(f"unknown opponent {label!r}; valid: random, mcts-N, alphabeta-D")


def canonical(label: str) -> str:
    """The label a row records for opponent ``label`` (``mcts-1000``, ``alphabeta-6``)."""
    name, settings = parse_opponent(label)
    return describe_opponent(name, **settings)


def checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoints, oldest first (a checkpoints dir or a run's output dir)."""
    root = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    found = [p for p in root.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def play_command(path: Path, name: str, settings: dict[str, int], args: Any) -> str:
    """The ``hierl play`` command that plays the same match."""
    flags = "".join(f" --{k} {v}" for k, v in settings.items())
    sims = f" --simulations {args.simulations}" if args.simulations else ""
    return (
        f"hierl play {path} --opponent {name}{flags} --games {args.games} "
        f"--opening-moves {args.opening_moves}{sims} --seed {args.seed}"
    )


class TimedPlayer:
    """A player that adds up the time it spends choosing moves, and the moves it makes.

    The model searches all its games' boards in one batched call, the baselines one board
    at a time: seconds per move made is the compute each side spends on a move either way.
    """

    def __init__(self, player: Player):
        self.player = player
        self.seconds = 0.0
        self.moves = 0

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """The wrapped player's moves, timed."""
        start = time.perf_counter()
        moves = self.player.select_moves(boards)
        self.seconds += time.perf_counter() - start
        self.moves += len(boards)
        return moves

    @property
    def ms_per_move(self) -> float:
        """Milliseconds per move made (0 before the first)."""
        return 1000.0 * self.seconds / self.moves if self.moves else 0.0


def score_checkpoint(path: Path, label: str, args: Any) -> dict[str, Any]:
    """One row: the checkpoint's best model against opponent ``label``."""
    name, settings = parse_opponent(label)
    # as cmd_play does it, so that the printed command replays this match
    model = AlphaZeroPlayer.from_checkpoint(path, simulations=args.simulations, seed=args.seed)
    player = TimedPlayer(model)
    opponent = TimedPlayer(make_opponent(name, model.game, **settings, seed=args.seed))
    start = time.perf_counter()
    result = play_match(model.game, player, opponent, args.games, args.opening_moves, args.seed)
    _, state = load_checkpoint(path, keys=("iteration", "time_total_s"))
    return {
        "iteration": int(state["iteration"]),
        "train_hours": float(state["time_total_s"]) / 3600.0,
        "opponent": canonical(label),
        "games": result.games,
        "wins": result.wins,
        "draws": result.draws,
        "losses": result.losses,
        "score": result.score,
        "score_seconds": time.perf_counter() - start,
        "command": play_command(path, name, settings, args),
        "model_ms_per_move": player.ms_per_move,
        "opponent_ms_per_move": opponent.ms_per_move,
    }


def _one_torch_thread() -> None:
    """A ``--jobs`` worker's initializer: one core each, no oversubscription."""
    import torch

    torch.set_num_threads(1)


def score_all(tasks: list[tuple[Path, str]], args: Any, jobs: int) -> Iterator[dict[str, Any]]:
    """The rows of ``tasks`` (checkpoint, opponent), in order with one job, else as their
    matches finish in ``jobs`` processes."""
    if jobs == 1:
        yield from (score_checkpoint(path, label, args) for path, label in tasks)
        return
    spawn = multiprocessing.get_context("spawn")  # no forked copy of a torch runtime
    with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_one_torch_thread) as pool:
        futures = [pool.submit(score_checkpoint, path, label, args) for path, label in tasks]
        yield from (future.result() for future in as_completed(futures))


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of ``scores.csv`` (none if absent), every ``FIELDS`` cell present: those
    of columns added after a row was written are empty."""
    if not path.exists():
        return []
    with path.open() as f:
        return [{k: r.get(k) or "" for k in FIELDS} for r in csv.DictReader(f)]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """All ``rows`` to ``path``, atomically, under the header of ``FIELDS``."""

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


def plot(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label in sorted({r["opponent"] for r in rows}):
        mine = sorted(
            (r for r in rows if r["opponent"] == label), key=lambda r: int(r["iteration"])
        )
        ax.plot(
            [float(r["train_hours"]) for r in mine],
            [float(r["score"]) for r in mine],
            marker="o",
            label=label,
        )
        if label in GOALS:
            ax.axhline(GOALS[label], linestyle="--", linewidth=0.8, color="gray")
    ax.set_xlabel("training wall-clock (hours)")
    ax.set_ylabel("score (wins + draws/2) / games")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def last_rows(rows: list[dict[str, Any]], max_hours: float = math.inf) -> dict[str, Any]:
    """Each opponent's row of the latest checkpoint saved within ``max_hours``."""
    latest: dict[str, dict[str, Any]] = {}
    for r in rows:
        if float(r["train_hours"]) > max_hours:
            continue
        label = r["opponent"]
        if label not in latest or int(r["iteration"]) > int(latest[label]["iteration"]):
            latest[label] = r
    return latest


def summarize(rows: list[dict[str, Any]], args: Any, out: Path) -> dict[str, Any]:
    """``summary.json``: settings, each opponent's latest row, and the goals, judged on
    the last checkpoint within ``GOAL_HOURS`` (a run's final iteration can end past it)."""
    latest, judged = last_rows(rows), last_rows(rows, GOAL_HOURS)
    goals = {
        label: {
            "goal": goal,
            "within_hours": GOAL_HOURS,
            "iteration": int(judged[label]["iteration"]) if label in judged else None,
            "score": float(judged[label]["score"]) if label in judged else None,
            "met": label in judged and float(judged[label]["score"]) >= goal,
        }
        for label, goal in GOALS.items()
    }
    summary = {
        "command": " ".join(["python", *sys.argv]),
        "git": git_info(),
        "run_dir": str(args.run_dir),
        "games": args.games,
        "opening_moves": args.opening_moves,
        "simulations": args.simulations,
        "seed": args.seed,
        "latest": {label: {k: r[k] for k in FIELDS} for label, r in latest.items()},
        "goals": goals,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the training run's output dir")
    parser.add_argument("--games", type=int, default=100, help="games per match (default 100)")
    parser.add_argument(
        "--opponents",
        nargs="+",
        default=list(DEFAULT_OPPONENTS),
        help=f"opponents (default {' '.join(DEFAULT_OPPONENTS)})",
    )
    parser.add_argument("--opening-moves", type=int, default=2, help="random plies (default 2)")
    parser.add_argument("--simulations", type=int, help="MCTS simulations per model move")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=1, help="score every K-th checkpoint")
    parser.add_argument(
        "--iterations",
        type=int,
        nargs="+",
        help="score only these iterations' checkpoints (overrides --every)",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="matches played at once, one process each"
    )
    parser.add_argument("--name", default="connect-four-alphazero", help="curves/<name>/")
    parser.add_argument("--out", type=Path, help="write here instead of curves/<name>/")
    parser.add_argument(
        "--no-score",
        action="store_true",
        help="score nothing: redraw curve.png and summary.json from scores.csv",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be >= 1, got {args.jobs}")
    for label in args.opponents:
        parse_opponent(label)
    out = args.out or CURVES_DIR / args.name
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "scores.csv"
    rows = read_rows(csv_path)
    done = {(int(r["iteration"]), r["opponent"]) for r in rows}
    found = [] if args.no_score else checkpoints(args.run_dir)
    if found and args.iterations:  # chosen checkpoints, whatever --every says
        missing = set(args.iterations) - {int(p.name) for p in found}
        if missing:
            have = ", ".join(p.name for p in found)
            raise SystemExit(f"no checkpoint for iterations {sorted(missing)}; found: {have}")
        found = [p for p in found if int(p.name) in args.iterations]
    else:
        found = found[:: args.every]
    if not found and not rows:
        raise SystemExit(f"no checkpoints under {args.run_dir}")
    tasks = [
        (path, label)
        for path in found
        for label in args.opponents
        if (int(path.name), canonical(label)) not in done
    ]
    for row in score_all(tasks, args, args.jobs):
        rows.append(row)
        write_rows(csv_path, rows)
        print(
            f"iteration {row['iteration']} ({row['train_hours']:.2f} h) vs {row['opponent']}: "
            f"{row['wins']}/{row['draws']}/{row['losses']} score {row['score']:.3f} "
            f"({row['score_seconds']:.0f} s; ms a move: model {row['model_ms_per_move']:.1f}, "
            f"opponent {row['opponent_ms_per_move']:.1f})   # {row['command']}",
            flush=True,
        )
    plot(rows, out / "curve.png", f"AlphaZero, Connect Four: {args.games} games per point")
    summary = summarize(rows, args, out)
    for label, goal in summary["goals"].items():
        verdict = "met" if goal["met"] else "not met"
        judged = (
            f"checkpoint {goal['iteration']} scored {goal['score']}"
            if goal["iteration"] is not None
            else "no checkpoint scored"
        )
        print(f"goal {label} >= {goal['goal']} within {GOAL_HOURS:g} h: {judged} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
