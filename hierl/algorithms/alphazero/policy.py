"""AlphaZero policy graph: a policy/value network with MCTS as the act subroutine.

AlphaGo Zero (Silver et al., Nature 2017), Methods "Optimization" and "Search
algorithm"; RLlib (arXiv:1712.09381v1, appendix E.3: "MCTS is added as a sub-routine
of each self-play Evaluator").

* ``compute_actions`` runs a batched PUCT search (``.mcts``) from every observation
  of the batch (one board per env of the evaluator: the leaves of all games go through
  the network together) and returns the move plus the search policy π (the root visit
  distribution) in the ``mcts_policy`` column and the root's search value q in
  ``mcts_value``.  Exploring (self-play) adds Dirichlet
  noise at the root and samples moves with τ = 1 for the first ``temperature_moves``
  moves of a game, greedily afterwards; ``explore=False`` is greedy and noise-free.
* ``postprocess_trajectory`` turns one finished game into value targets: the final
  result ``z`` from the view of the player who moved at each step (``value_target``
  "outcome"), the search value ``q`` ("search"), or their mean ("average").
* ``learn_on_batch`` minimises ``(t - v)^2 - π·log p + c·||θ||^2`` on (obs, π, t) rows,
  t the value target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hierl.algorithms.alphazero.games import BoardGame, game_of_env
from hierl.algorithms.alphazero.mcts import (
    MCTS,
    Node,
    root_value,
    select_actions,
    visit_policy,
)
from hierl.evaluators.env import EnvContext, resolve_env_creator
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, PolicyGraph, Weights
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import (
    load_module_weights,
    load_optimizer_state,
    make_adam,
    module_weights,
    optimizer_state,
    step_if_finite,
)

MCTS_POLICY = "mcts_policy"
"""Sample-batch column of the search policy π (root visit distribution)."""
MCTS_VALUE = "mcts_value"
"""Sample-batch column of the root's search value q for the player to move."""


def game_for_config(config: Any) -> BoardGame:
    """The ``BoardGame`` of ``config.env`` (created once with ``config.env_config``)."""
    env = resolve_env_creator(config.env)(EnvContext(dict(config.env_config or {})))
    try:
        return game_of_env(env)
    finally:
        env.close()


