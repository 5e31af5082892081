"""What every ``hierl`` command shares: the user-error type, argument types, the
algorithm and checkpoint look-ups."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

PROG = "hierl"


CHECKPOINTS_DIR = "checkpoints"


class CLIError(Exception):
    """A user error: reported as one ``hierl: error: ...`` line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser that raises CLIError instead of printing usage and exiting."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise CLIError(f"{message} (see '{self.prog} --help')")


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def version() -> str:
    try:
        from importlib.metadata import version

        return version("hierl")
    except Exception:
        return "unknown"


def algorithm_names() -> list[str]:
    from hierl.algorithms.registry import trainer_names

    return trainer_names()


def algorithm(text: str) -> str:
    """``--algo`` / ``ALGO``: a registered algorithm name in any case, as registered."""
    from hierl.algorithms.registry import canonical_name
    from hierl.config import ConfigError

    try:
        return canonical_name(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# -- helpers ---------------------------------------------------------------------------
def one_line(message: str) -> str:
    return " ".join(str(message).split())


def is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint dir as given, or the newest complete one under a run dir or its
    checkpoints dir (newer ones that do not load are named in a warning line)."""
    from hierl.checkpoint import META_FILE, CheckpointError, latest_complete_checkpoint

    p = Path(path).expanduser()
    if (p / META_FILE).exists() or not p.is_dir():
        return p
    root = p / CHECKPOINTS_DIR if (p / CHECKPOINTS_DIR).is_dir() else p
    try:
        found, _, skipped = latest_complete_checkpoint(root)
    except CheckpointError:
        return p  # loading it names what is wrong
    for bad, why in skipped:
        print(f"{PROG}: warning: skipping checkpoint '{bad}': {one_line(why)}", file=sys.stderr)
    return found


# -- commands --------------------------------------------------------------------------
def trainer_class(name: str) -> type:
    from hierl.algorithms.registry import get_trainer_class
    from hierl.config import ConfigError

    try:
        return get_trainer_class(name)
    except ConfigError as e:
        raise CLIError(str(e)) from None


def env_name(env: Any) -> str:
    return env if isinstance(env, str) else getattr(env, "__name__", repr(env))


def check_env(env: Any, preprocessor_pref: str) -> None:
    from hierl.evaluators.env import resolve_env_creator

    try:
        resolve_env_creator(env, preprocessor_pref)
    except ValueError as e:
        raise CLIError(str(e)) from None
