"""Published benchmark records (``benchmarks/RESULTS.md`` blocks and
``benchmarks/curves/*/``) as Markdown."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import statistics
from pathlib import Path
from typing import Any

from .markdown import code, shift_headings, table
from .paths import CURVES, RESULTS, ROOT
from .project import rewrite_repo_links, separate_lists
from .tuned import tuned_experiments


@dataclasses.dataclass
class Record:
    """One published benchmark: a ``benchmarks/RESULTS.md`` block and/or a
    ``benchmarks/curves/<name>/`` directory."""

    name: str
    block: str = ""
    """The block's Markdown (between ``<!-- begin name -->`` and ``<!-- end name -->``)."""
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``summary.json`` of ``benchmarks/curves/<name>/`` ({} when there is none)."""
    images: list[Path] = dataclasses.field(default_factory=list)
    """The PNG figures of ``benchmarks/curves/<name>/``."""

    @property
    def algorithm(self) -> str | None:
        """The algorithm the record measures: its summary's ``run``, else the ``run`` of
        the tuned file of the same name."""
        if self.summary.get("run"):
            return str(self.summary["run"]).upper()
        for path, spec in tuned_experiments():
            if path.stem == self.name and spec.get("run"):
                return str(spec["run"]).upper()
        return None

    @property
    def command(self) -> str:
        """The command the record names (the summary's, else the block's first
        ``python ...`` / ``hierl ...`` code span)."""
        if self.summary.get("command"):
            return str(self.summary["command"])
        found = re.search(r"`((?:python|hierl) [^`]+)`", self.block)
        return found.group(1) if found else ""


BLOCK = re.compile(r"<!-- begin (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- end (?P=name) -->", re.S)


@functools.cache
def records() -> list[Record]:
    """Every published benchmark record, in ``RESULTS.md``'s order, then the curve
    directories it has no block for."""
    found: dict[str, Record] = {}
    text = RESULTS.read_text() if RESULTS.exists() else ""
    for match in BLOCK.finditer(text):
        found[match["name"]] = Record(match["name"], block=match["body"].strip())
    for directory in sorted(p for p in CURVES.iterdir() if p.is_dir()) if CURVES.exists() else []:
        record = found.setdefault(directory.name, Record(directory.name))
        summary = directory / "summary.json"
        if summary.exists():
            record.summary = json.loads(summary.read_text())
        record.images = sorted(directory.glob("*.png"))
    return list(found.values())


def image_path(image: Path) -> str:
    """Where a benchmark figure is copied in the site (beside the results page)."""
    return "benchmarks/" + image.relative_to(ROOT / "benchmarks").as_posix()


def record_markdown(record: Record, page: str, level: int = 3) -> str:
    """A record as Markdown for ``page`` (a site path): its block (headings moved to
    ``level``), or what its directory holds when it has no block, then its notes and
    figures (``record_extras``)."""
    if record.block:
        head = shift_headings(record.block, level) + "\n"
    else:
        head = f"{'#' * level} {record.name}\n\n" + record_facts(record)
    return head + record_extras(record, page)


def record_facts(record: Record) -> str:
    """What a record without a ``RESULTS.md`` block says of itself: its summary's
    command, commit and machine, and its learning table."""
    s = record.summary
    facts = []
    if record.command:
        facts.append(f"Command: {code(record.command)}.")
    if s.get("git"):
        facts.append(f"Commit {commit_cell(s)}.")
    if s.get("machine"):
        facts.append(f"Machine: {machine_cell(s)}.")
    text = " ".join(facts) + "\n\n" if facts else ""
    return text + summary_table([record])


def record_extras(record: Record, page: str) -> str:
    """The notes (``benchmarks/curves/<name>/README.md``) and figures of a record, for
    site page ``page``."""
    parts = []
    readme = CURVES / record.name / "README.md"
    if readme.exists():
        notes = separate_lists(rewrite_repo_links(shift_headings(readme.read_text().strip(), 4)))
        parts.append(f"Notes (`{readme.relative_to(ROOT).as_posix()}`):\n\n{notes}\n")
    rel = "../" * page.count("/")
    for image in record.images:
        parts.append(f"![{record.name}: {image.stem}]({rel}{image_path(image)})\n")
    return "\n".join(parts) + ("\n" if parts else "")


def _median_return(runs: list[dict[str, Any]]) -> str:
    values = [r["final_eval_return"] for r in runs if r.get("final_eval_return") is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def commit_cell(summary: dict[str, Any]) -> str:
    """The commit a summary or record names (``-`` when none), for a table cell."""
    git = summary.get("git") or {}
    if not isinstance(git, dict) or not git.get("commit"):
        return "-"
    return f"`{git['commit'][:10]}`" + (" (uncommitted changes)" if git.get("dirty") else "")


def machine_cell(summary: dict[str, Any]) -> str:
    """The machine a summary or record names (``-`` when none), for a table cell."""
    machine = summary.get("machine") or {}
    if not machine:
        return "-"
    versions = machine.get("versions") or {}
    parts = [machine.get("cpu_model") or "", f"{machine.get('nproc', '?')} CPUs"]
    parts.append(machine.get("platform", ""))
    parts += [f"{k} {v}" for k, v in versions.items() if k in ("torch", "ray")]
    return ", ".join(p for p in parts if p)


def summary_table(chosen: list[Record]) -> str:
    """The learning records of ``chosen`` (those with runs) as one table: what ran,
    with which command, at which commit, on which machine."""
    rows = []
    for r in chosen:
        s = r.summary
        for impl, runs in (s.get("runs") or {}).items():
            rows.append(
                [
                    r.name,
                    s.get("run", "-"),
                    s.get("env", "-"),
                    impl,
                    len(runs),
                    f"{s['budget']:,}" if s.get("budget") else "-",
                    _median_return(runs),
                    s.get("target") if s.get("target") is not None else "-",
                    code(r.command) if r.command else "-",
                    commit_cell(s),
                    machine_cell(s),
                ]
            )
    header = [
        "record",
        "algorithm",
        "env",
        "implementation",
        "seeds",
        "budget (env steps)",
        "median final evaluation return",
        "target",
        "command",
        "commit",
        "machine",
    ]
    return table(header, rows) if rows else ""
