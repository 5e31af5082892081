"""AlphaZero-style self-play (ALPHAZERO): MCTS policy graph, components, the gated loop."""

from hierl.algorithms.alphazero.components import AlphaZeroLearner, Arena, ArenaResult
from hierl.algorithms.alphazero.mcts import MCTS, MCTSPlayer, uniform_evaluator
from hierl.algorithms.alphazero.player import AlphaZeroPlayer, SearchResult
from hierl.algorithms.alphazero.policy import AlphaZeroNet, AlphaZeroPolicy
from hierl.algorithms.alphazero.trainer import AlphaZeroConfig, AlphaZeroTrainer, gate_accepts

__all__ = [
    "MCTS",
    "AlphaZeroConfig",
    "AlphaZeroLearner",
    "AlphaZeroNet",
    "AlphaZeroPlayer",
    "AlphaZeroPolicy",
    "AlphaZeroTrainer",
    "Arena",
    "ArenaResult",
    "MCTSPlayer",
    "SearchResult",
    "gate_accepts",
    "uniform_evaluator",
]