class AlphaZeroNet(nn.Module):
    """Shared torso with a policy head (logits) and a value head (tanh).

    ``network="mlp"``: fully connected ``hidden_sizes`` on the flattened planes;
    ``"conv"``: two 3x3 convolutions of ``conv_channels`` then one hidden layer;
    ``"resnet"``: AlphaGo Zero's network (Silver et al. 2017, Methods): a 3x3 convolution
    and ``res_blocks`` residual blocks of ``conv_channels``, each convolution batch-
    normalised, then a policy head (1x1 convolution to 2 planes, a linear layer to the
    moves) and a value head (1x1 convolution to 1 plane, a hidden layer of
    ``hidden_sizes[0]``, a linear layer to the value).
    Input: planes ``(B, 2, rows, cols)`` or flattened ``(B, 2*rows*cols)``.
    """

    def __init__(
        self,
        game: BoardGame,
        network: str = "mlp",
        hidden_sizes: tuple[int, ...] = (128, 128),
        conv_channels: int = 32,
        res_blocks: int = 5,
    ):
        super().__init__()
        self.shape = (2, game.rows, game.cols)
        cells = game.rows * game.cols
        self.conv: nn.Module | None = None
        if network == "resnet":
            self.conv = ResidualTower(conv_channels, res_blocks)
            self.policy_head = ConvHead(conv_channels, 2, cells, (), game.num_actions)
            self.value_head = ConvHead(conv_channels, 1, cells, tuple(hidden_sizes[:1]), 1)
            self.torso = nn.Identity()
            return
        if network == "conv":
            self.conv = nn.Sequential(
                nn.Conv2d(2, conv_channels, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(conv_channels, conv_channels, 3, padding=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            width = conv_channels * cells
            sizes = tuple(hidden_sizes[:1]) or (128,)
        elif network == "mlp":
            width, sizes = 2 * cells, tuple(hidden_sizes)
        else:
            raise ValueError(f"network={network!r} is invalid; valid: 'mlp', 'conv'")
        layers: list[nn.Module] = []
        for size in sizes:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.torso = nn.Sequential(*layers)
        self.policy_head = nn.Linear(width, game.num_actions)
        self.value_head = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(policy logits (B, A), value (B,) in [-1, 1])``."""
        x = obs.reshape(-1, *self.shape) if self.conv is not None else obs.reshape(len(obs), -1)
        if self.conv is not None:
            x = self.conv(x)
        h = self.torso(x)
        return self.policy_head(h), torch.tanh(self.value_head(h)).squeeze(-1)


class ResidualTower(nn.Module):
    """AlphaGo Zero's torso: a 3x3 convolution (2 planes to ``channels``), then ``blocks``
    residual blocks ``relu(x + bn(conv(relu(bn(conv(x))))))``; every convolution is
    followed by batch normalisation (``train()`` in learning, ``eval()`` in search; the
    running statistics travel with the weights)."""

    def __init__(self, channels: int, blocks: int):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(2, channels, 3), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(
                _conv_bn(channels, channels, 3), nn.ReLU(), _conv_bn(channels, channels, 3)
            )
            for _ in range(blocks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = torch.relu(x + block(x))
        return x


class ConvHead(nn.Module):
    """A head on the tower: a 1x1 convolution to ``planes`` (batch-normalised, ReLU),
    flattened, then linear layers through ``hidden`` (ReLU) to ``outputs``."""

    def __init__(
        self, channels: int, planes: int, cells: int, hidden: tuple[int, ...], outputs: int
    ):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(channels, planes, 1), nn.ReLU(), nn.Flatten()]
        width = planes * cells
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        layers.append(nn.Linear(width, outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _conv_bn(inputs: int, outputs: int, kernel: int) -> nn.Sequential:
    """A convolution (same padding, no bias: the batch norm has one) and its batch norm."""
    return nn.Sequential(
        nn.Conv2d(inputs, outputs, kernel, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(outputs),
    )


def build_network(game: BoardGame, config: Any) -> AlphaZeroNet:
    """The network ``config`` describes (``network``, ``hidden_sizes``, ``conv_channels``;
    ``network="auto"``: conv for boards of >= 16 cells), in eval mode."""
    network = config.network
    if network == "auto":
        network = "conv" if game.rows * game.cols >= 16 else "mlp"
    return AlphaZeroNet(
        game, network, config.hidden_sizes, config.conv_channels, config.res_blocks
    ).eval()


@torch.inference_mode()
def evaluate_boards(
    model: AlphaZeroNet, game: BoardGame, boards: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Priors (softmax over all moves) and values of canonical ``boards``."""
    logits, values = model(torch.from_numpy(game.to_planes(boards)))
    # (the search masks illegal moves and renormalizes: a softmax over legal moves)
    return torch.softmax(logits, dim=-1).numpy(), values.numpy()


class AlphaZeroPolicy(PolicyGraph):
    """Policy graph whose ``act`` is an MCTS guided by a policy/value network.

    ``config`` is an ``AlphaZeroConfig``
    (fields read: ``env``, ``env_config``, ``network``, ``hidden_sizes``,
    ``conv_channels``, ``lr``, ``l2_coeff``, ``value_target``, ``augment_symmetries``,
    ``num_simulations``, ``c_puct``, ``dirichlet_alpha``, ``dirichlet_fraction``,
    ``temperature_moves``, ``reuse_tree``).
    The game is found from the env (a ``BoardGameEnv``).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        self.game = game_for_config(config)
        self.model = build_network(self.game, config)
        self.optimizer = make_adam(list(self.model.parameters()), config.lr)
        # seeded from the global numpy RNG, which the evaluator seeds per worker
        self.rng = np.random.default_rng(int(np.random.randint(2**31)))
        self.mcts = self.make_mcts(config.num_simulations)
        self.num_updates = 0
        self.subtrees: dict[bytes, Node] = {}
        """``reuse_tree``: the subtree below each move self-play just played, by board."""

    def make_mcts(self, num_simulations: int) -> MCTS:
        """A search with this policy's network and exploration settings."""
        c = self.config
        return MCTS(
            self.game,
            self.evaluate,
            num_simulations=num_simulations,
            c_puct=c.c_puct,
            dirichlet_alpha=c.dirichlet_alpha,
            dirichlet_fraction=c.dirichlet_fraction,
            rng=self.rng,
        )

    # -- network -----------------------------------------------------------------------
    def evaluate(self, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Priors (softmax over all moves) and values of canonical ``boards``."""
        return evaluate_boards(self.model, self.game, boards)

    # -- act ---------------------------------------------------------------------------
    def compute_actions(
        self,
        obs_batch: np.ndarray,
        state_batches: list[np.ndarray] | None = None,
        explore: bool = True,
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Search from each observation; returns moves and ``{"mcts_policy": π,
        "mcts_value": q}``."""
        boards = self.game.from_planes(np.asarray(obs_batch))
        reuse = explore and self.config.reuse_tree
        # pop: a subtree serves one board (two games can reach the same position)
        kept = [self.subtrees.pop(b.tobytes(), None) for b in boards] if reuse else None
        roots = self.mcts.search_roots(list(boards), add_noise=explore, subtrees=kept)
        visits = self.mcts.root_visits(roots)
        if explore:
            temps = np.array(
                [
                    1.0 if self.game.move_number(b) < self.config.temperature_moves else 0.0
                    for b in boards
                ]
            )
        else:
            temps = np.zeros(len(boards))
        actions = select_actions(visits, temps, self.rng)
        if reuse:
            self.subtrees = {}
            for root, action in zip(roots, actions, strict=True):
                child = root.children.get(int(action))
                if child is not None and child.expanded and child.terminal is None:
                    self.subtrees[child.board.tobytes()] = child
        values = np.array([root_value(r) for r in roots], dtype=np.float32)
        return (
            actions,
            [],
            {MCTS_POLICY: visit_policy(visits).astype(np.float32), MCTS_VALUE: values},
        )

    # -- postprocess -------------------------------------------------------------------
    def postprocess_trajectory(
        self,
        batch: SampleBatch,
        other_agent_batches: Mapping[str, SampleBatch] | None = None,
    ) -> SampleBatch:
        """Add ``value_targets``: the game result z for the player who moved at each row,
        the search value q (``mcts_value``) or ``(z + q) / 2``, as ``value_target`` says.

        Raises:
            ValueError: if the game did not end (self-play needs whole games).
        """
        if not bool(batch[SampleBatch.TERMINATEDS][-1]):
            raise ValueError(
                "AlphaZero needs whole games (batch_mode='complete_episodes'); got a "
                f"segment of {batch.count} moves that did not end"
            )
        final = float(batch[SampleBatch.REWARDS][-1])  # +1 win / 0 draw for the last mover
        plies_to_end = np.arange(batch.count - 1, -1, -1)
        # CRUCIAL: players alternate, so the result flips sign every ply going backwards.
        z = final * np.where(plies_to_end % 2 == 0, 1.0, -1.0)
        target = self.config.value_target
        if target != "outcome":
            q = np.asarray(batch[MCTS_VALUE], dtype=np.float64)
            z = q if target == "search" else 0.5 * (z + q)
        batch[SampleBatch.VALUE_TARGETS] = z.astype(np.float32)
        return batch

    # -- loss --------------------------------------------------------------------------
    def _augment(
        self, obs: np.ndarray, pi: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Apply a random board symmetry to each row (the game's dihedral/mirror group)."""
        n = len(obs)
        cells = self.game.rows * self.game.cols
        planes = np.asarray(obs, dtype=np.float32).reshape(n, 2, cells)
        pi = np.asarray(pi, dtype=np.float32)
        which = rng.integers(0, len(self.game.symmetries), size=n)
        out_planes, out_pi = planes.copy(), pi.copy()
        for k, (cell_perm, action_perm) in enumerate(self.game.symmetries):
            rows = which == k
            if k == 0 or not rows.any():
                continue
            out_planes[rows] = planes[rows][:, :, cell_perm]
            out_pi[rows] = pi[rows][:, action_perm]
        return out_planes.reshape(n, -1), out_pi

    def loss(self, batch: SampleBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """``(t - v)^2 - π·log p + l2_coeff * ||θ||^2``, means over rows (t: the value
        target)."""
        obs, pi = batch[SampleBatch.OBS], batch[MCTS_POLICY]
        if self.config.augment_symmetries:
            obs, pi = self._augment(obs, pi, self.rng)
        # (torch.tensor copies: replayed rows may be read-only object-store memory)
        obs_t = torch.tensor(np.asarray(obs, dtype=np.float32))
        pi_t = torch.tensor(np.asarray(pi, dtype=np.float32))
        z_t = torch.tensor(np.asarray(batch[SampleBatch.VALUE_TARGETS], dtype=np.float32))
        logits, v = self.model(obs_t)
        value_loss = ((z_t - v) ** 2).mean()
        policy_loss = -(pi_t * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        l2 = sum((p**2).sum() for p in self.model.parameters())
        total = value_loss + policy_loss + self.config.l2_coeff * l2
        entropy = -(pi_t * torch.log(pi_t.clamp_min(1e-12))).sum(-1).mean()
        stats = {
            "value_loss": value_loss.item(),
            "policy_loss": policy_loss.item(),
            "l2": float(l2.item()),
            "policy_target_entropy": entropy.item(),
        }
        return total, stats

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One Adam step on the AlphaZero loss (refused, and counted, if the loss or a
        gradient is not finite)."""
        self.model.train()
        total, stats = self.loss(batch)
        self.optimizer.zero_grad()
        total.backward()
        params = list(self.model.parameters())
        out = step_if_finite(
            self.optimizer, params, {"total_loss": total.detach(), **stats}, "AlphaZero", batch
        )
        self.model.eval()
        if not out[NONFINITE_GRADS_SKIPPED]:
            self.num_updates += 1
        return out

    # -- weights and state -------------------------------------------------------------
    def get_weights(self) -> Weights:
        """Network weights by parameter name."""
        return module_weights(self.model)

    def set_weights(self, weights: Weights) -> None:
        """Load network weights (Adam moments are kept; kept subtrees are dropped)."""
        load_module_weights(self.model, weights, type(self).__name__)
        self.subtrees = {}

    def get_state(self) -> dict[str, Any]:
        """Weights, Adam state and counters."""
        return {
            **super().get_state(),
            "optimizer": optimizer_state(self.optimizer),
            "num_updates": self.num_updates,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        super().set_state(state)
        if "optimizer" in state:
            load_optimizer_state(self.optimizer, state["optimizer"], torch.device("cpu"))
        self.num_updates = int(state.get("num_updates", 0))
