"""Markdown helpers of the generated pages: table cells and tables, code spans,
docstrings, slugs, paper links and heading levels."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

CODE_SPAN = re.compile(r"(`+).+?\1")


def cell(text: Any) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped outside code spans
    (inside them the table extension leaves pipes alone, and an escape would show)."""
    text = " ".join(str(text).split())
    out, pos = [], 0
    for span in CODE_SPAN.finditer(text):
        out += [text[pos : span.start()].replace("|", "\\|"), span.group(0)]
        pos = span.end()
    return "".join([*out, text[pos:].replace("|", "\\|")])


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(value: Any) -> str:
    """``value`` as an inline code span (JSON for data, as ``hierl config`` prints it)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def docstring(obj: Any) -> str:
    """The cleaned docstring of ``obj`` ("" when it has none)."""
    return inspect.cleandoc(obj.__doc__) if getattr(obj, "__doc__", None) else ""


def first_paragraph(text: str) -> str:
    """The first paragraph of ``text``, on one line."""
    return " ".join(text.strip().split("\n\n")[0].split())


def slug(name: str) -> str:
    """The page name of an algorithm or strategy (``PPO_ES`` -> ``ppo_es``)."""
    return name.lower()


PAPER = re.compile(r"https?://arxiv\.org/abs/[\w.]+|arXiv:\s?[\w.]+")
CITED = re.compile(
    r"[A-Z][a-z][\w-]*(?: et al\.| (?:&|and) [A-Z][\w-]+|, [A-Z][\w-]+)*,? (?:[A-Z]\w*,? )?"
    r"(?:19|20)\d\d|[A-Z][\w-]+ \([A-Z]+ (?:19|20)\d\d\)"
)
"""An author-year citation ("Schulman et al. 2017", "Silver et al., Nature 2017") or a
system and its venue ("RLlib (ICML 2018)")."""


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _lead(segment: str) -> str:
    """What a paragraph or bullet is about: its words before a colon that comes within
    its first 40 characters ("Ape-X DDPG: ..." -> "Ape-X DDPG")."""
    head = segment.strip()[:40]
    return head.split(":", 1)[0] if ":" in head else ""


def paper(text: str, name: str = "") -> str:
    """The first citation of a docstring (author and year, with its arXiv link when the
    docstring gives one before the next citation), from the first paragraph or bullet
    that starts by naming algorithm ``name`` (``"* Ape-X: Horgan et al. 2018"``), else
    from the whole text; "" when it cites none."""
    segments = [s for s in re.split(r"\n\s*\n|\n\s*\* ", text) if CITED.search(s)]
    named = [s for s in segments if name and _squash(name) in _squash(_lead(s))]
    for segment in (named or segments)[:1]:
        cited = CITED.search(segment)
        assert cited is not None
        who = " ".join(cited.group(0).split())
        following = CITED.search(segment, cited.end())
        link = PAPER.search(segment, cited.end(), following.start() if following else len(segment))
        if link is None:
            return who
        url = link.group(0)
        if url.lower().startswith("arxiv"):
            url = "https://arxiv.org/abs/" + url.split(":", 1)[1].strip()
        return f"[{who}]({url})"
    return ""


def shift_headings(text: str, level: int) -> str:
    """``text`` with its highest heading at ``level`` (the others below it)."""
    headings = [len(m) for m in re.findall(r"^(#+) ", text, re.M)]
    if not headings:
        return text
    shift = level - min(headings)
    return re.sub(r"^(#+) ", lambda m: "#" * min(6, len(m[1]) + shift) + " ", text, flags=re.M)
