"""AlphaZero's batched MCTS against its own network calls alone, same run.

Self-play is search: every move is ``num_simulations`` PUCT descents, each round of them
sending the leaves of all the evaluator's games through the network in one call
(``hierl.algorithms.alphazero.mcts``).  What the tree costs beyond the network is
Python: selection, expansion, backup and the game rules.  This script runs the search
an AlphaZero tuned file's self-play runs (its network, freshly initialised, its
simulations, ``num_envs_per_self_play_worker`` games side by side, root noise on) from
positions of seeded random games, and records every batch the search sent to the
network.  The baseline replays exactly those batches through the network alone (pure
torch, under ``torch.inference_mode``): the time a search with a free tree would take.
The ratio, network alone over the whole search, is the share of the search that is
network (1.0: the tree costs nothing).

The two are timed in alternating rounds in one process, one torch thread (as a
self-play actor's half CPU runs); medians are reported.  Written to
``benchmarks/results/mcts_search.json`` with the machine's load averages.

``--reuse-plies P`` also measures what ``reuse_tree`` costs: ``P`` plies of self-play as
an evaluator plays them (``AlphaZeroPolicy.compute_actions``: root noise, the file's
temperature moves; a finished game restarts from the empty board), once with tree reuse
and once without, in alternating rounds, the same seeds; it reports moves/s, network
calls and the mean number of PUCT selections a simulation makes (its descent depth) for
each.  ``--checkpoint`` searches with a trained run's best network instead of a fresh
one (a trained network's priors are sharper, so its trees are deeper).

Usage::

    .venv/bin/python benchmarks/mcts_search.py              # ~1 minute
    .venv/bin/python benchmarks/mcts_search.py --quick      # a smoke test
    .venv/bin/python benchmarks/mcts_search.py --reuse-plies 200 --checkpoint RUN/checkpoints/000017
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import REPO_ROOT, record

from hierl.algorithms.alphazero import AlphaZeroConfig, AlphaZeroPolicy
from hierl.algorithms.alphazero.games import BoardGame
from hierl.algorithms.alphazero.player import AlphaZeroPlayer
from hierl.tune.experiments import load_experiments

DEFAULT_FILE = REPO_ROOT / "examples" / "tuned" / "connect-four-alphazero-3.yaml"


def load_config(path: Path) -> AlphaZeroConfig:
    """The ``AlphaZeroConfig`` of a one-experiment ALPHAZERO tuned file."""
    ((name, spec),) = load_experiments(path).items()
    if spec.run != "ALPHAZERO":
        raise SystemExit(f"{path}: experiment {name!r} runs {spec.run}, not ALPHAZERO")
    return AlphaZeroConfig.from_dict({**spec.config, "env": spec.env})


def random_positions(game: BoardGame, count: int, max_moves: int, seed: int) -> list[np.ndarray]:
    """``count`` non-terminal boards after 0..``max_moves`` uniformly random moves."""
    rng = np.random.default_rng(seed)
    boards = []
    while len(boards) < count:
        board = game.initial_board()
        for _ in range(int(rng.integers(0, max_moves + 1))):
            nxt = game.next_board(board, int(rng.choice(np.flatnonzero(game.legal_mask(board)))))
            if game.outcome(nxt) is not None:
                break
            board = nxt
        boards.append(board)
    return boards


class RecordingEvaluator:
    """The policy's network calls, each batch of boards kept for the baseline."""

    def __init__(self, policy: AlphaZeroPolicy):
        self.policy = policy
        self.batches: list[np.ndarray] = []

    def __call__(self, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.batches.append(boards.copy())
        return self.policy.evaluate(boards)


def network_only(policy: AlphaZeroPolicy, planes: list[torch.Tensor]) -> None:
    """The baseline: the same batches through the network, nothing else."""
    with torch.inference_mode():
        for x in planes:
            logits, _ = policy.model(x)
            torch.softmax(logits, dim=-1)


def make_policy(
    config: AlphaZeroConfig, seed: int, checkpoint: Path | None = None
) -> AlphaZeroPolicy:
    """The file's policy, seeded; with ``checkpoint``, that run's best network in it."""
    torch.manual_seed(seed)
    np.random.seed(seed)  # the policy's search RNG
    policy = AlphaZeroPolicy(None, None, config)
    if checkpoint is not None:
        trained = AlphaZeroPlayer.from_checkpoint(checkpoint).model
        policy.model.load_state_dict(trained.state_dict())
    return policy


class CountingSelect:
    """Counts a search's PUCT selections (one per tree level a simulation descends)."""

    def __init__(self, policy: AlphaZeroPolicy):
        self.select = policy.mcts._select
        self.calls = 0
        policy.mcts._select = self

    def __call__(self, node: Any) -> int:
        self.calls += 1
        return self.select(node)


def self_play(policy: AlphaZeroPolicy, games: int, plies: int) -> dict[str, float]:
    """``plies`` moves on each of ``games`` boards side by side, as self-play makes them."""
    game = policy.game
    boards = [game.initial_board() for _ in range(games)]
    selections = CountingSelect(policy)
    calls = policy.mcts.num_evaluations
    start = time.perf_counter()
    for _ in range(plies):
        actions, _, _ = policy.compute_actions(game.to_planes(np.stack(boards)))
        for i, action in enumerate(actions):
            board = game.next_board(boards[i], int(action))
            boards[i] = game.initial_board() if game.outcome(board) is not None else board
    seconds = time.perf_counter() - start
    simulations = games * plies * policy.config.num_simulations
    return {
        "seconds": seconds,
        "moves_per_s": games * plies / seconds,
        "network_calls_per_move": (policy.mcts.num_evaluations - calls) / plies,
        "selections_per_simulation": selections.calls / simulations,
    }


def run_reuse(
    config: AlphaZeroConfig, games: int, plies: int, rounds: int, seed: int, checkpoint: Path | None
) -> dict[str, Any]:
    """Self-play with and without ``reuse_tree``, alternating rounds; medians."""
    rows: dict[str, list[dict[str, float]]] = {"reuse": [], "fresh": []}
    for k in range(rounds):
        for name in ("reuse", "fresh"):
            mode = dataclasses.replace(config, reuse_tree=name == "reuse")
            rows[name].append(self_play(make_policy(mode, seed + k, checkpoint), games, plies))
    figures: dict[str, Any] = {
        name: {key: statistics.median(r[key] for r in mine) for key in mine[0]}
        for name, mine in rows.items()
    }
    figures["reuse_over_fresh_moves_per_s"] = (
        figures["reuse"]["moves_per_s"] / figures["fresh"]["moves_per_s"]
    )
    return figures


def run(
    config: AlphaZeroConfig,
    positions: int,
    rounds: int,
    seed: int,
    checkpoint: Path | None = None,
) -> dict[str, Any]:
    """Alternating timings of the search and of its network calls alone."""
    policy = make_policy(config, seed, checkpoint)
    game = policy.game
    boards = random_positions(game, positions, game.rows * game.cols // 2, seed)
    recorder = RecordingEvaluator(policy)
    mcts = policy.make_mcts(config.num_simulations)
    mcts.evaluate = recorder
    search_s, network_s = [], []
    for _ in range(rounds + 1):  # the first round of each warms up and is dropped
        recorder.batches.clear()
        start = time.perf_counter()
        mcts.search_roots(boards, add_noise=True)
        search_s.append(time.perf_counter() - start)
        planes = [torch.from_numpy(game.to_planes(b)) for b in recorder.batches]
        start = time.perf_counter()
        network_only(policy, planes)
        network_s.append(time.perf_counter() - start)
    search, network = statistics.median(search_s[1:]), statistics.median(network_s[1:])
    simulations = positions * config.num_simulations
    return {
        "positions": positions,
        "num_simulations": config.num_simulations,
        "network_calls_per_search": len(recorder.batches),
        "search_s": search,
        "network_only_s": network,
        "simulations_per_s": simulations / search,
        "moves_per_s": positions / search,
        "network_share": network / search,
        "tree_ms_per_simulation": 1e3 * (search - network) / simulations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="an ALPHAZERO tuned file")
    parser.add_argument("--positions", type=int, default=0, help="games (0: the file's)")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds of each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 4 positions")
    parser.add_argument("--checkpoint", type=Path, help="search with this run's best network")
    parser.add_argument(
        "--reuse-plies", type=int, default=0, help="also time P plies of self-play, reuse vs not"
    )
    parser.add_argument("--reuse-rounds", type=int, default=3, help="rounds of each (medians)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_config(args.file)
    positions = args.positions or config.num_envs_per_self_play_worker
    rounds = args.rounds
    if args.quick:
        positions, rounds = 4, 3
    figures = run(config, positions, rounds, args.seed, args.checkpoint)
    print(
        f"{figures['positions']} positions x {figures['num_simulations']} simulations "
        f"({figures['network_calls_per_search']} network calls a search)\n"
        f"  search:       {figures['search_s'] * 1e3:8.1f} ms  "
        f"({figures['simulations_per_s']:,.0f} simulations/s, "
        f"{figures['moves_per_s']:,.1f} moves/s)\n"
        f"  network only: {figures['network_only_s'] * 1e3:8.1f} ms\n"
        f"  network share of the search: {figures['network_share']:.2f} "
        f"(the tree: {figures['tree_ms_per_simulation'] * 1e3:.1f} us a simulation)"
    )
    if args.reuse_plies:
        figures["self_play"] = run_reuse(
            config, positions, args.reuse_plies, args.reuse_rounds, args.seed, args.checkpoint
        )
        for name in ("reuse", "fresh"):
            f = figures["self_play"][name]
            print(
                f"  self-play, {'tree reuse' if name == 'reuse' else 'fresh trees'}: "
                f"{f['moves_per_s']:6.1f} moves/s, {f['network_calls_per_move']:.1f} network "
                f"calls a move, {f['selections_per_simulation']:.2f} selections a simulation"
            )
        ratio = figures["self_play"]["reuse_over_fresh_moves_per_s"]
        print(f"  reuse / fresh moves/s: {ratio:.2f}")
    settings = {
        "file": str(args.file.resolve().relative_to(REPO_ROOT)),
        "rounds": rounds,
        "seed": args.seed,
        "checkpoint": str(args.checkpoint) if args.checkpoint else None,
        "reuse_plies": args.reuse_plies,
        "reuse_rounds": args.reuse_rounds,
    }
    path = record("mcts_search", settings, figures)
    print(f"written {path}")


if __name__ == "__main__":
    main()
