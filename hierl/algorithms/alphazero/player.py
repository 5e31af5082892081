"""Acting from an AlphaZero checkpoint: the best model wrapped in its MCTS, nothing else.

Training runs self-play, replay, learner and arena actors; acting needs only the arena's
champion (the checkpoint's ``best_weights``) and the search.
``AlphaZeroPlayer.from_checkpoint`` reads just those weights (the replay buffer stays
on disk), builds the network in this process (no Ray, no actor) and searches with
**acting settings** given as arguments:

* ``simulations``: MCTS simulations per move (default: the run's ``num_simulations``);
* ``temperature``: 0 plays the most visited move (greedy, the default); τ > 0 samples a
  move with probability ∝ ``N^(1/τ)``;
* ``noise``: weight of Dirichlet noise mixed into the root priors (0: none, the default;
  self-play used ``dirichlet_fraction``), concentration ``dirichlet_alpha`` of the run.

Greedy search is deterministic up to tie-breaks: evaluation matches diversify games with
random opening plies instead (``opening_moves`` of
``hierl.algorithms.alphazero.match.play_match``).

Calling loop:

    player = AlphaZeroTrainer.load_player("run/checkpoints/000042", simulations=200)
    board = player.game.initial_board()          # canonical: +1 = the player to move
    while player.game.outcome(board) is None:
        move = player.compute_single_action(board)
        board = player.game.next_board(board, move)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hierl.algorithms.alphazero.config import AlphaZeroConfig
from hierl.algorithms.alphazero.games import BoardGame
from hierl.algorithms.alphazero.mcts import MCTS, select_actions, visit_policy
from hierl.algorithms.alphazero.policy import (
    AlphaZeroNet,
    build_network,
    evaluate_boards,
    game_for_config,
)
from hierl.checkpoint import CheckpointError, load_checkpoint
from hierl.policy_graph import Weights
from hierl.torch_policy_graph import load_module_weights, module_weights

ACTING_KEYS = ("best_weights", "best_version", "iteration")
"""The entries of an AlphaZero checkpoint's state that acting reads."""


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """One searched position, from the view of the player to move."""

    move: int
    """The move played."""
    visits: np.ndarray
    """The root visit distribution π (``num_actions``, sums to 1)."""
    value: float
    """The search's value of the position in [-1, 1] (mean backed-up value at the root)."""
    simulations: int
    """Simulations run."""


def check_acting_settings(simulations: int, temperature: float, noise: float) -> None:
    """ValueError naming the first acting setting out of range and what is valid."""
    if isinstance(simulations, bool) or not isinstance(simulations, int) or simulations < 1:
        raise ValueError(f"simulations={simulations!r} is invalid; valid: an integer >= 1")
    if (
        not (isinstance(temperature, (int, float)) and math.isfinite(temperature))
        or temperature < 0
    ):
        raise ValueError(
            f"temperature={temperature!r} is invalid; valid: 0 (greedy) or a finite number > 0"
        )
    if not (isinstance(noise, (int, float)) and 0 <= noise <= 1):
        raise ValueError(f"noise={noise!r} is invalid; valid: a weight in [0, 1] (0: no noise)")


