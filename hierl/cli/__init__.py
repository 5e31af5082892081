"""The ``hierl`` command line: train an algorithm, roll out or play a checkpoint, list algorithms.

``parser`` declares every command and option (one function per subcommand), ``train``
runs ``hierl train`` (configs, stop conditions, logs, ``--resume``; ``progress`` is its
display), ``commands`` the others (``config_yaml`` writes ``hierl config --yaml``); each
calls into the package.

Examples:

    hierl train --algo PPO --env CartPole-v1
    hierl train --algo PG --env CartPole-v1 --config cfg.yaml --stop training_iteration=50
    hierl train --algo PPO --env CartPole-v1 --set model.hiddens=[32,32] --set lr=1e-3
    hierl train --resume hierl_results/PPO_CartPole-v1_20250101-120000
    hierl rollout hierl_results/PPO_CartPole-v1_20250101-120000/checkpoints/000042
    hierl play hierl_results/ALPHAZERO_hierl-ConnectFour-v0_20250101-120000 --opponent mcts
    hierl export hierl_results/PPO_CartPole-v1_20250101-120000 --format onnx
    hierl serve hierl_results/PPO_CartPole-v1_20250101-120000 --port 8000
    hierl list
    hierl config PPO
    hierl config PPO --yaml > ppo.yaml

User errors (bad arguments, unknown algorithm/env/config key, unreadable files, bad
checkpoints or logged data, also when raised in a Ray worker) print one ``hierl: error:
...`` line to stderr and exit with status 2 (``common.USER_ERRORS``); other exceptions are
bugs and keep their traceback.
Heavy libraries (torch, ray, matplotlib) are imported only by the commands that need them.
"""

from __future__ import annotations

import os
import sys

from hierl.cli.common import PROG, CLIError, error_line, one_line, user_error
from hierl.cli.parser import build_parser
from hierl.cli.train import (
    default_output_dir,
    default_stop,
    load_config_arg,
    merge_configs,
    parse_stop,
    reached_stop,
)

__all__ = [
    "CLIError",
    "build_parser",
    "default_output_dir",
    "default_stop",
    "load_config_arg",
    "main",
    "merge_configs",
    "parse_stop",
    "reached_stop",
]


# -- entry point -----------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Run the ``hierl`` command line; returns the exit status."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version
            sys.stdout.flush()  # here, so that a closed pipe is caught below
            return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
        status = int(args.func(args))
        sys.stdout.flush()
        return status
    except CLIError as e:
        print(f"{PROG}: error: {one_line(str(e))}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `hierl config PPO | head`): no traceback.
        # See "Note on SIGPIPE" in the docs of the signal module: point stdout at
        # devnull so the interpreter's final flush cannot fail again.
        _stdout_to_devnull()
        return 1
    except Exception as e:
        cause = user_error(e)  # the project's user-facing errors, also from Ray workers
        if cause is None:
            raise  # a bug: keep its traceback
        print(f"{PROG}: error: {error_line(cause)}", file=sys.stderr, flush=True)
        return 2


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a non-file (tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
