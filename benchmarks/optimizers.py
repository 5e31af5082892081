"""Microbenchmark every named policy optimizer (RLlib ICML 2018 §5, Table 3).

The same as ``hierl bench optimizers``; see ``hierl/bench/optimizers.py`` for what is
measured.  Results: ``benchmarks/results/optimizers.json`` and two PNG charts; with
``--record`` the JSON is also copied to ``benchmarks/records/`` (committed, shown on the
docs' benchmark results page).

Usage::

    .venv/bin/python benchmarks/optimizers.py                   # everything
    .venv/bin/python benchmarks/optimizers.py --optimizers local async --skip-sgd
    .venv/bin/python benchmarks/optimizers.py --algo PPO --evaluators 4
    .venv/bin/python benchmarks/optimizers.py --quick --record  # + benchmarks/records/
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RECORD_HELP, RESULTS_DIR, publish

from hierl.bench.optimizers import main


def run(argv: list[str]) -> int:
    """``hierl bench optimizers`` writing to ``benchmarks/results/``; ``--record`` (this
    script's own flag) copies its record into ``benchmarks/records/``."""
    commit = "--record" in argv
    args = [a for a in argv if a != "--record"]
    if "-h" in args or "--help" in args:
        print(f"--record: {RECORD_HELP}")
    code = main(["--output-dir", str(RESULTS_DIR), *args])
    if code == 0 and commit:
        publish(RESULTS_DIR / "optimizers.json")
    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
