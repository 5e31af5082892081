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


USER_ERRORS: dict[str, tuple[str, ...]] = {
    "hierl.config": ("ConfigError",),
    "hierl.checkpoint": ("CheckpointError",),
    "hierl.evaluators.offline.schema": ("OfflineDataError",),
    "hierl.evaluators.env_checks": ("EnvDataError",),
    "hierl.export": ("ExportError",),
    "hierl.serve.deployment": ("ServeError",),
}
"""The project's error types that mean "your settings or files are wrong" (module →
class names; their subclasses too): every command reports them as one line.  Looked up
in ``sys.modules`` only: an error of a module never imported cannot have been raised, and
the CLI stays free of heavy imports."""


def user_error(error: BaseException) -> BaseException | None:
    """The user error (a ``USER_ERRORS`` instance) that ``error`` is or that Ray
    wrapped it around (a task's or actor's error, Ray Data's), else None: any other
    exception is a bug and keeps its traceback."""
    types = tuple(
        getattr(sys.modules[module], name)
        for module, names in USER_ERRORS.items()
        if module in sys.modules
        for name in names
    )
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__module__.split(".")[0] == "ray":  # a wrapper: look inside
            inner = getattr(current, "cause", None)
            current = inner if isinstance(inner, BaseException) else current.__cause__
        elif isinstance(current, types):
            return current
        else:
            return None
    return None


def error_line(error: BaseException) -> str:
    """A user error's message as one line (a remote error's traceback text dropped)."""
    text = str(error)
    marker = text.find("Traceback (most recent call last)")
    if marker > 0:  # e.g. Ray's "...RayTaskError(...) ... Traceback ..." of a wrapped cause
        text = text[:marker]
    return one_line(text)


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


def add_allow_import(command: argparse.ArgumentParser) -> None:
    """``--allow-import MODULE``: for the commands that rebuild a trainer from a checkpoint."""
    command.add_argument(
        "--allow-import",
        action="append",
        default=[],
        metavar="MODULE",
        help="let the checkpoint's config import MODULE (or a module in that package) for "
        "callbacks, model.custom_model or an env 'module:Id'; repeatable. Without it, a "
        "checkpoint that names a module is refused",
    )
