"""The AlphaZero loop's components; each runs in-process or as a Ray actor.

RLlib (arXiv:1712.09381v1, appendix E.3): self-play evaluators, optimizers pulling
from a shared replay buffer, and candidate-vs-best comparisons.

* ``SelfPlayEvaluator``: a ``PolicyEvaluator`` (its
  vectorised rollout loop, seeding and metrics) whose ``self_play`` returns whole games
  as (obs, π, z) rows plus small stats, so the driver can route the rows to the replay
  actor by object reference without fetching them.
* The shared replay buffer is ``ReplayBuffer``
  itself, run as an actor.
* ``AlphaZeroLearner``: trains a candidate network on replayed rows.
* ``Arena``: plays candidate vs best (the gate's evidence) and the best vs a fixed
  opponent (the strength estimate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hierl.algorithms.alphazero.games import (
    MinimaxPlayer,
    Player,
    RandomPlayer,
    TicTacToe,
    play_games,
)
from hierl.algorithms.alphazero.match import ArenaResult
from hierl.algorithms.alphazero.mcts import MCTSPlayer
from hierl.algorithms.alphazero.opponents import RolloutMCTSPlayer
from hierl.algorithms.alphazero.policy import MCTS_POLICY, AlphaZeroPolicy
from hierl.evaluators.policy_evaluator import PolicyEvaluator
from hierl.policy_graph import UpdateStats, Weights
from hierl.sample_batch import SampleBatch
from hierl.utils import seed_everything

TRAIN_COLUMNS = (SampleBatch.OBS, MCTS_POLICY, SampleBatch.VALUE_TARGETS)
"""Columns self-play sends to the replay buffer."""


class SelfPlayEvaluator(PolicyEvaluator):
    """PolicyEvaluator playing the current best model against itself (whole games)."""

    def self_play(self) -> tuple[SampleBatch, dict[str, float]]:
        """One ``sample()`` of whole games: the (obs, π, z) rows and their stats.

        Stats: ``moves``, ``games``, ``first_player_wins``, ``second_player_wins``,
        ``draws``.
        """
        batch = self.sample()
        assert isinstance(batch, SampleBatch)
        ends = np.flatnonzero(batch[SampleBatch.TERMINATEDS])
        final = batch[SampleBatch.REWARDS][ends]
        # who made each game's last move: the first player iff an even number of stones
        # lay on the board before it (the planes of the row's observation hold them all)
        stones = np.asarray(batch[SampleBatch.OBS])[ends].reshape(len(ends), -1).sum(axis=1)
        last_by_first = np.rint(stones).astype(np.int64) % 2 == 0
        decisive = final > 0
        stats = {
            "moves": float(batch.count),
            "games": float(len(ends)),
            "first_player_wins": float(np.sum(decisive & last_by_first)),
            "second_player_wins": float(np.sum(decisive & ~last_by_first)),
            "draws": float(np.sum(~decisive)),
        }
        rows = SampleBatch({k: batch[k] for k in TRAIN_COLUMNS})
        return rows, stats


class _NetworkActor:
    """What the learner and the arena actors share: they seed their process and build
    ``AlphaZeroPolicy`` networks for the env's spaces and the AlphaZeroConfig.

    Args:
        observation_space, action_space: the env's spaces.
        config: the AlphaZeroConfig.
        seed: seeds the networks' construction (and the learner's augmentation and
            minibatch order).
        num_threads: torch threads of this process (actors: 1).
    """

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        config: Any,
        seed: int | None,
        num_threads: int | None = None,
    ):
        _seed(seed, num_threads)
        self.config = config
        self._spaces = (observation_space, action_space)

    def _network(self) -> AlphaZeroPolicy:
        return AlphaZeroPolicy(*self._spaces, self.config)


class AlphaZeroLearner(_NetworkActor):
    """Trains a candidate network on batches pulled from the shared replay buffer.

    Args: as ``_NetworkActor``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.policy = self._network()

    def set_weights(self, weights: Weights) -> None:
        """Restart the candidate from ``weights`` (the new best)."""
        self.policy.set_weights(weights)

    def get_weights(self) -> Weights:
        """The candidate's weights."""
        return self.policy.get_weights()

    def get_state(self) -> dict[str, Any]:
        """The candidate's weights, its Adam moments and its update count."""
        return self.policy.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        self.policy.set_state(state)

    def train(
        self, batch: SampleBatch, lr: float | None = None
    ) -> tuple[Weights, dict[str, float]]:
        """SGD over ``batch`` in minibatches of ``train_batch_size`` (at learning rate
        ``lr`` if given, from then on); return the candidate's weights and mean learner
        stats."""
        if lr is not None:
            for group in self.policy.optimizer.param_groups:
                group["lr"] = float(lr)
        size = self.config.train_batch_size
        stats = UpdateStats()
        for start in range(0, batch.count - size + 1, size):
            stats.add(self.policy.learn_on_batch(batch.slice(start, start + size)))
        mean = stats.result() if stats.applied or stats.skipped else {}
        mean["num_updates"] = float(self.policy.num_updates)
        mean["lr"] = float(self.policy.optimizer.param_groups[0]["lr"])
        return self.policy.get_weights(), mean


