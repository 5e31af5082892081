"""Every generated page and copied figure, and the nav that lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .algorithms import algorithm_names, algorithm_page, algorithms_index
from .api import api_pages
from .cli_reference import cli_page
from .markdown import slug
from .paths import ROOT
from .project import PROJECT_FILES, project_page
from .records import image_path, records
from .results import results_page
from .strategies import strategies_index, strategy_names, strategy_page

SECTIONS = {
    "algorithms/index.md": "algorithms",
    "strategies/index.md": "strategies",
    "reference/api/index.md": "api",
}
"""The nav entries of ``mkdocs.yml`` that ``docs/gen_pages.py`` fills with the pages
below them (``algorithms/index.md`` -> the index, then one page per algorithm)."""


def generated_pages() -> dict[str, str]:
    """Every generated page (site path -> Markdown)."""
    all_records = records()
    names = algorithm_names()
    pages = {"algorithms/index.md": algorithms_index(names, all_records)}
    for name in names:
        pages[f"algorithms/{slug(name)}.md"] = algorithm_page(name, all_records)
    strategies = strategy_names()
    pages["strategies/index.md"] = strategies_index(strategies)
    for name in strategies:
        pages[f"strategies/{slug(name)}.md"] = strategy_page(name)
    pages["reference/cli.md"] = cli_page()
    pages.update(api_pages())
    pages["benchmarks/results.md"] = results_page(all_records)
    for page, (title, source) in PROJECT_FILES.items():
        pages[page] = project_page(title, ROOT / source)
    return pages


def copied_files() -> dict[str, Path]:
    """Files the site shows as they are (site path -> source): the benchmark figures."""
    return {image_path(i): i for r in records() for i in r.images}


def nav_sections(pages: dict[str, str]) -> dict[str, list[Any]]:
    """The nav below each entry of ``SECTIONS``: its index page, then its other pages
    titled by their first heading."""
    sections = {}
    for index in SECTIONS:
        folder = index.rsplit("/", 1)[0] + "/"
        children = sorted(p for p in pages if p.startswith(folder) and p != index)
        sections[index] = [index] + [{_title(pages[p]): p} for p in children]
    return sections


def _title(markdown: str) -> str:
    first = markdown.lstrip().split("\n", 1)[0]
    return first.lstrip("#").strip().strip("`")


def expand_nav(nav: list[Any], sections: dict[str, list[Any]]) -> list[Any]:
    """``nav`` (``mkdocs.yml``'s) with each entry naming a ``sections`` index replaced by
    that section's pages."""
    out: list[Any] = []
    for item in nav:
        if isinstance(item, dict):
            (title, value), *_ = item.items()
            if isinstance(value, list):
                out.append({title: expand_nav(value, sections)})
            elif value in sections:
                out.append({title: sections[value]})
            else:
                out.append(item)
        else:
            out.append(item)
    return out
