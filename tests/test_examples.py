"""``examples/``: every script runs as ``examples/README.md`` writes it, with a tiny budget,
and that page indexes every file of the directory.

Each script is run in its own process by the command its row of ``examples/README.md``
gives, plus ``--stop-iters 1`` (the flag each script documents).  The scripts train with
``num_evaluators=0``, so they start no Ray of their own.  The YAML files' commands are
parsed by hierl's own parser here; the files themselves are run by
``tests/test_tune_experiments.py`` and ``tests/test_train_experiment_file.py``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
INDEX = EXAMPLES / "README.md"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))

ROW = re.compile(r"^\| \[(?P<file>[^\]]+)\]\((?P<link>[^)]+)\) \|.*\| `(?P<command>[^`]+)` \|$")
"""A row of the index: ``| [file](file) | what it shows | `command` |``."""


def _index() -> dict[str, str]:
    """File (relative to ``examples/``) → the command its row gives."""
    rows = {}
    for line in INDEX.read_text().splitlines():
        match = ROW.match(line)
        if match:
            assert match["file"] == match["link"], line
            assert match["file"] not in rows, f"{match['file']} listed twice"
            rows[match["file"]] = match["command"]
    return rows


def _iteration_lines(stdout: str) -> list[int]:
    """The iteration numbers the scripts print at the start of each result line
    (``3 ...`` or ``iter  3 ...``)."""
    return [int(m[1]) for m in re.finditer(r"^(?:iter\s+)?(\d+)\s", stdout, re.MULTILINE)]


def test_the_index_lists_every_file_under_examples():
    files = {
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and p != INDEX and "__pycache__" not in p.parts
    }
    rows = _index()
    assert files, "no examples found"
    assert sorted(files - set(rows)) == [], "files missing from examples/README.md"
    assert sorted(set(rows) - files) == [], "examples/README.md lists files that do not exist"
    for name, command in rows.items():  # each command runs the file of its own row
        assert f"examples/{name}" in shlex.split(command), (name, command)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_runs_as_the_index_writes_it(script):
    command = _index()[script.name]
    argv = shlex.split(command)
    assert argv[:2] == ["python", f"examples/{script.name}"], command
    proc = subprocess.run(
        [sys.executable, *argv[1:], "--stop-iters", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _iteration_lines(proc.stdout) == [1], proc.stdout[-2000:]


@pytest.mark.parametrize(
    "name", [n for n in sorted(_index()) if n.endswith(".yaml")], ids=lambda n: n
)
def test_each_experiment_file_command_is_a_valid_hierl_command(name):
    # searches run with `hierl tune`, tuned files as one run of `hierl train --config`;
    # tests/test_tune_experiments.py and tests/test_train_experiment_file.py run them
    from hierl.cli.parser import build_parser

    argv = shlex.split(_index()[name])
    assert argv[0] == "hierl", argv
    args = build_parser().parse_args(argv[1:])
    if name.startswith("tune/"):
        assert args.command == "tune" and args.file == f"examples/{name}"
    else:
        assert args.command == "train" and args.config == [f"examples/{name}"]


def test_a_bad_stop_iters_is_one_clear_error():
    proc = subprocess.run(
        [sys.executable, "examples/custom_policy.py", "--stop-iters", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "--stop-iters must be at least 1, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr
