"""Every ``python`` and ``bash`` block of README.md and of the hand-written docs pages
(``docs/**/*.md``) runs as written, each in a fresh process.

The blocks run in a scratch directory laid out like a checkout after README's install
step: the repository's top-level entries linked in (``examples/``, ``constraints.txt``,
...), ``.venv`` linked to the environment running the tests (the install itself needs the
network: README shows it as a ``text`` block), and outputs (checkpoints, logged data,
``hierl_results/``) written there.  ``python`` blocks run as ``python BLOCK.py``,
``bash`` blocks as ``bash -e`` scripts with that environment's ``bin`` first on ``PATH``
(where ``hierl`` is).  Test ids name the page and line (``docs/guide/serving.md:40``).
The only change to a block is the one its text asks for: a comment
``... add: FLAGS`` appends FLAGS to each ``hierl train`` command of its block (README's
"to try one iteration, add: --stop training_iteration=1").  ``text`` and ``mermaid``
blocks (diagrams) are not run; ``yaml`` blocks must parse (and validate as an experiment
file when they hold one).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hierl.algorithms.registry import get_trainer_class, trainer_class_exports, trainer_names
from hierl.optimizers import optimizer_names
from tests.support.readme_blocks import README, REPO, Block, documented_pages, readme_blocks

LANGUAGES = {"python", "bash", "text", "yaml", "mermaid"}
"""The fence languages README and the docs may use: the first two run, ``text`` and
``mermaid`` do not, ``yaml`` is parsed."""
RUNNABLE = ("python", "bash")
BLOCK_TIMEOUT_S = 300
"""A block that runs longer is a documentation bug (it should show a small stop condition)."""
ADD_FLAGS = re.compile(r"^#.*\badd: (--\S.*)$", re.M)
"""A bash block's own instruction to append flags to its ``hierl train`` commands."""

BLOCKS = readme_blocks()
README_MAX_LINES = 200
"""README is a front page (issue 38: at most ~200 lines); the rest belongs in docs/."""


def _ids(blocks: list[Block]) -> list[str]:
    return [b.where for b in blocks]


def test_every_block_has_a_known_language():
    unknown = [str(b) for b in BLOCKS if b.language not in LANGUAGES]
    assert not unknown, f"fenced blocks need one of {sorted(LANGUAGES)}: {unknown}"
    assert sum(b.language in RUNNABLE for b in BLOCKS) >= 10


def test_every_docs_page_has_blocks_and_readme_is_short():
    pages = {p.relative_to(REPO).as_posix() for p in documented_pages()}
    assert {"docs/index.md", "docs/getting-started.md", "docs/concepts.md"} <= pages
    with_runnable = {b.page for b in BLOCKS if b.language in RUNNABLE}
    assert {"README.md", "docs/getting-started.md"} <= with_runnable
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


GENERATED = {"algorithms": trainer_names, "strategies": optimizer_names}
"""The docs folders whose pages the site generates, one per registered name (lowercase)."""
SITE_ONLY = ("docs/reference/", "docs/benchmarks/results.md")
"""Other generated pages: they exist only in a site build."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_links_resolve_and_name_every_algorithm_and_strategy():
    linked: dict[str, set[str]] = {folder: set() for folder in GENERATED}
    missing = []
    for target in LINK.findall(README.read_text()):
        folder = target.split("/")[1] if target.startswith("docs/") else None
        if folder in GENERATED:
            linked[folder].add(Path(target).stem)
        elif not ("://" in target or target.startswith(SITE_ONLY) or (REPO / target).exists()):
            missing.append(target)
    assert not missing, f"README.md links to files that do not exist: {missing}"
    for folder, names in GENERATED.items():
        expected = {name.lower() for name in names()}
        assert linked[folder] == expected, (folder, sorted(linked[folder] ^ expected))


def test_every_trainer_class_is_importable_from_hierl():
    import hierl

    exports = trainer_class_exports()
    assert {get_trainer_class(n).__name__ for n in trainer_names()} <= set(exports)
    for name in exports:
        cls = getattr(hierl, name)
        assert cls.__name__ == name and name in dir(hierl)
        assert cls in {get_trainer_class(n) for n in trainer_names()}


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.language == "yaml"] or [None], ids=lambda b: str(b)
)
def test_yaml_blocks_parse(block, tmp_path):
    if block is None:
        pytest.skip("README and docs have no yaml block")
    from hierl.cli.experiment_file import is_experiment_file
    from hierl.tune.experiments import load_experiments
    from hierl.yaml_loader import load_yaml

    data = load_yaml(block.text)
    assert isinstance(data, dict), block
    if is_experiment_file(data):
        path = tmp_path / "experiment.yaml"
        path.write_text(block.text)
        load_experiments(path)


def checkout_like(tmp_path: Path) -> Path:
    """A directory holding links to the repository's top-level entries and ``.venv``
    pointing at this interpreter's environment."""
    work = tmp_path / "checkout"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git", ".venv", "hierl_results") and not entry.name.startswith(
            ".pytest"
        ):
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(Path(sys.prefix))
    return work


def bash_script(text: str) -> str:
    """The block's text, with the flags its own ``add:`` comment names appended to each
    of its ``hierl train`` commands."""
    wanted = ADD_FLAGS.search(text)
    if not wanted:
        return text
    lines = []
    for line in text.splitlines():
        if line.startswith("hierl train") and not line.rstrip().endswith("\\"):
            line = f"{line} {wanted.group(1)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(BLOCK_TIMEOUT_S + 60)
@pytest.mark.parametrize(
    "block",
    [b for b in BLOCKS if b.language in RUNNABLE],
    ids=_ids([b for b in BLOCKS if b.language in RUNNABLE]),
)
def test_readme_block_runs_as_written(block, tmp_path):
    work = checkout_like(tmp_path)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("RAY_worker_niceness", "0")
    if block.language == "python":
        script = work / "block.py"
        script.write_text(block.text)
        command = [sys.executable, str(script)]
    else:
        script = work / "block.sh"
        script.write_text("set -o pipefail\n" + bash_script(block.text))
        command = ["bash", "-e", str(script)]
    proc = subprocess.Popen(
        command,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: nothing it starts outlives it
    )
    try:
        stdout, stderr = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, (
        f"{block} failed with status {proc.returncode}:\n{block.text}\n"
        f"--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{stderr[-4000:]}"
    )
