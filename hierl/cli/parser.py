"""The ``hierl`` argument parser, assembled from one function per subcommand (each beside
its handler: ``train.add_train_command``, ``commands.add_rollout_command``, ...)."""

from __future__ import annotations

import argparse

from hierl.cli.commands import (
    add_bench_command,
    add_config_command,
    add_export_command,
    add_list_command,
    add_rollout_command,
    add_serve_command,
    add_tune_command,
)
from hierl.cli.common import PROG, Parser, version
from hierl.cli.play import add_play_command
from hierl.cli.train import add_train_command

SUBCOMMANDS = (
    add_train_command,
    add_rollout_command,
    add_play_command,
    add_export_command,
    add_list_command,
    add_config_command,
    add_serve_command,
    add_tune_command,
    add_bench_command,
)
"""The functions that add each subcommand (its options, help and handler), in the order
``hierl --help`` lists them; each sits beside its command's handler."""


def build_parser() -> argparse.ArgumentParser:
    """The ``hierl`` argument parser with its subcommands."""
    parser = Parser(
        prog=PROG,
        description="hierl: distributed reinforcement learning on Ray and PyTorch.",
        epilog="Run 'hierl COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in SUBCOMMANDS:
        add_command(sub)
    return parser
