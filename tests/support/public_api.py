"""hierl's public API: the packages and modules users import from, and their names.

One list for the checks that examples and docs import from public paths only
(``tests/test_lint.py``), for the API reference the docs site generates
(``docs/gen_pages.py``) and for the docstring checks (``tests/test_docs.py``).
Standard library only (the docs build imports it without pytest).
"""

from __future__ import annotations

import importlib

PUBLIC_PACKAGES = (
    "hierl",
    "hierl.algorithms",
    "hierl.evaluators",
    "hierl.models",
    "hierl.optimizers",
    "hierl.serve",
    "hierl.tune",
)
"""Packages whose ``__all__`` is public (``hierl``'s also includes every trainer class)."""

PUBLIC_MODULES = (
    "hierl.checkpoint",
    "hierl.config",
    "hierl.policy_graph",
    "hierl.postprocessing",
    "hierl.sample_batch",
    "hierl.torch_policy_graph",
)
"""Modules of the core types and math: public as a whole (their names without ``_``)."""


def public_names(module: str) -> set[str]:
    """The names ``from <module> import ...`` may take."""
    if module in PUBLIC_MODULES:
        return {n for n in vars(importlib.import_module(module)) if not n.startswith("_")}
    names = set(importlib.import_module(module).__all__)
    if module == "hierl":
        from hierl.algorithms.registry import trainer_class_exports

        names |= set(trainer_class_exports())
    return names
