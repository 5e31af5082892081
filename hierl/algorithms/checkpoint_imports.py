"""What a checkpoint's config may import when a trainer is rebuilt from it: nothing the
user did not allow.

A config names code as ``"module:name"`` in three settings: ``callbacks`` (an
EpisodeCallbacks class), ``model.custom_model`` (a model factory, called) and ``env`` (a
Gymnasium id with its module, ``"my_package.envs:MyEnv-v0"``, imported first).  They
may sit at any depth (a multi-agent policy's ``config.model``, a population's
``member_config``).  Rebuilding a trainer from a file someone else wrote would import
that module, running its top-level code, and call what it names (``"builtins:print"``
runs), so ``check_checkpoint_imports`` refuses every such name unless

* the user allows its module: ``allow_imports=["my_package"]`` (a package allows its
  submodules) or, on the command line, ``--allow-import my_package``;
* no import happens: a model or env registered under that very name in the user's own
  process (``hierl.register_model`` / ``hierl.register_env``), or an env id whose module
  the user's process has already imported and that Gymnasium has registered;
* the user replaces the setting (``from_checkpoint(dir, callbacks=MyCallbacks)``,
  ``--env ALE/Pong-v5``).

``ALE/*`` ids need no module (hierl registers ale-py itself), so ``"ale_py:ALE/Pong-v5"``
is refused like any other module name: allow ``ale_py`` or play ``ALE/Pong-v5``.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from hierl.checkpoint import CheckpointError

IMPORT_SETTINGS = ("callbacks", "custom_model", "env")
"""The config keys (at any depth) whose ``"module:name"`` value is imported."""
_DATA_KEYS = frozenset({"env_config", "custom_model_config"})
"""Keys holding the user's own data, never names of code."""
_HOW_ELSE = {
    "callbacks": "or pass callbacks=... to from_checkpoint",
    "custom_model": "or register the factory under that name in this process "
    "(hierl.register_model)",
    "env": "or register the env in this process (hierl.register_env), or play another "
    "env id (--env / env=...)",
}


class ImportRefusedError(CheckpointError):
    """A checkpoint's config names a module to import that the user did not allow."""


def code_references(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(setting, value)`` of every ``"module:name"`` in ``config`` that rebuilding a
    trainer would import, ``setting`` dotted (``model.custom_model``)."""
    for key, value in config.items():
        setting = f"{prefix}{key}"
        if key in _DATA_KEYS:
            continue
        if isinstance(value, Mapping):
            yield from code_references(value, f"{setting}.")
        elif (
            key in IMPORT_SETTINGS
            and isinstance(value, str)
            and ":" in value
            and not _imports_nothing(key, value)
        ):
            yield setting, value


def _imports_nothing(key: str, value: str) -> bool:
    """Whether ``value`` resolves without an import: registered in this process."""
    if key == "custom_model":
        from hierl.models.registry import registered_models

        return value in registered_models()
    if key == "env":
        import gymnasium as gym

        from hierl.evaluators.env import is_registered_env

        if is_registered_env(value):
            return True
        module, _, env_id = value.partition(":")
        return module in sys.modules and env_id in gym.registry
    return False


def allowed(module: str, allow_imports: Collection[str]) -> bool:
    """Whether ``module`` is one of ``allow_imports`` or inside one of those packages."""
    return any(module == a or module.startswith(f"{a}.") for a in allow_imports)


def check_checkpoint_imports(
    config: Mapping[str, Any],
    allow_imports: Collection[str],
    checkpoint_dir: str | Path,
    replaced: Collection[str] = (),
) -> None:
    """Refuse a checkpoint whose ``config`` names a module outside ``allow_imports``.

    ``replaced``: top-level settings the caller passes again (their stored values are
    not used).

    Raises:
        ImportRefusedError: one line naming the setting, its value, the module and how
            to allow it.
    """
    if isinstance(allow_imports, str):
        allow_imports = [allow_imports]
    for setting, value in code_references(config):
        if setting.split(".", 1)[0] in replaced:
            continue
        module = value.partition(":")[0]
        if allowed(module, allow_imports):
            continue
        key = setting.rsplit(".", 1)[-1]
        raise ImportRefusedError(
            f"checkpoint '{checkpoint_dir}': config field '{setting}' = {value!r} would "
            f"import module '{module}' and run its code; loading a checkpoint imports no "
            f"module it names unless you allow it: --allow-import {module} (hierl "
            f"rollout, export, serve, train --resume) or allow_imports=[{module!r}] "
            f"(from_checkpoint), {_HOW_ELSE[key]}"
        )
