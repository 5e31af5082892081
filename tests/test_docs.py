"""The docs site: ``mkdocs build --strict`` passes, every public name and config field is
on a generated page, every public class and function has a docstring, and docstrings
(which the site renders as Markdown and ``hierl config`` prints) hold no raw reST."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import docs.gen.algorithms
import docs.gen.api
import docs.gen.configs
import docs.gen.markdown
import docs.gen.project
import docs.gen.records
import docs.gen.results
import docs.gen.strategies
from hierl.cli import main
from tests.support.public_api import PUBLIC_MODULES, PUBLIC_PACKAGES, public_names

ROOT = Path(__file__).resolve().parents[1]

REST = re.compile(
    r":(?:class|func|meth|mod|attr|data|exc|obj|ref|doc|py:\w+):`"  # roles
    r"|^\s*\.\. [\w-]+::"  # directives (.. note::, .. code-block::)
    r"|\S::$",  # a literal-block marker ("as follows::")
    re.M,
)
"""reST markup that Markdown shows raw."""

SITE_TOOLS = (
    "mkdocs",
    "material",
    "mkdocstrings",
    "mkdocstrings_handlers.python",
    "mkdocs_gen_files",
)


def _load_gen_pages() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_pages", ROOT / "docs" / "gen_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen_pages() -> types.ModuleType:
    return _load_gen_pages()


@pytest.fixture(scope="module")
def pages(gen_pages) -> dict[str, str]:
    return gen_pages.generated_pages()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, str]:
    """The site built with ``mkdocs build --strict`` (its directory and the build log)."""
    missing = [m for m in SITE_TOOLS if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(
            f"the docs extra is not installed (no {', '.join(missing)}): pip install -e '.[docs]'"
        )
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "NO_MKDOCS_2_WARNING": "1",
        "DISABLE_MKDOCS_2_WARNING": "true",
    }
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    return out, log


@pytest.mark.timeout(300)
def test_the_site_builds_strictly_with_every_page_in_the_nav(site):
    out, log = site
    assert (out / "index.html").exists()
    # mkdocs lists pages that exist but are not in the nav (INFO, so strict lets them by)
    assert 'not included in the "nav"' not in log, log[-4000:]
    for page in ("algorithms/ppo", "strategies/local", "reference/cli", "benchmarks/results"):
        assert (out / page / "index.html").exists(), page


@pytest.mark.timeout(300)
def test_every_public_name_is_rendered_on_an_api_page(site):
    out, _ = site
    entries = docs.gen.api.api_entries()
    listed = {e.public for e in entries}
    expected = set()
    for module in PUBLIC_PACKAGES:
        expected |= {f"{module}.{n}" for n in public_names(module)}
    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        expected |= {
            f"{module}.{n}"
            for n in public_names(module)
            if getattr(getattr(mod, n), "__module__", None) == module
        }
    assert not expected - listed, f"public names on no API page: {sorted(expected - listed)}"
    missing = []
    for entry in entries:
        html = (out / entry.page.removesuffix(".md") / "index.html").read_text()
        if f'id="{entry.target}"' not in html:
            missing.append(f"{entry.public} ({entry.target} on {entry.page})")
    assert not missing, "not rendered:\n" + "\n".join(missing)


@pytest.mark.timeout(300)
def test_every_cli_command_has_its_anchor(site):
    from hierl.cli.parser import build_parser

    out, _ = site
    html = (out / "reference" / "cli" / "index.html").read_text()
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    assert sub.choices
    for name in sub.choices:
        assert f'id="hierl-{name}"' in html, name


def undocumented(modules: dict[str, set[str]]) -> list[str]:
    """The public classes and functions (and the public methods of the classes) among
    ``modules`` (module name -> its public names) that have no docstring (an
    overriding method inherits its base's)."""
    found = set()
    for module, names in modules.items():
        mod = importlib.import_module(module)
        for name in sorted(names):
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            where = f"{obj.__module__}.{obj.__qualname__}"
            if not inspect.getdoc(obj):
                found.add(where)
            if not inspect.isclass(obj):
                continue
            for attr, value in vars(obj).items():
                func = value.__func__ if isinstance(value, classmethod | staticmethod) else value
                func = func.fget if isinstance(func, property) else func
                if attr.startswith("_") or not inspect.isfunction(func):
                    continue
                doc = (
                    func.__doc__
                    if isinstance(value, property)
                    else inspect.getdoc(getattr(obj, attr))
                )
                if not doc:
                    found.add(f"{where}.{attr}")
    return sorted(found)


def _public_api() -> dict[str, set[str]]:
    modules = {m: public_names(m) for m in PUBLIC_PACKAGES}
    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        modules[module] = {
            n for n in public_names(module) if getattr(getattr(mod, n), "__module__", "") == module
        }
    return modules


def test_every_public_class_and_function_has_a_docstring():
    missing = undocumented(_public_api())
    assert not missing, "public API without a docstring:\n" + "\n".join(missing)


def test_the_docstring_check_names_what_lacks_one(monkeypatch):
    fake = types.ModuleType("fake_public")

    class Documented:
        """Has one."""

        def method(self) -> None:
            pass

    def bare() -> None:
        pass

    Documented.__module__ = bare.__module__ = "fake_public"
    fake.Documented, fake.bare = Documented, bare
    monkeypatch.setitem(sys.modules, "fake_public", fake)
    found = undocumented({"fake_public": {"Documented", "bare"}})
    assert found == [
        "fake_public.test_the_docstring_check_names_what_lacks_one.<locals>.Documented.method",
        "fake_public.test_the_docstring_check_names_what_lacks_one.<locals>.bare",
    ]


def _docstrings(path: Path) -> list[tuple[int, str]]:
    """Every docstring of a source file (module, class, function and attribute
    docstrings: each string statement), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.append((node.lineno, node.value.value))
    return found


def test_no_docstring_of_hierl_holds_raw_rest_markup():
    found = []
    for path in sorted((ROOT / "hierl").rglob("*.py")):
        for line, text in _docstrings(path):
            for match in REST.finditer(text):
                offset = text.count("\n", 0, match.start())
                found.append(f"{path.relative_to(ROOT)}:{line + offset}: {match.group(0).strip()}")
    assert not found, "reST in docstrings (write Markdown: ``code``):\n" + "\n".join(found)


def test_the_rest_pattern_finds_roles_directives_and_literal_markers():
    assert REST.search("see :class:`hierl.Trainer`")
    assert REST.search("text\n\n.. note::\n    careful")
    assert REST.search("run it as follows::\n\n    hierl train")
    assert not REST.search("``hierl.Trainer`` and a dict {'a': 1} and a[::2]")


@pytest.mark.parametrize("yaml", [False, True], ids=["keys", "yaml"])
def test_hierl_config_prints_no_rest(capsys, yaml):
    from hierl.algorithms.registry import trainer_names

    for algo in trainer_names():
        assert main(["config", algo, *(["--yaml"] if yaml else [])]) == 0
        out = capsys.readouterr().out
        assert out.strip()
        assert not REST.search(out), f"hierl config {algo}: {REST.search(out).group(0)!r}"


def _field_names(config_class: type) -> list[str]:
    """The keys of ``config_class`` as ``--set`` takes them: its fields, and
    ``model.hiddens``-style paths into its nested config dataclasses."""
    import dataclasses

    instance = config_class.from_dict({}) if hasattr(config_class, "from_dict") else config_class()
    names = []
    for f in dataclasses.fields(config_class):
        if not f.init:
            continue
        names.append(f.name)
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value) and f.name != "optimizer_config":
            names += [f"{f.name}.{n}" for n in _field_names(type(value))]
    return names


def _config_classes() -> dict[str, list[type]]:
    """Each generated page with a config table and the classes it documents."""
    found = {}
    for name in docs.gen.algorithms.algorithm_names():
        config_class = docs.gen.algorithms.trainer(name).config_class
        classes = [config_class]
        opt_config = getattr(config_class.from_dict({}), "optimizer_config", None)
        if opt_config is not None:
            classes.append(type(opt_config))
        found[f"algorithms/{name.lower()}.md"] = classes
    for name in docs.gen.strategies.strategy_names():
        found[f"strategies/{name.lower()}.md"] = [docs.gen.strategies.strategy(name).config_class]
    return found


def test_every_config_field_is_in_its_page(pages):
    missing, checked = [], 0
    for page, classes in _config_classes().items():
        for cls in classes:
            for field in _field_names(cls):
                checked += 1
                if f"| `{field}` |" not in pages[page]:
                    missing.append(f"{page}: {cls.__name__}.{field}")
    assert checked > 500
    assert "| `model.hiddens` |" in pages["algorithms/ppo.md"]
    assert not missing, "config fields on no generated page:\n" + "\n".join(missing)


def test_every_config_field_has_its_documentation_in_the_table():
    undocumented = []
    for classes in _config_classes().values():
        for cls in classes:
            tables = [(cls, "")] + [(c, f"{n}.") for n, c in docs.gen.configs.nested_configs(cls)]
            for config_class, prefix in tables:
                for row in docs.gen.configs.config_rows(config_class, prefix):
                    if not row[3].strip():
                        undocumented.append(f"{config_class.__name__}: {row[0]}")
    assert not undocumented, "config fields without a docstring:\n" + "\n".join(
        sorted(set(undocumented))
    )


def test_the_config_table_shows_type_default_and_documentation():
    from hierl.algorithms.registry import get_trainer_class
    from hierl.config import field_docs

    config_class = get_trainer_class("PPO").config_class
    rows = {row[0]: row for row in docs.gen.configs.config_rows(config_class)}
    assert rows["`gamma`"][1:3] == ["`float`", "`0.99`"]
    assert rows["`gamma`"][3] == field_docs(config_class)["gamma"]


def test_algorithm_pages_name_spaces_strategies_tuned_files_and_results(pages):
    ppo, dqn = pages["algorithms/ppo.md"], pages["algorithms/dqn.md"]
    assert "| action spaces | Discrete, MultiDiscrete, Box |" in ppo
    assert "| action spaces | Discrete |" in dqn  # DQNPolicy refuses Box and MultiDiscrete
    assert "[`multi_gpu`](../strategies/multi_gpu.md)" in ppo
    assert "`examples/tuned/hopper-ppo.yaml`" in ppo
    assert "### hopper-ppo: PPO on Hopper-v5" in ppo
    assert "](../benchmarks/curves/hopper-ppo/curve.png)" in ppo
    assert (
        "[Schulman et al. 2017](https://arxiv.org/abs/1707.06347)" in pages["algorithms/index.md"]
    )


def test_every_figure_the_pages_show_is_copied_into_the_site(pages, gen_pages):
    copied = set(gen_pages.copied_files())
    for path, text in pages.items():
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
            assert resolved in copied, f"{path}: {target}"


def test_results_page_names_command_commit_and_machine_of_each_record(pages):
    results = pages["benchmarks/results.md"]
    for record in docs.gen.records.records():
        summary: dict[str, Any] = record.summary
        if not summary.get("runs"):
            continue
        row = next(line for line in results.splitlines() if line.startswith(f"| {record.name} |"))
        assert summary["git"]["commit"][:10] in row
        assert f"{summary['machine']['nproc']} CPUs" in row
        assert record.command and record.command in row
    # the optimizer, sampling and serving records (benchmarks/records/, written by --record)
    committed = docs.gen.results.throughput_records()
    benchmarks = {json.loads(p.read_text())["benchmark"] for p in committed}
    assert {"optimizers", "serve"} <= benchmarks and benchmarks & {"sampling", "sampling_quick"}
    for path in committed:
        data = json.loads(path.read_text())
        section = results.split(f"### {path.stem}: ", 1)[1].split("\n### ", 1)[0]
        assert f"`{data['command']}`" in section
        assert data["git"]["commit"][:10] in section
        assert f"{data['machine']['cpu_model']}, {data['machine']['nproc']} CPUs" in section
        load = data["load_averages"]["before"][0]
        assert f"{load:.2f}" in section and "Measured at load" in section
        assert "|---|" in section  # at least one figure table


def test_a_record_renders_its_provenance_load_and_same_run_ratios(tmp_path):
    from hierl.bench.report import write_record

    rows = [
        {"optimizer": "local", "wall_s": 2.0, "env_samples_per_s": 100.0,
         "learner_samples_per_s": 50.0, "updates_per_s": 1.0, "driver_bytes_per_iter": 0},
        {"optimizer": "async", "wall_s": 2.0, "env_samples_per_s": 300.0,
         "learner_samples_per_s": 150.0, "updates_per_s": 9.0, "driver_bytes_per_iter": 2048},
        {"optimizer": "apex", "error": "RuntimeError: boom"},
    ]  # fmt: skip
    path = write_record(
        tmp_path,
        "optimizers",
        {"iterations": 2},
        {"strategies": rows},
        argv=["/usr/bin/hierl", "bench", "optimizers", "--iterations", "2"],
        load_before=[3.5, 3.0, 2.5],
    )
    text = docs.gen.results.json_record_markdown(path, "optimizers")
    assert "`hierl bench optimizers --iterations 2`" in text
    assert "**Measured at load " in text and "3.50 / 3.00 / 2.50 before the run" in text
    assert "not quiet-machine figures" in text  # load 3.5 on this machine's cores
    assert "| `async` | 300 | 150 | 3.00x | 9.0 | 2.0 | 2.0 |" in text  # vs local, same run
    assert "| `apex` | failed: RuntimeError: boom |" in text


def test_project_pages_show_the_repository_files_when_present(tmp_path):
    absent = docs.gen.project.project_page("Changelog", tmp_path / "CHANGELOG.md")
    assert "no `CHANGELOG.md`" in absent
    (tmp_path / "CHANGELOG.md").write_text(
        "# Changelog\n\nSee [contributing](CONTRIBUTING.md), [the guide](docs/guide/training.md#x),"
        " [a script](benchmarks/learning.py) and [Keep a Changelog](https://keepachangelog.com).\n"
    )
    page = docs.gen.project.project_page("Changelog", tmp_path / "CHANGELOG.md")
    assert page.startswith("# Changelog")
    assert "[contributing](contributing.md)" in page
    assert "[the guide](guide/training.md#x)" in page
    assert "a script (`benchmarks/learning.py`)" in page
    assert "[Keep a Changelog](https://keepachangelog.com)" in page
    (tmp_path / "CITATION.cff").write_text("cff-version: 1.2.0\ntitle: hierl\n")
    citation = docs.gen.project.project_page("Citation", tmp_path / "CITATION.cff")
    assert "```yaml\ncff-version: 1.2.0\ntitle: hierl\n```" in citation


def test_expand_nav_fills_each_generated_section(gen_pages):
    pages = {
        "algorithms/index.md": "# Algorithms",
        "algorithms/ppo.md": "# PPO\n",
        "strategies/index.md": "# Strategies",
        "reference/api/index.md": "# API",
        "reference/api/hierl.md": "# `hierl`\n",
    }
    nav = [
        {"Home": "index.md"},
        {"Algorithms": "algorithms/index.md"},
        {"Reference": [{"CLI": "reference/cli.md"}, {"API": "reference/api/index.md"}]},
    ]
    assert gen_pages.expand_nav(nav, gen_pages.nav_sections(pages)) == [
        {"Home": "index.md"},
        {"Algorithms": ["algorithms/index.md", {"PPO": "algorithms/ppo.md"}]},
        {
            "Reference": [
                {"CLI": "reference/cli.md"},
                {"API": ["reference/api/index.md", {"hierl": "reference/api/hierl.md"}]},
            ]
        },
    ]


def test_table_cells_escape_pipes_only_outside_code_spans():
    # an escaped pipe inside a code span shows its backslash ("int \| None")
    assert docs.gen.markdown.cell("`int | None` or a|b\nnext") == "`int | None` or a\\|b next"
    assert docs.gen.markdown.cell("``x | y``") == "``x | y``"


def test_lists_right_after_a_paragraph_get_their_blank_line():
    text = "Run in pieces:\n- one\n  more of one\n- two\n\n```\nx\n- not a list\n```\n"
    assert docs.gen.project.separate_lists(text) == (
        "Run in pieces:\n\n- one\n  more of one\n- two\n\n```\nx\n- not a list\n```\n"
    )


def test_no_figure_without_its_command_and_commit():
    shown = [r for r in docs.gen.records.records() if r.images]
    assert shown
    for record in shown:
        git = record.summary.get("git")
        commit = isinstance(git, dict) and git.get("commit")
        assert record.command, record.name
        assert commit or re.search(r"commit `[0-9a-f]{7,}`", record.block), record.name


def test_strategy_pages_show_one_step_the_data_flow_and_the_hooks(pages):
    index, local = pages["strategies/index.md"], pages["strategies/local.md"]
    assert "| `step()` | method (abstract: every strategy implements it) |" in index
    assert "| `samples_to_driver` | class attribute |" in index  # an attribute docstring
    assert "## One `step()`" in local
    assert "| sample batches travel through the driver | `true` |" in local
    assert "[PPO](../algorithms/ppo.md)" in local
