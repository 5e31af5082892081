"""The API reference pages (``reference/api/``): mkdocstrings pages for every public
name."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Iterator
from typing import Any

from tests.support.public_api import PUBLIC_MODULES, PUBLIC_PACKAGES, public_names

from .markdown import docstring, first_paragraph, table
from .strategies import strategy, strategy_names


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
