"""Benchmark records: ``write_record`` names what produced the figures, and ``--record``
copies a script's record into the committed ``benchmarks/records/``."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

from hierl.bench.report import REPO_ROOT, command_line, write_record

BENCH = REPO_ROOT / "benchmarks"


@pytest.fixture
def bench_module() -> Iterator[Callable[[str], ModuleType]]:
    """Import a ``benchmarks/`` script as a module (they import ``common`` by path)."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))


def test_write_record_names_command_commit_machine_date_and_load(tmp_path):
    argv = [str(BENCH / "sampling.py"), "--quick", "--record"]
    path = write_record(
        tmp_path, "demo", {"rounds": 2}, {"rate": 1.5}, argv=argv, load_before=[1.0, 2.0, 3.0]
    )
    assert path == tmp_path / "demo.json"
    data = json.loads(path.read_text())
    assert data["benchmark"] == "demo"
    assert data["command"] == "python benchmarks/sampling.py --quick --record"
    assert len(data["git"]["commit"]) == 40 and isinstance(data["git"]["dirty"], bool)
    assert data["date"].endswith("+00:00")
    assert data["machine"]["nproc"] == os.cpu_count()
    assert data["machine"]["cpu_model"]
    assert data["load_averages"]["before"] == [1.0, 2.0, 3.0]
    assert len(data["load_averages"]["after"]) == 3
    assert data["config"] == {"rounds": 2} and data["figures"] == {"rate": 1.5}
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, nothing left behind


def test_command_line_quotes_arguments_and_names_a_console_script():
    assert command_line(["/usr/local/bin/hierl", "bench", "optimizers"]) == (
        "hierl bench optimizers"
    )
    assert command_line([str(BENCH / "serve.py"), "--note", "two words"]) == (
        "python benchmarks/serve.py --note 'two words'"
    )


def test_record_with_commit_copies_the_record_into_the_records_dir(
    tmp_path, monkeypatch, bench_module
):
    common: ModuleType = bench_module("common")
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(common, "RECORDS_DIR", tmp_path / "records")
    kept = common.record("demo", {}, {"x": 1})
    assert not (tmp_path / "records").exists()  # only with commit=True
    published = common.record("demo", {}, {"x": 2}, commit=True)
    assert kept == published == tmp_path / "results" / "demo.json"
    copy = tmp_path / "records" / "demo.json"
    assert copy.read_text() == published.read_text()
    assert json.loads(copy.read_text())["figures"] == {"x": 2}


def test_optimizers_script_record_flag_publishes_its_record(tmp_path, monkeypatch, bench_module):
    script: ModuleType = bench_module("optimizers")
    common: ModuleType = bench_module("common")
    monkeypatch.setattr(script, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(common, "RECORDS_DIR", tmp_path / "records")
    options = ["--optimizers", "local", "--evaluators", "0", "--iterations", "1"]
    code = script.run([*options, "--skip-sgd", "--skip-async", "--record"])
    assert code == 0
    data = json.loads((tmp_path / "records" / "optimizers.json").read_text())
    assert [r["optimizer"] for r in data["figures"]["strategies"]] == ["local"]
    assert data["config"]["iterations"] == 1


@pytest.mark.parametrize("script", ["sampling", "serve"])
def test_sampling_and_serve_scripts_offer_record(script, monkeypatch, capsys, bench_module):
    module: ModuleType = bench_module(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", "--help"])
    with pytest.raises(SystemExit):
        module.main()
    assert "--record" in capsys.readouterr().out
