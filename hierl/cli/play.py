"""AlphaZero checkpoints at the command line: ``hierl play CHECKPOINT`` plays its best
model at its board game, against you at the terminal or against a built-in opponent for
N games; ``hierl export`` writes its network and ``hierl rollout`` points here
(``export_alphazero``, ``refuse_rollout``).

The model acts through ``hierl.algorithms.alphazero.player.AlphaZeroPlayer`` (no
Ray, no actors); matches use ``hierl.algorithms.alphazero.match.play_match`` and the
opponents of ``hierl.algorithms.alphazero.opponents``, the same code as
``benchmarks/connect_four.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from hierl.cli.common import (
    CLIError,
    add_allow_import,
    non_negative_int,
    positive_int,
    resolve_checkpoint,
)

QUIT = ("q", "quit", "exit")


def add_acting_flags(command: argparse.ArgumentParser) -> None:
    """``--simulations``, ``--temperature``, ``--noise``: AlphaZero's acting settings."""
    command.add_argument(
        "--simulations",
        type=positive_int,
        metavar="N",
        help="MCTS simulations per move (default: the run's num_simulations)",
    )
    command.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="0: play the most visited move (default); T > 0: sample moves with "
        "probability proportional to visits^(1/T)",
    )
    command.add_argument(
        "--noise",
        type=float,
        default=0.0,
        metavar="W",
        help="weight of Dirichlet noise in the root priors, in [0, 1] (default 0: none)",
    )


def load_player(args: argparse.Namespace, checkpoint: Any) -> Any:
    """The AlphaZero player of ``checkpoint`` with the acting flags of ``args``."""
    from hierl.algorithms.alphazero.player import AlphaZeroPlayer
    from hierl.checkpoint import CheckpointError
    from hierl.config import ConfigError

    try:
        return AlphaZeroPlayer.from_checkpoint(
            checkpoint,
            simulations=args.simulations,
            temperature=args.temperature,
            noise=args.noise,
            seed=args.seed,
            allow_imports=args.allow_import,
        )
    except (CheckpointError, ConfigError, ValueError) as e:
        raise CLIError(str(e)) from None


