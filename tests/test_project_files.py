"""Project metadata: one version source, ``CITATION.cff``, ``CHANGELOG.md`` and
``CONTRIBUTING.md`` say what is true of this tree."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import hierl

REPO = Path(__file__).resolve().parents[1]
RLLIB_TITLE = "RLlib: Abstractions for Distributed Reinforcement Learning"
RLLIB_AUTHORS = [
    "Liang",
    "Liaw",
    "Nishihara",
    "Moritz",
    "Fox",
    "Goldberg",
    "Gonzalez",
    "Jordan",
    "Stoica",
]
"""The family names in the order of the ICML 2018 proceedings (PMLR 80)."""


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((REPO / "pyproject.toml").read_text())


# -- one version source -------------------------------------------------------------------
def test_the_version_is_declared_once_in_hierl_init():
    pyproject = _pyproject()
    project = pyproject["project"]
    assert "version" not in project, "pyproject declares a version beside hierl.__version__"
    assert "version" in project["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hierl.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", hierl.__version__)


def test_the_build_reads_the_version_without_importing_hierl_torch_or_ray():
    pytest.importorskip("setuptools.config.expand")
    code = (
        "import sys\n"
        "from setuptools.config.expand import read_attr\n"
        "print(read_attr('hierl.__version__', root_dir=sys.argv[1]))\n"
        "print(','.join(m for m in ('hierl', 'torch', 'ray') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    version, imported = proc.stdout.split("\n")[:2]
    assert version == hierl.__version__
    assert imported == "", f"reading the version imported {imported}"


def test_the_installed_distribution_has_this_version():
    try:
        installed = importlib.metadata.version("hierl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("hierl is not installed (imported from a source tree)")
    assert installed == hierl.__version__


def test_project_urls_are_real_https_addresses():
    urls = _pyproject()["project"]["urls"]
    assert urls["RLlib paper"] == "https://arxiv.org/abs/1712.09381"
    for label, url in urls.items():
        assert url.startswith("https://") and " " not in url, (label, url)
        assert not re.search(r"example\.|todo|xxx|placeholder", url, re.I), (label, url)


# -- CITATION.cff -------------------------------------------------------------------------
def test_citation_cites_this_project_and_the_rllib_paper():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["type"] == "software" and cff["title"].startswith("hierl")
    assert cff["version"] == hierl.__version__
    license_text = (REPO / "LICENSE").read_text()
    assert cff["license"] == "Apache-2.0"
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert cff["authors"] and cff["message"]
    (paper,) = [ref for ref in cff["references"] if ref["title"] == RLLIB_TITLE]
    assert [a["family-names"] for a in paper["authors"]] == RLLIB_AUTHORS
    assert paper["year"] == 2018 and "ICML" in paper["collection-title"]
    assert paper["url"] == "https://arxiv.org/abs/1712.09381"
    assert {"type": "other", "value": "arXiv:1712.09381"}.items() <= paper["identifiers"][0].items()


# -- CHANGELOG.md ---------------------------------------------------------------------------
RELEASE = re.compile(r"^## \[(Unreleased|\d+\.\d+\.\d+)\](?: - (\d{4}-\d{2}-\d{2}))?$")
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_changelog_follows_keep_a_changelog_and_names_this_version():
    lines = (REPO / "CHANGELOG.md").read_text().splitlines()
    assert lines[0] == "# Changelog"
    releases = [line for line in lines if line.startswith("## ")]
    assert releases, "no release section"
    for line in releases:
        match = RELEASE.match(line)
        assert match, f"not a Keep a Changelog release heading: {line!r}"
        assert (match[1] == "Unreleased") == (match[2] is None), line
    kinds = [line[4:] for line in lines if line.startswith("### ")]
    assert kinds and set(kinds) <= KINDS, set(kinds) - KINDS
    first = releases[0]
    if first == "## [Unreleased]":  # the version being prepared is named in its text
        start = lines.index(first)
        end = next((i for i in range(start + 1, len(lines)) if lines[i] in releases), len(lines))
        assert f"{hierl.__version__}" in "\n".join(lines[start:end])
    else:
        assert first.startswith(f"## [{hierl.__version__}]")


# -- CONTRIBUTING.md ------------------------------------------------------------------------
PATH = re.compile(r"(?:[\w.-]+/)+[\w.-]*|[\w-]+\.(?:py|md|toml|txt|cff|yaml)")
OUTPUTS = {"benchmarks/results/"}
"""Directories the benchmarks create (ignored by git)."""
DOCS_SITE = {"docs/", "tests/test_docs.py"}
"""Made with the docs site (``mkdocs.yml``): checked where that exists."""


def test_contributing_names_only_paths_that_exist():
    text = (REPO / "CONTRIBUTING.md").read_text()
    code = re.findall(r"`([^`\n]+)`", text) + re.findall(r"```text\n(.*?)```", text, re.S)
    named = {
        token
        for snippet in code
        for token in (t.strip("\"'(),") for t in snippet.split())
        if PATH.fullmatch(token) and not token.startswith((".venv", "/"))
    }
    named -= OUTPUTS | {"conftest.py"}  # the bare name; tests/conftest.py is checked
    if not (REPO / "mkdocs.yml").exists():
        named -= DOCS_SITE
    assert len(named) > 20
    assert sorted(p for p in named if not (REPO / p).exists()) == []
