"""A config as a complete, commented YAML file (``hierl config ALGO --yaml``).

Every key of the config is written with its current value and its field docstring as a
comment above it; nested dataclass configs (``model``, ``optimizer_config``) become
nested mappings with their own fields' comments.  The file reads back, through
``hierl train --config FILE`` (``hierl.yaml_loader``) and the config's ``from_dict``, to
an equal config.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections.abc import Mapping
from typing import Any

import yaml

from hierl.config import field_docs

WIDTH = 88
"""Comment lines are wrapped to this width."""


def _scalar(value: Any) -> str:
    """``value`` as one line of YAML (tuples as lists; flow style for containers)."""
    plain = json.loads(json.dumps(value, default=str))
    text = yaml.safe_dump(plain, default_flow_style=True, width=10_000, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def _comment(text: str, indent: str) -> list[str]:
    lines = []
    for para in text.splitlines() or [""]:
        wrapped = textwrap.wrap(para, WIDTH - len(indent) - 2) or [""]
        lines.extend(f"{indent}# {w}".rstrip() for w in wrapped)
    return lines


def _render(
    obj: Any, values: Mapping[str, Any], indent: str, notes: Mapping[str, str]
) -> list[str]:
    docs = field_docs(type(obj))
    lines: list[str] = []
    for key, value in values.items():
        doc = docs.get(key, "")
        if key in notes:
            doc = f"{doc}\n{notes[key]}" if doc else notes[key]
        if doc:
            lines.extend(_comment(doc, indent))
        sub = getattr(obj, key, None)
        if dataclasses.is_dataclass(sub) and isinstance(value, Mapping) and value:
            lines.append(f"{indent}{key}:")
            lines.extend(_render(sub, value, indent + "  ", {}))
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def config_yaml(config: Any, title: str, notes: Mapping[str, str] | None = None) -> str:
    """The commented YAML of ``config`` (a ``hierl.config.Config``); ``title`` opens the
    file as a comment, ``notes`` adds a line to the comment of the keys it names."""
    lines = _comment(title, "")
    lines.extend(_render(config, config.to_dict(), "", notes or {}))
    return "\n".join(lines) + "\n"