def add_play_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl play`` (its options, help and handler) to the subcommands ``sub``."""
    play = sub.add_parser(
        "play",
        help="play an AlphaZero checkpoint at its board game (you, or a built-in opponent)",
        description=(
            "Play the best model of an ALPHAZERO checkpoint (its network in its MCTS) "
            "against you at the terminal (the default), or against a built-in opponent "
            "for --games games with the first move alternating, printing wins, draws, "
            "losses and the score (wins + draws/2) / games. CHECKPOINT may also be a run's "
            "output dir or its checkpoints/ dir (the latest checkpoint is used)."
        ),
    )
    play.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    play.add_argument(
        "--opponent",
        default="human",
        choices=("human", "random", "mcts", "alphabeta"),
        help="human (you, at the terminal; default), random, mcts (pure UCT with random "
        "rollouts, no network) or alphabeta (Connect Four only)",
    )
    play.add_argument(
        "--games",
        type=positive_int,
        metavar="N",
        help="games against a built-in opponent (default 10)",
    )
    play.add_argument(
        "--rollouts", type=positive_int, metavar="N", help="mcts: rollouts per move (default 1000)"
    )
    play.add_argument(
        "--depth", type=positive_int, metavar="D", help="alphabeta: plies searched (default 6)"
    )
    play.add_argument(
        "--opening-moves",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="start every game with N random plies (diverse games between deterministic "
        "players; default 0)",
    )
    play.add_argument(
        "--model-first",
        action="store_true",
        help="against a human: the model moves first (default: you do)",
    )
    add_acting_flags(play)
    play.add_argument("--seed", type=int, metavar="S", help="seed for the players and openings")
    add_allow_import(play)
    play.set_defaults(func=cmd_play)
    return play


def cmd_play(args: argparse.Namespace) -> int:
    from hierl.algorithms.alphazero.match import play_match
    from hierl.algorithms.alphazero.opponents import describe_opponent, make_opponent

    human = args.opponent == "human"
    if args.rollouts is not None and args.opponent != "mcts":
        raise CLIError(f"--rollouts is a setting of --opponent mcts, not {args.opponent}")
    if args.depth is not None and args.opponent != "alphabeta":
        raise CLIError(f"--depth is a setting of --opponent alphabeta, not {args.opponent}")
    if human and (args.games is not None or args.opening_moves):
        raise CLIError("--games and --opening-moves are for built-in opponents, not human")
    if args.model_first and not human:
        raise CLIError("--model-first is for --opponent human (matches alternate who starts)")
    path = resolve_checkpoint(args.checkpoint)
    player = load_player(args, path)
    if human:
        return play_human(player, args.model_first, input, print)
    settings = {"rollouts": args.rollouts or 1000, "depth": args.depth or 6}
    try:
        opponent = make_opponent(args.opponent, player.game, **settings, seed=args.seed)
    except ValueError as e:
        raise CLIError(str(e)) from None
    games = args.games or 10
    label = describe_opponent(args.opponent, **settings)
    print(
        f"{player.config.env}: model (iteration {player.iteration}, best version "
        f"{player.version}, {player.simulations} simulations per move) vs {label}, "
        f"{games} games, first move alternating",
        flush=True,
    )
    result = play_match(player.game, player, opponent, games, args.opening_moves, args.seed)
    first = result.scores[result.moved_first]
    second = result.scores[~result.moved_first]
    print(f"moving first: score {first.mean():.3f} over {len(first)} games", flush=True)
    if len(second):
        print(f"moving second: score {second.mean():.3f} over {len(second)} games", flush=True)
    print(
        f"wins {result.wins}, draws {result.draws}, losses {result.losses}; score "
        f"{result.score:.3f} (wins + draws/2 over {result.games} games)",
        flush=True,
    )
    return 0


# -- against a human -------------------------------------------------------------------
def draw_board(game: Any, board: Any) -> str:
    """The board with X (first player), O and the move numbers a human types: column
    numbers above a Connect Four board, cell numbers in the empty cells of others."""
    from hierl.algorithms.alphazero.games import ConnectFour

    first_to_move = game.to_play(board) == 0
    absolute = board if first_to_move else -board
    chars = {1: "X", -1: "O"}
    if isinstance(game, ConnectFour):
        lines = [" ".join(str(c + 1) for c in range(game.cols))]
        lines += [" ".join(chars.get(int(v), ".") for v in row) for row in absolute]
        return "\n".join(lines)
    width = len(str(game.num_actions))
    lines = []
    for r, row in enumerate(absolute):
        cells = [
            chars.get(int(v), str(r * game.cols + c + 1)).rjust(width) for c, v in enumerate(row)
        ]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def ask_move(
    game: Any, board: Any, read: Callable[[str], str], write: Callable[[str], None]
) -> int | None:
    """The human's move (0-based), asked again after each illegal answer (one line
    saying why); None when they quit (q, or end of input)."""
    import numpy as np

    legal = [int(a) + 1 for a in np.flatnonzero(game.legal_mask(board))]
    choices = ", ".join(map(str, legal))
    while True:
        try:
            text = read(f"your move ({choices}; q quits): ").strip()
        except EOFError:
            return None
        if text.lower() in QUIT:
            return None
        if text.isdigit() and int(text) in legal:
            return int(text) - 1
        write(f"illegal move {text!r}: type one of {choices} (or q to quit)")


def play_human(
    player: Any, model_first: bool, read: Callable[[str], str], write: Callable[[str], None]
) -> int:
    """One game of ``player`` against a human at the terminal; returns the exit status."""
    game = player.game
    board = game.initial_board()
    marks = ("O", "X") if model_first else ("X", "O")
    write(f"you play {marks[0]}, the model plays {marks[1]}; X moves first")
    ply = 0
    while game.outcome(board) is None:
        write(draw_board(game, board))
        model_turn = (ply % 2 == 0) == model_first
        if model_turn:
            result = player.search([board])[0]
            move = result.move
            write(f"model plays {move + 1} (its value of the position: {result.value:+.2f})")
        else:
            move = ask_move(game, board, read, write)
            if move is None:
                write("game abandoned")
                return 0
        board = game.next_board(board, move)
        ply += 1
    write(draw_board(game, board))
    if game.outcome(board) == 0.0:
        write("draw")
    else:  # the player who made the last move won
        model_won = ((ply - 1) % 2 == 0) == model_first
        write("the model wins" if model_won else "you win")
    sys.stdout.flush()
    return 0


# -- export and rollout of an AlphaZero checkpoint ---------------------------------------
def is_alphazero(checkpoint: Any) -> bool:
    """Whether ``checkpoint`` is an ALPHAZERO checkpoint (reads its metadata only)."""
    from hierl.algorithms.alphazero.player import is_alphazero_checkpoint

    return is_alphazero_checkpoint(checkpoint)


def refuse_rollout(checkpoint: Any) -> None:
    """``hierl rollout`` of an AlphaZero checkpoint: a CLIError pointing at ``hierl play``."""
    raise CLIError(
        f"'{checkpoint}' is an ALPHAZERO checkpoint: a two-player board game has no "
        "single-agent episodes to roll out; play its model with 'hierl play "
        f"{checkpoint} --opponent random|mcts|alphabeta' (or against you: no --opponent)"
    )


def export_alphazero(args: argparse.Namespace, checkpoint: Any, output: Any) -> int:
    """``hierl export`` of an AlphaZero checkpoint: its network, without the search."""
    from hierl.algorithms.alphazero.export import SEARCH_NOTE, export_network
    from hierl.algorithms.alphazero.player import AlphaZeroPlayer
    from hierl.checkpoint import CheckpointError
    from hierl.config import ConfigError

    if args.policy_id is not None:
        raise CLIError("--policy-id is for multi-agent checkpoints; ALPHAZERO has one network")
    try:
        player = AlphaZeroPlayer.from_checkpoint(checkpoint, allow_imports=args.allow_import)
        meta = {
            "algorithm": "ALPHAZERO",
            "env": player.config.env,
            "iteration": player.iteration,
            "best_version": player.version,
        }
        exported = export_network(player, output, args.format, meta)
    except (CheckpointError, ConfigError, ValueError) as e:  # ExportError is a ValueError
        raise CLIError(str(e)) from None
    for written in exported.paths:
        print(written.resolve(), flush=True)
    print(f"note: search {SEARCH_NOTE}", file=sys.stderr, flush=True)
    return 0
