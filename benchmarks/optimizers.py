"""Microbenchmark every named policy optimizer (RLlib ICML 2018 §5, Table 3).

The same as ``hierl bench optimizers``; see ``hierl/bench/optimizers.py`` for what is
measured.  Results: ``benchmarks/results/optimizers.json`` and two PNG charts.

Usage::

    .venv/bin/python benchmarks/optimizers.py                   # everything
    .venv/bin/python benchmarks/optimizers.py --optimizers local async --skip-sgd
    .venv/bin/python benchmarks/optimizers.py --algo PPO --evaluators 4
"""

from __future__ import annotations

import sys
from pathlib import Path

from hierl.bench.optimizers import main

if __name__ == "__main__":
    results = Path(__file__).resolve().parent / "results"
    sys.exit(main(["--output-dir", str(results), *sys.argv[1:]]))
