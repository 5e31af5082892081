"""The project pages (``changelog.md``, ``contributing.md``, ``citation.md``): the
repository's files, their links pointed at the site and their lists made
Python-Markdown-safe."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT_FILES = {
    "changelog.md": ("Changelog", "CHANGELOG.md"),
    "contributing.md": ("Contributing", "CONTRIBUTING.md"),
    "citation.md": ("Citation", "CITATION.cff"),
}
"""Site page -> (title, the repository file it shows)."""


def project_page(title: str, source: Path) -> str:
    """The page showing repository file ``source`` (Markdown as it is, CITATION.cff as
    YAML), or saying that this checkout has none."""
    if not source.exists():
        return f"# {title}\n\nThis checkout has no `{source.name}` yet.\n"
    text = source.read_text()
    if source.suffix == ".md":
        return separate_lists(rewrite_repo_links(text))
    return (
        f"# {title}\n\nCite hierl with `{source.name}` (GitHub's *Cite this repository* "
        f"reads it):\n\n```yaml\n{text.rstrip()}\n```\n"
    )


LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")


LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d+\.) ")


def separate_lists(text: str) -> str:
    """``text`` (GitHub-flavoured Markdown) with a blank line before each list that
    follows a paragraph line directly: Python-Markdown needs it, or the items run into
    the paragraph."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        prev = out[-1] if out else ""
        if (
            not fenced
            and LIST_ITEM.match(line)
            and prev.strip()
            and not LIST_ITEM.match(prev)
            and not prev.startswith((" ", "\t"))
        ):
            out.append("")
        out.append(line)
    return "\n".join(out)


def rewrite_repo_links(text: str) -> str:
    """``text`` (a repository-root Markdown file) with its relative links pointed at the
    site: ``docs/X.md`` -> ``X.md``, ``CHANGELOG.md`` -> ``changelog.md``, ...; a link
    to any other repository file becomes its path in code (the site does not hold it)."""
    pages = {source: page for page, (_, source) in PROJECT_FILES.items()}
    pages["README.md"] = "index.md"

    def fix(m: re.Match[str]) -> str:
        target = m["target"]
        if re.match(r"[a-z]+:|#", target):
            return m[0]
        path, _, anchor = target.partition("#")
        path = path.removeprefix("./")
        if path.startswith("docs/"):
            new = path.removeprefix("docs/")
        elif path in pages:
            new = pages[path]
        else:
            return f"{m['text']} (`{path}`)"
        return f"[{m['text']}]({new}{'#' + anchor if anchor else ''})"

    return LINK.sub(fix, text)
