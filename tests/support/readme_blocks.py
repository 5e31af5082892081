"""The fenced code blocks of README.md and of the hand-written docs pages, for the tests
that run them as written."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: its page (relative to the repository), its info string's
    language, its text and its first line."""

    language: str
    text: str
    line: int
    page: str = "README.md"

    @property
    def where(self) -> str:
        """``page:line``, e.g. ``docs/guide/serving.md:40``: the block's test id."""
        return f"{self.page}:{self.line}"

    def __str__(self) -> str:
        return f"{self.where} ({self.language or 'no language'})"


def documented_pages() -> list[Path]:
    """README.md and every Markdown page committed under ``docs/`` (the hand-written
    ones: the generated pages exist only in a site build)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page_blocks(path: Path) -> list[Block]:
    """Every fenced block of the page ``path``, in order."""
    source = path.read_text()
    page = path.resolve().relative_to(REPO).as_posix()
    return [
        Block(m.group(1), m.group(2), source.count("\n", 0, m.start()) + 1, page)
        for m in _FENCE.finditer(source)
    ]


def readme_blocks(path: Path | None = None) -> list[Block]:
    """Every fenced block of ``path``, or (by default) of README.md and every docs page,
    page by page."""
    pages = documented_pages() if path is None else [path]
    return [block for page in pages for block in page_blocks(page)]


def block_containing(marker: str, language: str = "python") -> Block:
    """The one ``language`` block of README.md and the docs whose text contains ``marker``."""
    found = [b for b in readme_blocks() if b.language == language and marker in b.text]
    where = [b.where for b in found]
    assert len(found) == 1, (
        f"{len(found)} {language} blocks of README.md and docs/ contain {marker!r}: {where}"
    )
    return found[0]
