"""Lazy public names for package ``__init__`` modules (standard library only).

``import hierl`` (and so ``hierl --help``) must not load torch or Ray; a package lists its
public names with the module that defines each, and a name's module is imported on
first access.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str,
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    more: Callable[[], Mapping[str, str]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for package ``package`` whose ``globals()`` are
    ``namespace``: each name of ``exports`` (name -> defining module) is imported on first
    access and cached in ``namespace``.  ``more()`` gives further names the same way; it is
    called only when a name is not in ``exports`` (or by ``dir()``), so the module that
    lists them (e.g. the trainer registry) is not imported with the package."""

    def modules() -> Mapping[str, str]:
        return exports if more is None else {**more(), **exports}

    def __getattr__(name: str) -> Any:
        module = exports.get(name) or (
            None if more is None or name.startswith("__") else more().get(name)
        )
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__() -> list[str]:
        return sorted({*namespace, *modules()})

    return __getattr__, __dir__
