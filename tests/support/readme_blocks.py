"""The fenced code blocks of README.md, for the tests that run them as written."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: its info string's language, its text and its first line."""

    language: str
    text: str
    line: int

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.language or 'no language'})"


def readme_blocks(path: Path = README) -> list[Block]:
    """Every fenced block of ``path``, in order."""
    source = path.read_text()
    return [
        Block(m.group(1), m.group(2), source.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(source)
    ]


def block_containing(marker: str, language: str = "python") -> Block:
    """The one ``language`` block whose text contains ``marker``."""
    found = [b for b in readme_blocks() if b.language == language and marker in b.text]
    assert len(found) == 1, f"{len(found)} {language} blocks of README.md contain {marker!r}"
    return found[0]