class Arena(_NetworkActor):
    """Plays matches between networks (and fixed opponents) with greedy MCTS.

    Args: as ``_NetworkActor`` (weights are always set before play).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.first = self._network()
        self.second = self._network()
        self.game = self.first.game

    def _player(
        self, policy: AlphaZeroPolicy, simulations: int, temperature_moves: int, seed: int
    ) -> MCTSPlayer:
        mcts = policy.make_mcts(simulations)
        return MCTSPlayer(mcts, temperature_moves, np.random.default_rng(seed))

    def compare(self, candidate: Weights, best: Weights, num_games: int, seed: int) -> ArenaResult:
        """Candidate vs best over ``num_games`` (half with each side moving first)."""
        self.first.set_weights(candidate)
        self.second.set_weights(best)
        c = self.config
        sims = c.arena_simulations or c.num_simulations
        cand = self._player(self.first, sims, c.arena_temperature_moves, seed)
        best_player = self._player(self.second, sims, c.arena_temperature_moves, seed + 1)
        pair = (best_player, best_player)
        return _both_sides(self.game, cand, pair, num_games, seeds=(seed, seed + 2))

    def opponent(self, name: str, seed: int) -> Player:
        """A fixed opponent: ``minimax`` (Tic-Tac-Toe only), ``random`` or ``mcts`` (pure
        MCTS with ``baseline_simulations`` random rollouts a move: ``hierl play``'s)."""
        if name == "minimax":
            if not isinstance(self.game, TicTacToe):
                raise ValueError(
                    f"strength_opponent 'minimax' is exact only for TicTacToe, not "
                    f"{type(self.game).__name__}; use 'mcts' or 'random'"
                )
            return MinimaxPlayer(self.game, seed)
        if name == "random":
            return RandomPlayer(self.game, seed)
        if name == "mcts":
            return RolloutMCTSPlayer(self.game, self.config.baseline_simulations, seed=seed)
        raise ValueError(f"unknown strength opponent {name!r}; valid: minimax, random, mcts")

    def strength(self, weights: Weights, opponent: str, num_games: int, seed: int) -> ArenaResult:
        """``weights`` (greedy MCTS, no noise) vs a fixed opponent, half as each side."""
        self.first.set_weights(weights)
        sims = self.config.strength_simulations or self.config.num_simulations
        model = self._player(self.first, sims, 0, seed)
        pair = (self.opponent(opponent, seed + 1), self.opponent(opponent, seed + 2))
        return _both_sides(self.game, model, pair, num_games)


def _seed(seed: int | None, num_threads: int | None) -> None:
    """Torch threads for this process, then the global RNGs (``seed_everything``)."""
    if num_threads:
        import torch

        torch.set_num_threads(num_threads)
    seed_everything(seed)


def _both_sides(
    game: Any,
    player: Player,
    opponents: tuple[Player, Player],
    num_games: int,
    seeds: tuple[int | None, int | None] = (None, None),
) -> ArenaResult:
    """``player`` moves first in ``num_games - num_games // 2`` games against
    ``opponents[0]`` and second in the rest against ``opponents[1]``."""
    half = num_games // 2
    as_first = play_games(game, player, opponents[0], num_games - half, seed=seeds[0])
    as_second = 1.0 - play_games(game, opponents[1], player, half, seed=seeds[1])
    return ArenaResult.from_scores(np.concatenate([as_first, as_second]))