class AlphaZeroPlayer:
    """An AlphaZero network wrapped in its MCTS, acting with the given settings.

    Implements the ``Player`` protocol
    (``select_moves``), so it plays matches against the built-in opponents.

    Args:
        game: the rules.
        model: the network (no optimizer: acting never trains).
        config: the run's config (search constants: ``c_puct``, ``dirichlet_alpha``).
        simulations, temperature, noise: the acting settings (module docstring).
        seed: seeds root noise, sampling and tie-breaks.
        iteration, version: what the checkpoint says (reported by ``hierl play`` and serve).
    """

    def __init__(
        self,
        game: BoardGame,
        model: AlphaZeroNet,
        config: AlphaZeroConfig,
        simulations: int | None = None,
        temperature: float = 0.0,
        noise: float = 0.0,
        seed: int | None = None,
        iteration: int = 0,
        version: int = 0,
    ):
        simulations = config.num_simulations if simulations is None else simulations
        check_acting_settings(simulations, temperature, noise)
        self.game = game
        self.model = model
        self.config = config
        self.simulations = int(simulations)
        self.temperature = float(temperature)
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self.iteration = int(iteration)
        self.version = int(version)
        """The best model's version (how many candidates became the best before it)."""

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: str | Path,
        *,
        simulations: int | None = None,
        temperature: float = 0.0,
        noise: float = 0.0,
        seed: int | None = None,
        allow_imports: Collection[str] = (),
    ) -> AlphaZeroPlayer:
        """The best model of an ALPHAZERO checkpoint, ready to act; see the module docstring.

        Raises:
            CheckpointError: missing or corrupt, not an AlphaZero checkpoint, or its config
                names a module outside ``allow_imports``.
            ValueError: an acting setting out of range.
        """
        from hierl.algorithms.checkpoint_imports import check_checkpoint_imports

        meta, state = load_checkpoint(checkpoint, keys=ACTING_KEYS)
        algorithm = str(meta.get("algorithm"))
        if not is_alphazero_algorithm(algorithm):
            raise CheckpointError(
                f"'{checkpoint}' is a checkpoint of {algorithm}, not of ALPHAZERO (or a "
                "subclass): it holds no board-game player"
            )
        stored = meta.get("config")
        if not isinstance(stored, dict) or "best_weights" not in state:
            raise CheckpointError(f"checkpoint '{checkpoint}' has no AlphaZero config or weights")
        check_checkpoint_imports(stored, allow_imports, checkpoint)
        stored = {k: v for k, v in stored.items() if k != "env_callable"}
        # CRUCIAL: an acting process: no self-play actors, so nothing starts Ray
        config = AlphaZeroConfig.from_dict({**stored, "num_self_play_workers": 0})
        # CRUCIAL: the network alone: a policy graph's Adam would import torch._dynamo
        # (seconds) for an optimizer acting never uses
        game = game_for_config(config)
        model = build_network(game, config)
        try:
            load_module_weights(model, state["best_weights"], cls.__name__)
        except (KeyError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint '{checkpoint}': best_weights do not fit: {e}") from e
        return cls(
            game,
            model,
            config,
            simulations,
            temperature,
            noise,
            seed,
            iteration=int(state.get("iteration", 0)),
            version=int(state.get("best_version", 0)),
        )

    def with_settings(self, **settings: Any) -> AlphaZeroPlayer:
        """The same network with other acting settings (``simulations``, ``temperature``,
        ``noise``, ``seed``)."""
        base = {"simulations": self.simulations, "temperature": self.temperature}
        base["noise"] = self.noise
        return AlphaZeroPlayer(
            self.game,
            self.model,
            self.config,
            **{**base, **settings},
            iteration=self.iteration,
            version=self.version,
        )

    def evaluate(self, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The network's priors (softmax over all moves) and values of canonical ``boards``."""
        return evaluate_boards(self.model, self.game, boards)

    def get_weights(self) -> Weights:
        """The network's weights by parameter name."""
        return module_weights(self.model)

    def _mcts(self, simulations: int) -> MCTS:
        c = self.config
        return MCTS(
            self.game,
            self.evaluate,
            simulations,
            c.c_puct,
            c.dirichlet_alpha,
            self.noise,
            self.rng,
        )

    def board_of(self, obs: Any) -> np.ndarray:
        """A canonical board from an env observation (planes) or a canonical board."""
        obs = np.asarray(obs)
        if obs.shape == self.game.shape:
            return obs.astype(np.int8)
        return self.game.from_planes(obs)

    def search(
        self, boards: Sequence[np.ndarray], simulations: int | None = None
    ) -> list[SearchResult]:
        """Search every (non-terminal, canonical) board, all trees batched together."""
        sims = self.simulations if simulations is None else simulations
        check_acting_settings(sims, self.temperature, self.noise)
        if not len(boards):
            return []
        roots = self._mcts(sims).search_roots(list(boards), add_noise=self.noise > 0)
        visits = np.stack([r.visits for r in roots])
        moves = select_actions(visits, self.temperature, self.rng)
        out = []
        for root, move, pi in zip(roots, moves, visit_policy(visits), strict=True):
            assert root.visits is not None and root.value_sum is not None
            value = float(root.value_sum.sum() / max(root.visits.sum(), 1.0))
            out.append(SearchResult(int(move), pi.astype(np.float32), value, sims))
        return out

    def select_moves(self, boards: Sequence[np.ndarray]) -> list[int]:
        """One move per board (the Player protocol)."""
        return [r.move for r in self.search(boards)]

    def compute_single_action(self, obs: Any) -> int:
        """The move for one observation (env planes) or canonical board."""
        return self.search([self.board_of(obs)])[0].move


def is_alphazero_algorithm(algorithm: str) -> bool:
    """Whether the registered algorithm ``algorithm`` is ALPHAZERO or a subclass of it."""
    from hierl.algorithms.registry import get_trainer_class

    try:
        cls = get_trainer_class(algorithm)
    except Exception:  # unknown: the caller's own error names it
        return False
    config_class = getattr(cls, "config_class", None)
    return isinstance(config_class, type) and issubclass(config_class, AlphaZeroConfig)


def is_alphazero_checkpoint(checkpoint: str | Path) -> bool:
    """Whether ``checkpoint`` (a directory) was written by ALPHAZERO (reads only its
    metadata; False for anything unreadable: the caller's own loading reports it)."""
    try:
        meta, _ = load_checkpoint(checkpoint, keys=())
    except CheckpointError:
        return False
    return is_alphazero_algorithm(str(meta.get("algorithm")))
