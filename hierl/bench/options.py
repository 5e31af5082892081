"""The options of ``hierl bench optimizers``, declared once for the ``hierl`` parser (which
shows them in ``hierl bench --help``) and ``hierl.bench.optimizers.main``.

Importing this module imports nothing heavy: the CLI builds its parser on every call.
"""

from __future__ import annotations

import argparse

DEFAULT_OUTPUT_DIR = "hierl_results/bench"
"""Where the benchmark's JSON record and PNG figures go by default."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options (with their defaults in the help) to ``parser``."""
    parser.add_argument(
        "--algo", default="PG", help="algorithm whose policy graph runs (default: %(default)s)"
    )
    parser.add_argument(
        "--env", default="CartPole-v1", help="environment id (default: %(default)s)"
    )
    parser.add_argument(
        "--evaluators", type=int, default=2, help="remote evaluators (default: %(default)s)"
    )
    parser.add_argument(
        "--iterations", type=int, default=5, help="timed train() calls (default: %(default)s)"
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        metavar="NAME",
        help="strategies to measure (default: every registered one that learns from "
        "samples: local, multi_gpu, allreduce, async, ...)",
    )
    parser.add_argument("--skip-sgd", action="store_true", help="skip the Table-3 SGD figures")
    parser.add_argument("--skip-async", action="store_true", help="skip the async overhead")
    parser.add_argument("--quick", action="store_true", help="small SGD batch, 1 repeat")
    parser.add_argument(
        "--output-dir",
        default=DEFAULT_OUTPUT_DIR,
        help="where the JSON record and PNGs go (default: %(default)s)",
    )


def option_values(args: argparse.Namespace) -> dict:
    """The benchmark's options among ``args`` (which may hold the CLI's own too)."""
    probe = argparse.ArgumentParser(add_help=False)
    add_arguments(probe)
    return {a.dest: getattr(args, a.dest) for a in probe._actions if hasattr(args, a.dest)}
