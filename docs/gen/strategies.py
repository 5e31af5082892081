"""The strategy pages (``strategies/``): one per registered policy optimizer, and the
index."""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

from .algorithms import algorithm_names, strategies_of
from .configs import config_table
from .markdown import code, docstring, first_paragraph, slug, table


def strategy_names() -> list[str]:
    """The registered policy optimizers (importing ``hierl.optimizers`` registers the
    built-in ones)."""
    importlib.import_module("hierl.optimizers")
    from hierl.optimizers import optimizer_names

    return optimizer_names()


def strategy(name: str) -> type:
    """The optimizer class of strategy ``name``."""
    from hierl.optimizers import get_optimizer_class

    return get_optimizer_class(name)


TRAITS = (
    ("learns_from", "learns from"),
    ("learns_on", "learns on"),
    ("samples_to_driver", "sample batches travel through the driver"),
    ("uses_device_towers", "splits batches over device towers"),
    ("supports_multi_agent", "multi-agent"),
    ("supports_recurrent", "recurrent policies"),
)
"""The class attributes of a policy optimizer shown on its page (documented on
``OptimizerCapabilities``)."""


def algorithms_on(strategy_name: str) -> list[str]:
    """The algorithms that run on strategy ``strategy_name``."""
    return [n for n in algorithm_names() if strategy_name in strategies_of(n)[1]]


def hooks_table() -> str:
    """The methods and class attributes of ``PolicyOptimizer`` a new strategy
    implements or sets (the base classes' own documentation: ``PolicyOptimizer`` and
    the ``OptimizerCapabilities`` it inherits)."""
    from hierl.config import attribute_docs
    from hierl.optimizers import PolicyOptimizer

    bases = [k for k in PolicyOptimizer.__mro__ if k is not object]
    rows = []
    for attr, value in [item for k in bases for item in vars(k).items()]:
        if attr.startswith("_"):
            continue
        func = value.__func__ if isinstance(value, classmethod | staticmethod) else value
        if isinstance(func, property):
            func = func.fget
        if inspect.isfunction(func):
            doc = first_paragraph(docstring(func))
            must = " (abstract: every strategy implements it)" if _abstract(func) else ""
            rows.append([f"`{attr}()`", "method" + must, doc])
    for attr, doc in [item for k in bases for item in attribute_docs(k).items()]:
        rows.append([f"`{attr}`", "class attribute", first_paragraph(doc)])
    return table(["hook", "kind", "what it is for"], rows)


def _abstract(func: Any) -> bool:
    if getattr(func, "__isabstractmethod__", False):
        return True
    source = inspect.getsource(func)
    return "raise NotImplementedError" in source


def strategy_page(name: str) -> str:
    """The page of strategy ``name``."""
    cls = strategy(name)
    module = sys.modules[cls.__module__]
    traits = [[label, code(getattr(cls, attr))] for attr, label in TRAITS]
    users = ", ".join(f"[{a}](../algorithms/{slug(a)}.md)" for a in algorithms_on(name))
    step = getattr(cls, "step", None)
    out = [
        f"# {name}\n",
        f"`{cls.__name__}` ([API](../reference/api/hierl.optimizers.md#"
        f"{cls.__module__}.{cls.__name__})); choose it with `optimizer: {name}` in a "
        "trainer's config.\n",
        "## What it is\n",
        docstring(module) + "\n",
    ]
    if docstring(cls):
        out.append(docstring(cls) + "\n")
    out.append("## One `step()`\n")
    if step is not None and step is not getattr(strategy_base(), "step", None):
        out.append(docstring(step) or "(no docstring)")
        out.append("")
    out += [
        "## Data flow and capabilities\n",
        table(["", "value"], traits),
        f"Algorithms that run on it: {users or 'none of the built-in ones'}.\n",
        "## Settings\n",
        f"The fields of `{cls.config_class.__name__}` (a trainer's `optimizer_config`, or "
        "flat keys of its config).\n",
        config_table(cls.config_class),
    ]
    return "\n".join(out)


def strategy_base() -> type:
    """``PolicyOptimizer``."""
    from hierl.optimizers import PolicyOptimizer

    return PolicyOptimizer


def strategies_index(names: list[str]) -> str:
    """The strategies overview table and the hooks for writing one."""
    rows = []
    for name in names:
        cls = strategy(name)
        rows.append(
            [
                f"[{name}]({slug(name)}.md)",
                first_paragraph(docstring(sys.modules[cls.__module__])).split(". ")[0],
                cls.learns_from,
                "yes" if cls.samples_to_driver else "no",
                ", ".join(algorithms_on(name)) or "-",
            ]
        )
    return "\n".join(
        [
            "# Strategies\n",
            "A *policy optimizer* (a strategy) is how one `step()` of training is carried "
            "out over the evaluators: where samples are collected, where gradients are "
            "computed and applied, what travels through the driver. It is chosen by name "
            "in a trainer's config (`optimizer`), independently of the algorithm's loss "
            "(see [concepts](../concepts.md) and [choosing a strategy]"
            "(../guide/strategies.md)). Generated from the optimizer registry.\n",
            table(
                ["strategy", "what it is", "learns from", "samples through the driver", "used by"],
                rows,
            ),
            "## Writing one\n",
            "Subclass `PolicyOptimizer`, set `name` and `config_class` (an "
            "`OptimizerConfig` dataclass whose fields are documented), implement `step()` "
            "and register it with `@register_optimizer`; then any trainer whose config "
            "lists it in `optimizer_choices()` runs on it. The hooks of the base class "
            "(from its docstrings):\n",
            hooks_table(),
        ]
    )
