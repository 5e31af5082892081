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
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for package ``package`` whose ``globals()`` are
    ``namespace``: each name of ``exports`` (name -> defining module) is imported on first
    access and cached in ``namespace``."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
