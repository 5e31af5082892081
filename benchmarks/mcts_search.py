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

Usage::

    .venv/bin/python benchmarks/mcts_search.py              # ~1 minute
    .venv/bin/python benchmarks/mcts_search.py --quick      # a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import REPO_ROOT, record

from hierl.algorithms.alphazero import AlphaZeroConfig, AlphaZeroPolicy
from hierl.algorithms.alphazero.games import BoardGame
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


def run(config: AlphaZeroConfig, positions: int, rounds: int, seed: int) -> dict[str, Any]:
    """Alternating timings of the search and of its network calls alone."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    policy = AlphaZeroPolicy(None, None, config)
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
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_config(args.file)
    positions = args.positions or config.num_envs_per_self_play_worker
    rounds = args.rounds
    if args.quick:
        positions, rounds = 4, 3
    figures = run(config, positions, rounds, args.seed)
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
    settings = {
        "file": str(args.file.resolve().relative_to(REPO_ROOT)),
        "rounds": rounds,
        "seed": args.seed,
    }
    path = record("mcts_search", settings, figures)
    print(f"written {path}")


if __name__ == "__main__":
    main()
