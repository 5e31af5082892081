"""The generated pages of the docs site, written at build time by mkdocs-gen-files.

``mkdocs build`` runs this file (the ``gen-files`` plugin of ``mkdocs.yml``); nothing it
writes is committed.  Every page comes from a source the code or the records already
hold, so the site cannot drift from them:

* ``algorithms/``: one page per registered trainer (``hierl.algorithms.registry``): its
  module and class docstrings, the action and observation spaces its policy class
  accepts (probed by building the policy on each kind of space), the strategies of
  ``optimizer_choices()`` (what ``hierl list`` and ``hierl config`` read), the config
  table of its config dataclass (the attribute docstrings ``hierl config`` prints, read
  by ``hierl.config.field_docs``), its ``examples/tuned/*.yaml`` files and its published
  results (``benchmarks/RESULTS.md`` blocks, ``benchmarks/curves/*/``);
* ``strategies/``: one page per registered policy optimizer (``hierl.optimizers``);
* ``reference/cli.md``: the ``hierl`` argparse parser (``hierl.cli.parser.build_parser``);
* ``reference/api/``: mkdocstrings pages for every public name (the ``__all__`` of each
  public package, the public modules as a whole, every trainer and config class);
* ``benchmarks/results.md``: the benchmark records (``benchmarks/records/*.json`` of
  the optimizer, sampling and serving benchmarks, ``summary.json`` files and
  ``benchmarks/RESULTS.md``);
* ``changelog.md``, ``contributing.md``, ``citation.md``: the repository's
  ``CHANGELOG.md``, ``CONTRIBUTING.md`` and ``CITATION.cff``.

The logic is in plain functions (``generated_pages()`` returns every page as text) so
that ``tests/test_docs.py`` can check the pages without building the site.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import json
import re
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the repository's hierl and tests.support, not an installed copy
    sys.path.insert(0, str(ROOT))

from tests.support.public_api import (  # noqa: E402
    PUBLIC_MODULES,
    PUBLIC_PACKAGES,
    public_names,
)

CURVES = ROOT / "benchmarks" / "curves"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
RECORDS = ROOT / "benchmarks" / "records"
TUNED = ROOT / "examples" / "tuned"

PROJECT_FILES = {
    "changelog.md": ("Changelog", "CHANGELOG.md"),
    "contributing.md": ("Contributing", "CONTRIBUTING.md"),
    "citation.md": ("Citation", "CITATION.cff"),
}
"""Site page -> (title, the repository file it shows)."""

SECTIONS = {
    "algorithms/index.md": "algorithms",
    "strategies/index.md": "strategies",
    "reference/api/index.md": "api",
}
"""The nav entries of ``mkdocs.yml`` that this script fills with the generated pages
below them (``algorithms/index.md`` -> the index, then one page per algorithm)."""


# ---------------------------------------------------------------- helpers


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


# ---------------------------------------------------------------- config tables


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


# ---------------------------------------------------------------- algorithms


def algorithm_names() -> list[str]:
    """The registered algorithms (the registry's names, as ``hierl list`` shows them)."""
    from hierl.algorithms.registry import trainer_names

    return trainer_names()


def trainer(name: str) -> type:
    """The trainer class of algorithm ``name``."""
    from hierl.algorithms.registry import get_trainer_class

    return get_trainer_class(name)


@functools.cache
def strategies_of(name: str) -> tuple[str | None, list[str]]:
    """``(default, supported)`` policy optimizers of algorithm ``name``: what ``hierl
    list`` and ``hierl config`` show (``None``: a nested trainer that drives whole
    trainers)."""
    config_class = trainer(name).config_class
    default = getattr(config_class, "default_optimizer", None) or None
    choices = getattr(config_class, "optimizer_choices", None)
    return default, list(choices()) if choices and default else []


ACTION_SPACES = ("Discrete", "MultiDiscrete", "Box")
OBSERVATION_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")


def _space(kind: str) -> Any:
    import gymnasium as gym
    import numpy as np

    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    return {
        "Box": box,
        "Discrete": gym.spaces.Discrete(3),
        "MultiDiscrete": gym.spaces.MultiDiscrete([2, 3]),
        "MultiBinary": gym.spaces.MultiBinary(3),
        "Dict": gym.spaces.Dict({"a": box, "b": gym.spaces.Discrete(2)}),
        "Tuple": gym.spaces.Tuple((box, gym.spaces.Discrete(2))),
    }[kind]


def policy_of(name: str) -> tuple[type | None, type]:
    """The policy class of algorithm ``name`` (a population's: its members') and the
    config class it is built with; ``None`` when it has no single policy class."""
    cls = trainer(name)
    cls = getattr(cls, "member_class", None) or cls
    return getattr(cls, "policy_class", None), cls.config_class


@functools.cache
def supported_spaces(name: str) -> tuple[list[str], list[str]] | None:
    """The action and observation space kinds whose policy algorithm ``name``'s policy
    class builds (tried on each kind: the policy's own checks decide); ``None`` when the
    algorithm has no policy class to try (ALPHAZERO: board games)."""
    policy_class, config_class = policy_of(name)
    if policy_class is None:
        return None
    import torch

    config = config_class.from_dict({})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only contend (the docs build is serial)

    def builds(observation: str, action: str) -> bool:
        try:
            policy_class(_space(observation), _space(action), config)
        except (ValueError, TypeError, NotImplementedError):
            return False
        return True

    try:
        actions = [a for a in ACTION_SPACES if builds("Box", a)]
        observations = [o for o in OBSERVATION_SPACES if actions and builds(o, actions[0])]
    finally:
        torch.set_num_threads(threads)
    return actions, observations


def spaces_text(name: str, spaces: tuple[list[str], list[str]] | None) -> tuple[str, str]:
    """The action and observation cells of algorithm ``name`` (one without a policy
    class to try is ALPHAZERO: the board-game envs of ``hierl.algorithms.alphazero``)."""
    if spaces is None:
        games = importlib.import_module("hierl.algorithms.alphazero.games")
        ids = sorted(v for k, v in vars(games).items() if k.endswith("_ID"))
        envs = ", ".join(f"`{i}`" for i in ids)
        return "Discrete (board moves)", f"two-player board games ({envs}: `BoardGameEnv`)"
    return ", ".join(spaces[0]) or "none", ", ".join(spaces[1]) or "none"


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
        facts.append(f"Commit {_commit(s)}.")
    if s.get("machine"):
        facts.append(f"Machine: {_machine(s)}.")
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


def shift_headings(text: str, level: int) -> str:
    """``text`` with its highest heading at ``level`` (the others below it)."""
    headings = [len(m) for m in re.findall(r"^(#+) ", text, re.M)]
    if not headings:
        return text
    shift = level - min(headings)
    return re.sub(r"^(#+) ", lambda m: "#" * min(6, len(m[1]) + shift) + " ", text, flags=re.M)


def _median_return(runs: list[dict[str, Any]]) -> str:
    values = [r["final_eval_return"] for r in runs if r.get("final_eval_return") is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def _commit(summary: dict[str, Any]) -> str:
    git = summary.get("git") or {}
    if not isinstance(git, dict) or not git.get("commit"):
        return "-"
    return f"`{git['commit'][:10]}`" + (" (uncommitted changes)" if git.get("dirty") else "")


def _machine(summary: dict[str, Any]) -> str:
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
                    _commit(s),
                    _machine(s),
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


def algorithm_page(name: str, all_records: list[Record]) -> str:
    """The page of algorithm ``name``."""
    from hierl.algorithms.registry import describe

    cls = trainer(name)
    module = sys.modules[cls.__module__]
    config_class = cls.config_class
    default, supported = strategies_of(name)
    spaces = supported_spaces(name)
    actions, observations = spaces_text(name, spaces)
    out = [
        f"# {name}\n",
        f"{describe(name)}.\n",
        f"`from hierl import {cls.__name__}` ([API](../reference/api/hierl.md#"
        f"{cls.__module__}.{cls.__name__})); config class `{config_class.__name__}`; "
        f"on the command line: `hierl train --algo {name}`, `hierl config {name}`.\n",
        "## What it is\n",
        docstring(module) + "\n",
    ]
    if docstring(cls):
        out += [f"`{cls.__name__}`: " + docstring(cls) + "\n"]
    out += [
        "## Can I use it?\n",
        table(
            ["", "supported"],
            [["action spaces", actions], ["observation spaces", observations]],
        ),
    ]
    if spaces is not None:
        out.append(
            "Generated by building the algorithm's policy class "
            f"(`{policy_of(name)[0].__name__}`) on each kind of space: the policy's own "
            "checks decide.\n"
        )
    out.append("## Strategies\n")
    if default:
        links = ", ".join(f"[`{s}`](../strategies/{slug(s)}.md)" for s in supported)
        out.append(
            f"Runs on {links}; `{default}` unless the config's `optimizer` names another "
            "(see [choosing a strategy](../guide/strategies.md)).\n"
        )
    else:
        out.append(
            "A nested trainer: it drives whole trainers (or its own actors) from its "
            "`train()`, not one policy optimizer (see [nesting](../guide/nesting.md)).\n"
        )
        member = getattr(cls, "member_class", None)
        members = [n for n in algorithm_names() if member is not None and trainer(n) is member]
        if members:
            out.append(
                f"Its members are `{member.__name__}` trainers, each on its own strategy; "
                f"their settings are [{members[0]}'s]({slug(members[0])}.md).\n"
            )
    out += [
        "## Configuration\n",
        f"The fields of `{config_class.__name__}`, as `hierl config {name}` prints them; "
        f"set them with `--config`, `--set KEY=VALUE` or `{cls.__name__}({{...}})`.\n",
        config_table(config_class),
    ]
    if default:
        opt_config = config_class.from_dict({}).optimizer_config
        out += [
            f"### Settings of the `{default}` strategy\n",
            f"`optimizer_config` of the default strategy (`{type(opt_config).__name__}`), "
            "also accepted as flat keys; another strategy's settings are on "
            "its page.\n",
            config_table(type(opt_config)),
        ]
    tuned = tuned_files(name)
    out.append("## Tuned examples\n")
    if tuned:
        rows = [
            [
                f"`{p.relative_to(ROOT).as_posix()}`",
                spec.get("env", "-"),
                tuned_comment(p),
            ]
            for p, spec in tuned
        ]
        out += [
            table(["file", "env", "what it runs"], rows),
            "Run one with `hierl train --config FILE`.\n",
        ]
    else:
        out.append(f"No file of `examples/tuned/` runs {name}.\n")
    mine = [r for r in all_records if r.algorithm == name]
    out.append("## Published results\n")
    if mine:
        out.append(
            "From `benchmarks/RESULTS.md` and `benchmarks/curves/` (all records: "
            "[benchmark results](../benchmarks/results.md)).\n"
        )
        out += [record_markdown(r, f"algorithms/{slug(name)}.md") for r in mine]
    else:
        out.append(f"None published yet for {name} (see [benchmarks](../benchmarks/index.md)).\n")
    return "\n".join(out)


def algorithms_index(names: list[str], all_records: list[Record]) -> str:
    """The algorithms overview table."""
    from hierl.algorithms.registry import describe

    rows = []
    for name in names:
        cls = trainer(name)
        text = docstring(cls) + "\n" + docstring(sys.modules[cls.__module__])
        actions, observations = spaces_text(name, supported_spaces(name))
        default, supported = strategies_of(name)
        strategies = ", ".join(f"**{s}**" if s == default else s for s in supported) or "nested"
        tuned = ", ".join(p.stem for p, _ in tuned_files(name)) or "-"
        published = sum(r.algorithm == name for r in all_records)
        rows.append(
            [
                f"[{name}]({slug(name)}.md)",
                describe(name),
                paper(text, name) or "-",
                actions,
                observations,
                strategies,
                tuned,
                published or "-",
            ]
        )
    header = [
        "algorithm",
        "what it is",
        "paper",
        "action spaces",
        "observation spaces",
        "strategies (**default**)",
        "tuned files",
        "published results",
    ]
    return (
        "# Algorithms\n\n"
        "Every registered algorithm (`hierl list`), generated from the registry, the "
        "trainers' docstrings and config classes, `examples/tuned/` and the benchmark "
        "records. Each page has the algorithm's full config table.\n\n" + table(header, rows)
    )


# ---------------------------------------------------------------- strategies


def strategy_names() -> list[str]:
    """The registered policy optimizers (importing ``hierl.optimizers`` registers the
    built-in ones)."""
    importlib.import_module("hierl.optimizers")
    from hierl.optimizers import optimizer_names

    return optimizer_names()


def strategy(name: str) -> type:
    """The optimizer class of strategy ``name``."""
    from hierl.optimizers import get_optimizer_class

    return get_optimizer_class(name)


TRAITS = (
    ("learns_from", "learns from"),
    ("learns_on", "learns on"),
    ("samples_to_driver", "sample batches travel through the driver"),
    ("uses_device_towers", "splits batches over device towers"),
    ("supports_multi_agent", "multi-agent"),
    ("supports_recurrent", "recurrent policies"),
)
"""The class attributes of a policy optimizer shown on its page (documented on
``PolicyOptimizer``)."""


def algorithms_on(strategy_name: str) -> list[str]:
    """The algorithms that run on strategy ``strategy_name``."""
    return [n for n in algorithm_names() if strategy_name in strategies_of(n)[1]]


def hooks_table() -> str:
    """The methods and class attributes of ``PolicyOptimizer`` a new strategy
    implements or sets (the base class's own documentation)."""
    from hierl.config import attribute_docs
    from hierl.optimizers import PolicyOptimizer

    rows = []
    for attr, value in vars(PolicyOptimizer).items():
        if attr.startswith("_"):
            continue
        func = value.__func__ if isinstance(value, classmethod | staticmethod) else value
        if isinstance(func, property):
            func = func.fget
        if inspect.isfunction(func):
            doc = first_paragraph(docstring(func))
            must = " (abstract: every strategy implements it)" if _abstract(func) else ""
            rows.append([f"`{attr}()`", "method" + must, doc])
    for attr, doc in attribute_docs(PolicyOptimizer).items():
        rows.append([f"`{attr}`", "class attribute", first_paragraph(doc)])
    return table(["hook", "kind", "what it is for"], rows)


def _abstract(func: Any) -> bool:
    if getattr(func, "__isabstractmethod__", False):
        return True
    source = inspect.getsource(func)
    return "raise NotImplementedError" in source


def strategy_page(name: str) -> str:
    """The page of strategy ``name``."""
    cls = strategy(name)
    module = sys.modules[cls.__module__]
    traits = [[label, code(getattr(cls, attr))] for attr, label in TRAITS]
    users = ", ".join(f"[{a}](../algorithms/{slug(a)}.md)" for a in algorithms_on(name))
    step = getattr(cls, "step", None)
    out = [
        f"# {name}\n",
        f"`{cls.__name__}` ([API](../reference/api/hierl.optimizers.md#"
        f"{cls.__module__}.{cls.__name__})); choose it with `optimizer: {name}` in a "
        "trainer's config.\n",
        "## What it is\n",
        docstring(module) + "\n",
    ]
    if docstring(cls):
        out.append(docstring(cls) + "\n")
    out.append("## One `step()`\n")
    if step is not None and step is not getattr(strategy_base(), "step", None):
        out.append(docstring(step) or "(no docstring)")
        out.append("")
    out += [
        "## Data flow and capabilities\n",
        table(["", "value"], traits),
        f"Algorithms that run on it: {users or 'none of the built-in ones'}.\n",
        "## Settings\n",
        f"The fields of `{cls.config_class.__name__}` (a trainer's `optimizer_config`, or "
        "flat keys of its config).\n",
        config_table(cls.config_class),
    ]
    return "\n".join(out)


def strategy_base() -> type:
    """``PolicyOptimizer``."""
    from hierl.optimizers import PolicyOptimizer

    return PolicyOptimizer


def strategies_index(names: list[str]) -> str:
    """The strategies overview table and the hooks for writing one."""
    rows = []
    for name in names:
        cls = strategy(name)
        rows.append(
            [
                f"[{name}]({slug(name)}.md)",
                first_paragraph(docstring(sys.modules[cls.__module__])).split(". ")[0],
                cls.learns_from,
                "yes" if cls.samples_to_driver else "no",
                ", ".join(algorithms_on(name)) or "-",
            ]
        )
    return "\n".join(
        [
            "# Strategies\n",
            "A *policy optimizer* (a strategy) is how one `step()` of training is carried "
            "out over the evaluators: where samples are collected, where gradients are "
            "computed and applied, what travels through the driver. It is chosen by name "
            "in a trainer's config (`optimizer`), independently of the algorithm's loss "
            "(see [concepts](../concepts.md) and [choosing a strategy]"
            "(../guide/strategies.md)). Generated from the optimizer registry.\n",
            table(
                ["strategy", "what it is", "learns from", "samples through the driver", "used by"],
                rows,
            ),
            "## Writing one\n",
            "Subclass `PolicyOptimizer`, set `name` and `config_class` (an "
            "`OptimizerConfig` dataclass whose fields are documented), implement `step()` "
            "and register it with `@register_optimizer`; then any trainer whose config "
            "lists it in `optimizer_choices()` runs on it. The hooks of the base class "
            "(from its docstrings):\n",
            hooks_table(),
        ]
    )


# ---------------------------------------------------------------- CLI reference


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = (
                formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            )
            name = ", ".join(f"{o} {metavar}".strip() for o in action.option_strings)
        else:
            name = formatter._format_args(action, action.dest)
        default = action.default
        shown = "-" if default in (None, argparse.SUPPRESS) or action.nargs == 0 else code(default)
        choices = ", ".join(map(str, action.choices)) if action.choices else ""
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append([code(name), shown, choices, help_text])
    return rows


def _command_section(
    path: str, parser: argparse.ArgumentParser, summary: str, level: int = 2
) -> Iterator[str]:
    anchor = path.replace(" ", "-")
    yield f"{'#' * level} `{path}` {{#{anchor}}}\n"
    if summary:
        yield f"{summary[0].upper()}{summary[1:]}.\n"
    if parser.description:
        yield " ".join(parser.description.split()) + "\n"
    yield "```text\n" + parser.format_usage().strip() + "\n```\n"
    rows = _option_rows(parser)
    if rows:
        yield table(["argument", "default", "choices", "meaning"], rows)
    if parser.epilog:
        yield " ".join(parser.epilog.split()) + "\n"
    helps = _subcommand_helps(parser)
    for name, sub in _subcommands(parser).items():
        yield from _command_section(f"{path} {name}", sub, helps.get(name, ""), level + 1)


def _subcommand_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def cli_page() -> str:
    """The CLI reference, from ``hierl.cli.parser.build_parser`` (each command's anchor
    is its words joined by ``-``: ``#hierl-train``)."""
    from hierl.cli.parser import build_parser

    parser = build_parser()
    helps = _subcommand_helps(parser)
    out = [
        "# Command line\n",
        "Generated from `hierl`'s argument parser (`hierl COMMAND --help` prints the same). "
        "Commands: " + ", ".join(f"[`{n}`](#hierl-{n})" for n in _subcommands(parser)) + ".\n",
        "```text\n" + parser.format_usage().strip() + "\n```\n",
        table(["argument", "default", "choices", "meaning"], _option_rows(parser)),
    ]
    for name, sub in _subcommands(parser).items():
        out += list(_command_section(f"hierl {name}", sub, helps.get(name, "")))
    return "\n".join(out)


# ---------------------------------------------------------------- API reference


def api_page_name(module: str) -> str:
    """The site path of the API page of package or module ``module``."""
    return f"reference/api/{module}.md"


def defining_path(obj: Any, module: str, name: str) -> str:
    """The dotted path where ``obj`` (exported as ``module.name``) is defined: where
    mkdocstrings finds its source and docstring."""
    home = getattr(obj, "__module__", None)
    if (inspect.isclass(obj) or inspect.isfunction(obj)) and home:
        return f"{home}.{obj.__qualname__}"
    for candidate in _submodules_defining(module, name):
        return f"{candidate}.{name}"
    return f"{module}.{name}"


def _submodules_defining(module: str, name: str) -> Iterator[str]:
    """The modules a lazy package takes ``name`` from (its export table)."""
    package = importlib.import_module(module)
    exports = getattr(package, "_EXPORTS", {})
    if name in exports:
        yield exports[name]


@dataclasses.dataclass
class ApiEntry:
    """One public name on the API pages."""

    public: str
    """How users import it (``hierl.evaluators.PolicySpec``)."""
    target: str
    """Where it is defined (``hierl.evaluators.policy_map.PolicySpec``): the
    mkdocstrings identifier and the HTML anchor of its rendering."""
    page: str
    """The site page it is rendered on."""


def api_entries() -> list[ApiEntry]:
    """Every public name with the page that renders it, each object rendered once: the
    public modules as a whole first, then each public package's ``__all__``, then the
    trainer classes (``from hierl import PPOTrainer``) and their config classes
    (``PPOTrainer.config_class``), and each strategy's settings class
    (``LocalOptimizer.config_class``)."""
    entries: list[ApiEntry] = []
    rendered: dict[str, str] = {}  # target -> page

    def add(public: str, target: str, page: str) -> None:
        entries.append(ApiEntry(public, target, rendered.setdefault(target, page)))

    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        for name in sorted(public_names(module)):
            obj = getattr(mod, name)
            home = getattr(obj, "__module__", None)
            if inspect.ismodule(obj) or (home != module and not _defined_in(module, name)):
                continue  # imported there, not defined: documented where it is defined
            add(f"{module}.{name}", f"{module}.{name}", api_page_name(module))
    for package in (p for p in PUBLIC_PACKAGES if p != "hierl"):
        mod = importlib.import_module(package)
        for name in sorted(mod.__all__):
            target = defining_path(getattr(mod, name), package, name)
            add(f"{package}.{name}", target, api_page_name(package))
    hierl = importlib.import_module("hierl")
    for name in sorted(public_names("hierl")):
        obj = getattr(hierl, name)
        add(f"hierl.{name}", defining_path(obj, "hierl", name), api_page_name("hierl"))
        config_class = getattr(obj, "config_class", None)
        if inspect.isclass(obj) and config_class is not None and name.endswith("Trainer"):
            target = defining_path(config_class, "hierl", config_class.__name__)
            add(f"hierl.{name}.config_class", target, api_page_name("hierl"))
    for name in strategy_names():  # each strategy's settings class, beside its optimizer
        cls = strategy(name)
        target = defining_path(cls.config_class, "hierl.optimizers", cls.config_class.__name__)
        public = f"hierl.optimizers.{cls.__name__}.config_class"
        add(public, target, api_page_name("hierl.optimizers"))
    return entries


def _defined_in(module: str, name: str) -> bool:
    """Whether ``module``'s source assigns ``name`` at top level (a constant)."""
    import ast

    source = inspect.getsource(importlib.import_module(module))
    for node in ast.parse(source).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def api_pages() -> dict[str, str]:
    """The API reference pages (mkdocstrings directives), keyed by site path: a public
    module's page renders the module; a package's page has a table of its names (each
    linked to where it is rendered), then renders those no other page does."""
    module_pages = {api_page_name(m) for m in PUBLIC_MODULES}
    pages: dict[str, list[str]] = {}
    for module in PUBLIC_MODULES:
        pages[api_page_name(module)] = [
            f"# `{module}`\n",
            f"Public as a whole: `from {module} import NAME`.\n",
            f"::: {module}\n    options:\n      show_root_heading: false\n"
            "      show_if_no_docstring: true\n      heading_level: 2\n",
        ]
    rows: dict[str, list[list[str]]] = {}
    directives: dict[str, list[str]] = {}
    for entry in api_entries():
        home = _entry_page(entry)
        if home in module_pages:
            continue
        link = (
            f"#{entry.target}"
            if entry.page == home
            else f"{_relative(home, entry.page)}#{entry.target}"
        )
        package = home.removeprefix("reference/api/").removesuffix(".md")
        row = [f"[`{entry.public.removeprefix(package + '.')}`]({link})", f"`{entry.target}`"]
        if row not in rows.setdefault(home, []):
            rows[home].append(row)
        if entry.page == home:
            directive = f"::: {entry.target}\n    options:\n      show_root_full_path: false\n"
            if directive not in directives.setdefault(home, []):
                directives[home].append(directive)
    for package in PUBLIC_PACKAGES:
        page = api_page_name(package)
        pages[page] = [
            f"# `{package}`\n",
            f"::: {package}\n    options:\n      members: false\n      show_root_heading: false\n",
            f"Import each name from `{package}`: `from {package} import NAME`.\n",
            table(["name", "defined in"], rows.get(page, [])),
            *directives.get(page, []),
        ]
    index = [
        "# API reference\n",
        "Generated from the docstrings by mkdocstrings. Import from these public paths "
        "only; everything else is internal.\n",
        table(
            ["module", "contents"],
            [
                [f"[`{m}`]({m}.md)", first_paragraph(_module_doc(m))]
                for m in (*PUBLIC_PACKAGES, *PUBLIC_MODULES)
            ],
        ),
    ]
    out = {"reference/api/index.md": "\n".join(index)}
    out.update({page: "\n".join(lines) for page, lines in pages.items()})
    return out


def _entry_page(entry: ApiEntry) -> str:
    """The page of the module ``entry`` is public in (the package or module before the
    name; config classes of trainers: ``hierl``'s page)."""
    module = entry.public.rsplit(".", 1)[0]
    if module in (*PUBLIC_PACKAGES, *PUBLIC_MODULES):
        return api_page_name(module)
    return entry.page


def _module_doc(module: str) -> str:
    return docstring(importlib.import_module(module)).split("\n")[0]


def _relative(page: str, target: str) -> str:
    """The relative link from site page ``page`` to site page ``target``."""
    up = "../" * page.count("/")
    prefix = "reference/api/"
    if page.startswith(prefix) and target.startswith(prefix):
        return target[len(prefix) :]
    return up + target


# ---------------------------------------------------------------- benchmarks, project


def results_page(all_records: list[Record]) -> str:
    """The benchmark results page: the optimizer, sampling and serving records
    (``throughput_section``), a table of every learning record, then
    ``benchmarks/RESULTS.md`` as written (each block followed by its notes and
    figures), then the records that have a directory under ``benchmarks/curves/`` but no
    block."""
    page = "benchmarks/results.md"
    out = [
        "# Benchmark results\n",
        "Generated from the benchmark records: `benchmarks/records/*.json` (the optimizer, "
        "sampling and serving benchmarks), `benchmarks/curves/*/summary.json` (what "
        "ran, its commit, the machine), `benchmarks/RESULTS.md` (the table each benchmark "
        "script writes, with its command, and the notes written beside them) and the "
        "figures and notes in `benchmarks/curves/`. How each benchmark is run and "
        "reproduced: [benchmarks](index.md).\n",
        throughput_section(),
        "## Learning results at a glance\n",
        summary_table([r for r in all_records if r.summary.get("runs")]),
    ]
    by_name = {r.name: r for r in all_records}
    if RESULTS.exists():

        def with_extras(m: re.Match[str]) -> str:
            return m["body"].strip() + "\n\n" + record_extras(by_name[m["name"]], page)

        text = BLOCK.sub(with_extras, RESULTS.read_text())
        text = re.sub(r"^# .*\n", "", text, count=1).strip()
        out += ["## `benchmarks/RESULTS.md`\n", shift_headings(text, 3)]
    rest = [r for r in all_records if not r.block and r.name != "nesting-overhead"]
    if rest:
        out.append("## Other records in `benchmarks/curves/`\n")
        out += [record_markdown(r, page) for r in rest]
    nesting = CURVES / "nesting-overhead" / "nesting_overhead.json"
    if nesting.exists():
        out.append(json_record_markdown(nesting))
    return "\n".join(out) + "\n"


def json_record_markdown(path: Path, title: str | None = None) -> str:
    """A benchmark's JSON record (``hierl.bench.report.write_record``'s fields) as
    Markdown: its provenance (``record_provenance``) and its figures
    (``FIGURE_TABLES[benchmark]``, else ``generic_figures``)."""
    data = json.loads(path.read_text())
    benchmark = data.get("benchmark", path.stem)
    render = FIGURE_TABLES.get(benchmark, generic_figures)
    heading = title or path.parent.name
    return "\n".join(
        [f"### {heading}\n", record_provenance(data, path), render(data.get("figures") or {})]
    )


def record_provenance(data: dict[str, Any], path: Path) -> str:
    """Where a JSON record's figures come from: its file, command (the record's own,
    else the ``python benchmarks/<benchmark>.py ...`` that ``RESULTS.md`` names), commit,
    machine, date, config and the machine's load while it ran."""
    command = data.get("command") or ""
    if not command:
        script = f"benchmarks/{data.get('benchmark', path.stem)}.py"
        text = RESULTS.read_text() if RESULTS.exists() else ""
        found = re.search(rf"`(python {re.escape(script)}[^`]*)`", text)
        command = found.group(1) if found else ""
    shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    facts = [
        f"Record: `{shown}`.",
        f"Command (from the repository root): {code(command) if command else '-'}.",
        f"Commit: {_commit(data)}.",
        f"Machine: {_machine(data)}.",
        f"Date: {data.get('date', '?')}.",
        f"Config: {code(data.get('config', {}))}.",
    ]
    load = load_sentence(data)
    return "\n".join(f"- {f}" for f in ([load] if load else []) + facts) + "\n"


def load_sentence(data: dict[str, Any]) -> str:
    """ "Measured at load X on N cores ...": the record's load averages before and after
    the run, and, on a busy machine, that these are not quiet-machine figures."""
    loads = data.get("load_averages") or {}
    before, after = loads.get("before"), loads.get("after")
    if not before and not after:
        return ""
    cores = (data.get("machine") or {}).get("nproc") or "?"
    peak = max(x[0] for x in (before, after) if x)

    def avg(x: list[float] | None) -> str:
        return " / ".join(f"{v:.2f}" for v in x) if x else "?"

    text = (
        f"**Measured at load {peak:.2f} on {cores} cores** (the higher 1-minute load "
        f"average; 1 / 5 / 15-minute: {avg(before)} before the run, {avg(after)} after)"
    )
    if isinstance(cores, int) and peak > 0.25 * cores:
        text += (
            ": other processes were using the machine, so these are not quiet-machine "
            "figures; compare the ratios, measured in the same run, rather than the rates"
        )
    return text + "."


def generic_figures(figures: dict[str, Any]) -> str:
    """Figures as Markdown: scalars in one table, each list of measurements in its own."""

    def rows_of_dicts(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    out = [
        table(
            ["figure", "value"], [[k, code(v)] for k, v in figures.items() if not rows_of_dicts(v)]
        )
    ]
    for key, values in figures.items():
        if rows_of_dicts(values):
            header = list(values[0])
            rows = [[_number(v.get(h)) for h in header] for v in values]
            out += [f"`{key}`:\n", table(header, rows)]
    return "\n".join(out)


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


SAMPLING_GROUPS = {
    "pendulum": ("Pendulum-v1, 64 sub-envs, in process", "raw"),
    "cartpole_vec": ("CartPole-v1 make_vec, 1024 sub-envs, in process", "raw"),
    "pendulum_procs": (
        "Pendulum-v1: raw loop in 1 vs 2 plain processes (machine ceiling)",
        "1 process",
    ),
    "cartpole_vec_procs": ("CartPole-v1 make_vec: raw loop in 1 vs 2 plain processes", "1 process"),
    "pendulum_remote": ("Pendulum-v1: remote evaluators (Ray actors)", "1 remote"),
    "cartpole_vec_remote": ("CartPole-v1 make_vec: remote evaluators (Ray actors)", "1 remote"),
}
"""``benchmarks/sampling.py``'s measurement groups: title and the baseline candidate
their ratios are against (measured in the same rounds)."""


def sampling_figures(figures: dict[str, Any]) -> str:
    """``benchmarks/sampling.py``: per group, actions/s (median over rounds) of each
    candidate, its ratio to the group's baseline, and the background load."""
    rows = []
    for key, (title, base) in SAMPLING_GROUPS.items():
        group = figures.get(key)
        if not group:
            continue
        med = group["median_actions_per_s"]
        background = (group.get("cpu_cores_rounds") or {}).get("outside")
        for name, value in med.items():
            rows.append(
                [
                    title,
                    name,
                    f"{value:,.0f}",
                    f"{_ratio(value, med.get(base))} of {base}",
                    f"{background:.2f}" if background is not None else "-",
                ]
            )
    header = ["measurement", "candidate", "actions/s", "ratio (same run)", "other processes' cores"]
    targets = figures.get("targets") or {}
    notes = ", ".join(f"{k} >= {v:g}" for k, v in targets.items())
    return table(header, rows) + (f"\nTargets: {notes}.\n" if notes else "")


def optimizer_figures(figures: dict[str, Any]) -> str:
    """``hierl bench optimizers``: the strategy table (ratios against ``local``), the
    async overhead and the Table-3 SGD throughput (ratios against pure torch)."""
    out = []
    strategies = figures.get("strategies") or []
    ok = {r["optimizer"]: r for r in strategies if "error" not in r}
    base = ok.get("local", {}).get("learner_samples_per_s")
    rows = [
        [f"`{r['optimizer']}`", "failed: " + r["error"], "", "", "", "", ""]
        if "error" in r
        else [
            f"`{r['optimizer']}`",
            f"{r['env_samples_per_s']:,.0f}",
            f"{r['learner_samples_per_s']:,.0f}",
            _ratio(r["learner_samples_per_s"], base),
            f"{r['updates_per_s']:,.1f}",
            f"{r['driver_bytes_per_iter'] / 1024:,.1f}",
            f"{r['wall_s']:.1f}",
        ]
        for r in strategies
    ]
    if rows:
        header = [
            "strategy",
            "env samples/s",
            "learner samples/s",
            "learner samples/s vs `local`",
            "updates/s",
            "driver KiB / iteration",
            "timed seconds",
        ]
        out += ["Strategies (same trainer, same run):\n", table(header, rows)]
    sgd = figures.get("sgd")
    if sgd:
        rows = [
            [name, f"{value:,.0f}", f"{sgd['ratio_to_pure_torch'][name]:.3f}x"]
            for name, value in sgd["samples_per_s"].items()
        ]
        out += [
            f"SGD throughput, Humanoid-sized PPO update ({sgd['rows']:,} rows, "
            f"{sgd['minibatch']:,}-row minibatches, {sgd['num_sgd_iter']} epochs; target: "
            f"`multi_gpu`, 1 tower >= 0.9x pure torch, "
            f"{'met' if sgd.get('target_met') else 'not met'}):\n",
            table(["learner", "samples/s", "vs pure torch (same run)"], rows),
        ]
    overhead = figures.get("async_overhead")
    if overhead:
        out += [
            "`async` driver overhead per gradient (1 evaluator; target <= 2 actor round trips, "
            f"{'met' if overhead.get('target_met') else 'not met'}):\n",
            table(
                ["figure", "value"],
                [[k, _number(v)] for k, v in overhead.items() if k != "target_met"],
            ),
        ]
    return "\n".join(out)


def serve_figures(figures: dict[str, Any]) -> str:
    """``benchmarks/serve.py``: every measurement, and dynamic batching's gain over
    unbatched serving at the same concurrency (same run)."""
    rows = [
        [
            r["model"],
            r["mode"],
            r["obs"],
            r["clients"],
            f"{r['requests_per_s']:,.0f}",
            f"{r['observations_per_s']:,.0f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
        ]
        for r in figures.get("rows") or []
    ]
    header = [
        "model",
        "mode",
        "obs / request",
        "clients",
        "requests/s",
        "obs/s",
        "p50 ms",
        "p99 ms",
    ]
    gains = figures.get("batching_gain") or {}
    gain_rows = [[m, f"{g:.2f}x", "met" if g >= 3.0 else "not met"] for m, g in gains.items()]
    return "\n".join(
        [
            table(header, rows),
            "Dynamic batching against unbatched serving, requests/s at the highest "
            "concurrency (same run; target >= 3x):\n",
            table(["model", "batched / unbatched", "target"], gain_rows),
        ]
    )


FIGURE_TABLES = {
    "optimizers": optimizer_figures,
    "sampling": sampling_figures,
    "sampling_quick": sampling_figures,
    "serve": serve_figures,
}
"""The benchmark scripts whose figures have their own tables (by the record's
``benchmark``); others show ``generic_figures``."""


def throughput_records() -> list[Path]:
    """The committed records of the optimizer, sampling and serving benchmarks
    (``benchmarks/records/*.json``, each written by its script's ``--record``)."""
    return sorted(RECORDS.glob("*.json")) if RECORDS.exists() else []


def throughput_section() -> str:
    """The results page's section of ``benchmarks/records/``: one subsection per record."""
    paths = throughput_records()
    if not paths:
        return ""
    out = [
        "## Optimizer, sampling and serving benchmarks\n",
        "Generated from `benchmarks/records/*.json`, which each script writes with "
        "`--record` (run the command shown, from the repository root, to reproduce a "
        "record). Each record states the machine's load while it ran: on a shared machine "
        "the rates are not quiet-machine figures, while the ratios compare candidates "
        "measured in the same run.\n",
    ]
    for path in paths:
        data = json.loads(path.read_text())
        benchmark = data.get("benchmark", path.stem)
        what = RECORD_SCRIPTS.get(benchmark, f"`benchmarks/{benchmark}.py`")
        out.append(json_record_markdown(path, f"{path.stem}: {what}"))
    return "\n".join(out)


RECORD_SCRIPTS = {
    "optimizers": "policy optimizers (`benchmarks/optimizers.py`, `hierl bench optimizers`)",
    "sampling": "sampling throughput (`benchmarks/sampling.py`)",
    "sampling_quick": "sampling throughput (`benchmarks/sampling.py --quick`)",
    "serve": "serving latency and throughput (`benchmarks/serve.py`)",
}
"""What each benchmark measures, for the headings."""


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


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


# ---------------------------------------------------------------- the site


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


def main() -> None:
    """Write the pages and figures into the build (mkdocs-gen-files) and fill the nav."""
    import mkdocs_gen_files

    pages = generated_pages()
    for path, text in pages.items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)
    for path, source in copied_files().items():
        with mkdocs_gen_files.open(path, "wb") as f:
            f.write(source.read_bytes())
    config = mkdocs_gen_files.config
    if config.nav:
        config.nav = expand_nav(config.nav, nav_sections(pages))


if __name__ in ("__main__", "<run_path>"):
    main()
