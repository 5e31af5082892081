"""The code base stays clean: ruff (lint and format), and examples and README import
from hierl's public paths only."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.public_api import PUBLIC_MODULES, PUBLIC_PACKAGES
from tests.support.public_api import public_names as _public_names
from tests.support.readme_blocks import readme_blocks

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed (it is part of the [test] extra)")
    return [found]


@pytest.mark.timeout(60)
def test_ruff_lint_clean():
    proc = subprocess.run([*_ruff(), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(60)
def test_ruff_format_clean():
    cmd = [*_ruff(), "format", "--check", "."]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def non_public_imports(source: str, where: str, first_line: int = 1) -> list[str]:
    """Each import of hierl in ``source`` (whose first line is line ``first_line`` of
    ``where``) that goes past a public path or takes a name its module does not export."""
    public = (*PUBLIC_PACKAGES, *PUBLIC_MODULES)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        line = first_line + node.lineno - 1
        for module, names in modules:
            if module.split(".")[0] != "hierl":
                continue
            if module not in public:
                found.append(f"{where}:{line}: {module} is not a public path")
                continue
            for name in sorted(set(names or ()) - _public_names(module)):
                found.append(f"{where}:{line}: {module} does not export {name}")
    return found


def test_the_public_import_check_flags_deep_paths_and_unexported_names():
    source = (
        "from hierl import PPOTrainer, SampleBatch\n"
        "from hierl.evaluators import PolicySpec\n"
        "from hierl.postprocessing import discount_cumsum\n"
        "import hierl\n"
        "import numpy\n"
        "from hierl.algorithms.ppo import PPOTrainer\n"
        "import hierl.evaluators.env\n"
        "from hierl.evaluators import resolve_env_creator\n"
        "from hierl import NoSuchTrainer\n"
    )
    assert non_public_imports(source, "x.py") == [
        "x.py:6: hierl.algorithms.ppo is not a public path",
        "x.py:7: hierl.evaluators.env is not a public path",
        "x.py:8: hierl.evaluators does not export resolve_env_creator",
        "x.py:9: hierl does not export NoSuchTrainer",
    ]


def test_examples_and_readme_import_only_from_public_paths():
    found = []
    examples = sorted((ROOT / "examples").rglob("*.py"))
    assert examples
    for path in examples:
        found += non_public_imports(path.read_text(), str(path.relative_to(ROOT)))
    python_blocks = [b for b in readme_blocks() if b.language == "python"]  # README and docs/
    assert python_blocks
    for block in python_blocks:
        found += non_public_imports(block.text, block.page, block.line + 1)
    assert not found, "\n".join(found)


def test_tests_import_helpers_from_support_never_from_conftest():
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            if any(m.split(".")[-1] == "conftest" for m in modules):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"import from tests/support/ instead of conftest: {found}"


def test_no_test_module_shares_a_name_with_a_benchmark_script():
    # tests/ is a package (its modules are tests.*), and no name of it repeats one of
    # benchmarks/, which benchmark tests put on sys.path (tests/learning.py once shadowed
    # benchmarks/learning.py and broke the full run).
    assert (ROOT / "tests" / "__init__.py").exists()
    assert (ROOT / "tests" / "support" / "__init__.py").exists()
    benchmarks = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    assert "learning" in benchmarks
    tests = {p.stem for p in (ROOT / "tests").rglob("*.py")} - {"__init__"}
    assert not tests & benchmarks
