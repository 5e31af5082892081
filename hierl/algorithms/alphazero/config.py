"""ALPHAZERO's settings (see ``hierl.algorithms.alphazero.trainer`` for the loop)."""

from __future__ import annotations

import dataclasses

from hierl.algorithms.trainer_base import BaseConfig
from hierl.evaluators.evaluator_set import DEFAULT_MAX_EVALUATOR_RESTARTS

VALUE_TARGETS = ("outcome", "search", "average")
"""The value head's targets ``AlphaZeroConfig.value_target`` may name."""


@dataclasses.dataclass
class AlphaZeroConfig(BaseConfig):
    """Settings of the AlphaZero loop (env: ``hierl/TicTacToe-v0``, ``hierl/ConnectFour-v0``
    or any env built on ``hierl.algorithms.alphazero.games.BoardGameEnv``)."""

    # -- components --
    num_self_play_workers: int = 2
    """Self-play actors; 0 runs every component in-process (no Ray: the debug path)."""
    num_envs_per_self_play_worker: int = 8
    """Games each self-play actor plays side by side (their MCTS leaves share network calls)."""
    rollout_fragment_length: int = 9
    """Moves per game slot per self-play task (whole games are returned, at least this many)."""
    num_learners: int = 1
    """Optimizer actors training candidates from the shared replay buffer."""
    num_arena_workers: int = 1
    """Actors playing candidate-vs-best comparisons and strength estimates (may be 0
    with ``gate`` false and ``strength_games`` 0)."""
    num_cpus_per_self_play_worker: float = 0.5
    """CPUs reserved per self-play actor (the defaults fit all actors in 2 CPUs)."""
    num_cpus_per_learner: float = 0.5
    """CPUs reserved per learner actor."""
    num_cpus_per_arena_worker: float = 0.5
    """CPUs reserved per arena actor."""
    num_cpus_for_replay: float = 0.0
    """CPUs reserved for the replay buffer actor (it only copies rows)."""
    # -- replay and optimization --
    replay_capacity: int = 50_000
    """Positions kept in the shared replay buffer (newest first)."""
    learning_starts: int = 500
    """Positions in replay before the learners start."""
    train_batch_size: int = 128
    """Positions per SGD minibatch."""
    sgd_steps_per_round: int = 50
    """Minibatch steps per training round (one round = one candidate)."""
    lr: float = 1e-3
    """Adam learning rate."""
    lr_schedule: tuple[tuple[float, float], ...] | None = None
    """Piecewise-linear ``[[self-play moves, lr], ...]`` overriding ``lr`` when set: each
    training round runs at the rate for the self-play moves made when it starts."""
    l2_coeff: float = 1e-4
    """Weight of the L2 penalty c·||θ||² in the loss."""
    value_target: str = "outcome"
    """What the value head learns: ``outcome``, the game's result z (AlphaGo Zero);
    ``search``, the root's search value q (the visit-weighted mean of its edges' Q);
    ``average``, (z + q) / 2 (Oracle's "Lessons from AlphaZero", part 4: q is the
    lower-variance target for positions before a sampled or noisy move decided z)."""
    augment_symmetries: bool = True
    """Train on a random board symmetry of each position (8 for Tic-Tac-Toe, 2 for Connect Four)."""
    # -- network --
    network: str = "auto"
    """``mlp``, ``conv``, ``resnet`` (AlphaGo Zero's residual tower and convolutional
    heads) or ``auto`` (conv for boards of >= 16 cells)."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layers of the MLP (the conv net uses the first as its hidden layer, the
    resnet as its value head's)."""
    conv_channels: int = 32
    """Channels of the conv net's two 3x3 convolutions, or of the resnet's tower."""
    res_blocks: int = 5
    """Residual blocks of the ``resnet`` tower (two 3x3 convolutions each)."""
    # -- search --
    num_simulations: int = 50
    """MCTS simulations per self-play move."""
    c_puct: float = 1.5
    """PUCT exploration constant."""
    dirichlet_alpha: float = 1.0
    """Root Dirichlet noise concentration (AlphaGo Zero: 0.03 for Go's ~250 moves)."""
    dirichlet_fraction: float = 0.25
    """Weight of the root noise in self-play priors."""
    temperature_moves: int = 4
    """Self-play moves sampled with τ = 1 at the start of each game; greedy afterwards."""
    reuse_tree: bool = False
    """Self-play keeps the subtree below each move it plays and searches the next
    position from it (AlphaGo Zero, Methods: "the search tree is reused at subsequent
    time-steps"): its visits count in the next search policy, and ``num_simulations``
    more are run.  Dropped when new weights arrive; arenas and acting search afresh."""
    # -- gate --
    gate: bool = True
    """AlphaGo Zero's arena gate: a candidate becomes the best only by beating it.  False:
    AlphaZero's continual update (Silver et al., Science 2018): every training round's
    network becomes the best at once, and the arenas only estimate strength."""
    arena_games: int = 20
    """Games per candidate-vs-best comparison (half with each side first)."""
    arena_simulations: int | None = None
    """MCTS simulations per arena move (None: ``num_simulations``)."""
    arena_temperature_moves: int = 2
    """Arena moves sampled with τ = 1 (else greedy play repeats the same games)."""
    gate_threshold: float = 0.55
    """Minimum candidate score ``(wins + draws/2) / games`` to become the best."""
    # -- strength estimate --
    strength_games: int = 20
    """Games of the best model vs ``strength_opponent`` per iteration (0: skip)."""
    strength_opponent: str = "auto"
    """``minimax`` (perfect, Tic-Tac-Toe only), ``mcts`` (pure MCTS with
    ``baseline_simulations`` random rollouts a move, the opponent of ``hierl play
    --opponent mcts``), ``random``, or ``auto`` (minimax for Tic-Tac-Toe, else mcts)."""
    strength_simulations: int | None = None
    """MCTS simulations per move of the model under test (None: ``num_simulations``)."""
    baseline_simulations: int = 100
    """Simulations (each with one random rollout) per move of the ``mcts`` opponent."""
    # -- iteration --
    time_budget_s: float | None = 30.0
    """Seconds of the event loop per ``train()`` (None: only ``train_rounds_per_iter``)."""
    train_rounds_per_iter: int | None = None
    """Also end the iteration after this many training rounds (None: time only)."""
    # -- fault tolerance --
    max_actor_restarts: int = DEFAULT_MAX_EVALUATOR_RESTARTS
    """Actors (self-play, replay, learner, arena) recreated in all after failures (actor
    or node died, a self-play env raised); the next failure ends training with an error
    naming the actor, the count and the last error."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("num_envs_per_self_play_worker", "rollout_fragment_length"):
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("num_learners", "replay_capacity"):
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("train_batch_size", "sgd_steps_per_round", "num_simulations"):
            self.check(name, getattr(self, name) >= 1, "must be >= 1")
        self.check("num_self_play_workers", self.num_self_play_workers >= 0, "must be >= 0")
        for name in (
            "num_cpus_per_self_play_worker",
            "num_cpus_per_learner",
            "num_cpus_per_arena_worker",
            "num_cpus_for_replay",
        ):
            self.check(name, getattr(self, name) >= 0, "must be >= 0")
        self.check(
            "learning_starts",
            self.train_batch_size <= self.learning_starts <= self.replay_capacity,
            f"must be between train_batch_size ({self.train_batch_size}) and "
            f"replay_capacity ({self.replay_capacity})",
        )
        self.check("lr", self.lr > 0, "must be > 0")
        self.check_schedule("lr_schedule", "moves", "lr")
        self.check("l2_coeff", self.l2_coeff >= 0, "must be >= 0")
        self.check("value_target", self.value_target in VALUE_TARGETS, "outcome, search or average")
        self.check(
            "network",
            self.network in ("auto", "mlp", "conv", "resnet"),
            "auto, mlp, conv or resnet",
        )
        self.check("res_blocks", self.res_blocks >= 0, "must be >= 0")
        self.check("hidden_sizes", all(h >= 1 for h in self.hidden_sizes), "sizes >= 1")
        self.check("conv_channels", self.conv_channels >= 1, "must be >= 1")
        self.check("c_puct", self.c_puct > 0, "must be > 0")
        self.check("dirichlet_alpha", self.dirichlet_alpha > 0, "must be > 0")
        self.check("dirichlet_fraction", 0 <= self.dirichlet_fraction <= 1, "in [0, 1]")
        self.check("temperature_moves", self.temperature_moves >= 0, "must be >= 0")
        self._check_gate_and_arenas()
        self.check("max_actor_restarts", self.max_actor_restarts >= 0, "must be >= 0")
        self.check(
            "time_budget_s", self.time_budget_s is None or self.time_budget_s > 0, "None or > 0"
        )
        self.check(
            "train_rounds_per_iter",
            self.train_rounds_per_iter is None or self.train_rounds_per_iter >= 1,
            "None or >= 1",
        )
        if self.time_budget_s is None and self.train_rounds_per_iter is None:
            self.check("time_budget_s", False, "set it or train_rounds_per_iter (both None)")

    def _check_gate_and_arenas(self) -> None:
        """The settings of the gate, the arenas and the strength estimate."""
        self.check("arena_games", self.arena_games >= 2, "must be >= 2")
        for name in ("arena_simulations", "strength_simulations"):
            value = getattr(self, name)
            self.check(name, value is None or value >= 1, "None or >= 1")
        self.check("arena_temperature_moves", self.arena_temperature_moves >= 0, "must be >= 0")
        self.check("gate_threshold", 0 < self.gate_threshold <= 1, "in (0, 1]")
        self.check(
            "num_learners",
            self.gate or self.num_learners == 1,
            "must be 1 with gate: false (the continual update trains one network)",
        )
        self.check("strength_games", self.strength_games >= 0, "must be >= 0")
        arenas_idle = not self.gate and self.strength_games == 0
        self.check(
            "num_arena_workers",
            self.num_arena_workers >= (0 if arenas_idle else 1),
            "must be >= 1 (0 only with gate false and strength_games 0, when arenas have "
            f"nothing to play; here gate is {self.gate} and strength_games "
            f"{self.strength_games})",
        )
        self.check(
            "strength_opponent",
            self.strength_opponent in ("auto", "minimax", "mcts", "random"),
            "auto, minimax, mcts or random",
        )
        self.check("baseline_simulations", self.baseline_simulations >= 1, "must be >= 1")
