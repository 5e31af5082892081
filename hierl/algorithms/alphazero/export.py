"""Export an AlphaZero player's network (policy and value heads) as TorchScript or ONNX.

What ``hierl export`` writes for an ALPHAZERO checkpoint.  The file holds the **network
only: the MCTS is not part of it**.  Playing like ``hierl play`` needs the search around
it (``hierl.algorithms.alphazero.mcts.MCTS`` with ``evaluate`` calling this model);
the argmax of its policy logits over the legal moves is the raw network's move, weaker
than the searched one.  ``policy.json`` says so under ``"search"``.

Inputs and outputs (``B``: the batch dimension, dynamic):

* ``board_planes`` ``(B, 2, rows, cols)`` float32: plane 0 = the stones of the player to
  move, plane 1 = the opponent's (the env's observation;
  ``BoardGame.to_planes`` of a canonical board);
* ``policy_logits`` ``(B, num_actions)`` float32 (illegal moves are not masked: mask
  them, then softmax);
* ``value`` ``(B,)`` float32 in [-1, 1], for the player to move.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hierl.algorithms.alphazero.player import AlphaZeroPlayer
from hierl.export import (
    ONNX_OPSET,
    SPEC_FILE,
    ExportedPolicy,
    weights_digest,
    write_model,
    write_spec,
)

SEARCH_NOTE = (
    "not included: this file is the network alone (policy and value heads); hierl plays "
    "with an MCTS around it (hierl play / hierl serve run the search)"
)
"""``policy.json``'s ``search`` entry."""


class BoardNetwork(nn.Module):
    """The player's network as an exportable module: planes in, logits and value out."""

    def __init__(self, player: AlphaZeroPlayer):
        super().__init__()
        self.net = player.model
        self.game = player.game

    def forward(self, board_planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(policy_logits, value)``."""
        return self.net(board_planes)

    def example_inputs(self, rows: int, seed: int) -> tuple[torch.Tensor]:
        """Random legal-looking boards as planes (stones on disjoint random cells)."""
        rng = np.random.default_rng(seed)
        cells = rng.integers(-1, 2, size=(rows, self.game.rows, self.game.cols))
        return (torch.from_numpy(self.game.to_planes(cells)),)

    def input_specs(self) -> list[dict[str, Any]]:
        """The model's input: ``board_planes``."""
        shape = [None, 2, self.game.rows, self.game.cols]
        return [{"name": "board_planes", "shape": shape, "dtype": "float32"}]

    def output_specs(self) -> list[dict[str, Any]]:
        """The model's outputs: ``policy_logits`` and ``value``."""
        return [
            {"name": "policy_logits", "shape": [None, self.game.num_actions], "dtype": "float32"},
            {"name": "value", "shape": [None], "dtype": "float32"},
        ]


def export_network(
    player: AlphaZeroPlayer,
    directory: str | os.PathLike,
    format: str = "torchscript",
    metadata: dict[str, Any] | None = None,
) -> ExportedPolicy:
    """Write ``player``'s network to ``directory`` (``policy.pt`` or ``policy.onnx``, and
    ``policy.json``); see the module docstring.

    Raises:
        ExportError: an unknown format, onnx missing, a model that does not reproduce.
    """
    module = BoardNetwork(player).eval()
    model_path = write_model(module, directory, format)
    spec = {
        "format": format,
        "file": model_path.name,
        "inputs": module.input_specs(),
        "outputs": module.output_specs(),
        "recurrent": False,
        "search": SEARCH_NOTE,
        "board": {
            "rows": player.game.rows,
            "cols": player.game.cols,
            "num_actions": player.game.num_actions,
            "planes": "0: stones of the player to move, 1: the opponent's",
        },
        "search_settings": {
            "num_simulations": player.config.num_simulations,
            "c_puct": player.config.c_puct,
        },
        "weights_sha256": weights_digest(module),
        "torch_version": torch.__version__,
        **({"onnx_opset": ONNX_OPSET} if format == "onnx" else {}),
        **dict(metadata or {}),
    }
    spec_path = Path(directory) / SPEC_FILE
    write_spec(spec_path, spec)
    return ExportedPolicy(model_path, spec_path, spec)
