"""The tuned experiments of ``examples/tuned/*.yaml``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from .paths import TUNED


@functools.cache
def tuned_experiments() -> tuple[tuple[Path, dict[str, Any]], ...]:
    """Every experiment of ``examples/tuned/*.yaml``: (file, its spec with ``experiment``
    set to its name)."""
    import yaml

    found = []
    for path in sorted(TUNED.glob("*.yaml")):
        for experiment, spec in (yaml.safe_load(path.read_text()) or {}).items():
            if isinstance(spec, dict):
                found.append((path, {"experiment": experiment, **spec}))
    return tuple(found)


def tuned_files(name: str) -> list[tuple[Path, dict[str, Any]]]:
    """The ``examples/tuned/*.yaml`` experiments that run algorithm ``name``."""
    return [(p, s) for p, s in tuned_experiments() if str(s.get("run", "")).upper() == name]


def tuned_comment(path: Path) -> str:
    """The first comment paragraph of a tuned file (what it runs and why), on one line:
    up to a blank comment line, an indented one (a command) or a list."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        text = body.strip()
        if lines and (not text or body.startswith("   ") or text.startswith("- ")):
            break
        lines.append(text)
    return " ".join(lines).removesuffix(":")
