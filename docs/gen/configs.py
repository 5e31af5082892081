"""Config tables: one row per field of a config dataclass, with its nested configs."""

from __future__ import annotations

import dataclasses
from typing import Any

from .markdown import code, table


def config_rows(config_class: type, prefix: str = "") -> list[list[str]]:
    """One row per field of ``config_class``: name (``prefix`` + name, the dotted path
    ``--set`` takes), type, default, documentation (the attribute docstring, read by
    ``hierl.config.field_docs`` as ``hierl config`` reads it)."""
    from hierl.config import field_docs

    docs = field_docs(config_class)
    defaults = _defaults(config_class)
    rows = []
    for f in dataclasses.fields(config_class):
        if not f.init:
            continue
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        value = defaults.get(f.name)
        if f.name == "optimizer_config":
            shown = "(the strategy's settings: below)"
        elif dataclasses.is_dataclass(value):
            shown = f"(its fields: `{prefix}{f.name}.*` below)"
        else:
            shown = code(value)
        rows.append([f"`{prefix}{f.name}`", code(kind), shown, docs.get(f.name, "")])
    return rows


def _defaults(config_class: type) -> dict[str, Any]:
    """The default value of each field of config dataclass ``config_class``."""
    from_dict = getattr(config_class, "from_dict", None)
    instance = from_dict({}) if from_dict else config_class()
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(config_class)}


def nested_configs(config_class: type) -> list[tuple[str, type]]:
    """The fields of ``config_class`` that are config dataclasses themselves (``model``),
    with their classes (``optimizer_config`` excepted: it depends on the strategy)."""
    return [
        (name, type(value))
        for name, value in _defaults(config_class).items()
        if dataclasses.is_dataclass(value) and name != "optimizer_config"
    ]


def config_table(config_class: type, level: int = 3) -> str:
    """The settings table of ``config_class``, then one table (a heading at ``level``)
    per nested config dataclass (``model.hiddens``, ...)."""
    header = ["field", "type", "default", "documentation"]
    out = [table(header, config_rows(config_class))]
    for name, cls in nested_configs(config_class):
        out += [
            f"{'#' * level} `{name}`: `{cls.__name__}`\n",
            table(header, config_rows(cls, prefix=f"{name}.")),
        ]
    return "\n".join(out)
