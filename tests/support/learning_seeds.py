"""Run learning tests over several seeds and print the table kept in tests/LEARNING.md.

    python tests/support/learning_seeds.py                     # every learning test, seeds 0-4
    python tests/support/learning_seeds.py -k ppo --seeds 0 1  # a selection
    python tests/support/learning_seeds.py --from-log runs.jsonl  # the table of earlier runs

Each seed is one ``pytest -m learning`` run with ``HIERL_LEARNING_SEED`` set; every
``train_until`` call appends a record (the budget count at which the threshold was
reached, or none) to a JSON-lines log, from which the table is built.  A cell is the
steps (or iterations) to the threshold; "FAIL (best)" when the budget ran out.  The
"worst / budget" column should stay at or below ~75%.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNITS = {"timesteps_total": "steps", "training_iteration": "iters"}
"""Short names of the budget units in the table."""


def run_seed(seed: int, log: Path, pytest_args: list[str]) -> float:
    """One pytest run of the selected learning tests with ``seed``; its wall time."""
    env = dict(os.environ, HIERL_LEARNING_SEED=str(seed), HIERL_LEARNING_LOG=str(log))
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "learning", "-p", "no:cacheprovider"]
    start = time.perf_counter()
    subprocess.run([*cmd, *pytest_args], cwd=REPO, env=env, check=False)
    return time.perf_counter() - start


def table(records: list[dict]) -> str:
    """The markdown table of ``records`` (one row per test, one column per seed)."""
    seeds = sorted({r["seed"] for r in records})
    runs: dict[str, dict[int, dict]] = collections.defaultdict(dict)
    for r in records:
        runs[r["test"]][r["seed"]] = r  # the last record of a test and seed wins
    head = ["test", "threshold", "budget", *(f"seed {s}" for s in seeds), "worst / budget"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for test in sorted(runs):
        by_seed = runs[test]
        any_run = next(iter(by_seed.values()))
        unit = UNITS.get(any_run["unit"], any_run["unit"])
        cells, worst = [], 0.0
        for s in seeds:
            r = by_seed.get(s)
            if r is None:
                cells.append("-")
            elif r["reached_at"] is None:
                cells.append(f"FAIL ({r['best']:.4g})")
                worst = float("inf")
            else:
                cells.append(f"{r['reached_at']:,}")
                worst = max(worst, r["reached_at"] / r["budget"])
        share = "over" if worst == float("inf") else f"{worst:.0%}"
        name = test.split("tests/", 1)[-1]
        budget = f"{any_run['budget']:,} {unit}"
        lines.append(
            f"| {name} | {any_run['threshold']:g} | {budget} | {' | '.join(cells)} | {share} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("-k", default=None, help="pytest -k expression selecting tests")
    parser.add_argument("--log", type=Path, default=None, help="keep the JSON-lines log here")
    parser.add_argument("--from-log", type=Path, default=None, help="only print this log's table")
    parser.add_argument("paths", nargs="*", help="test files or node ids (default: all)")
    args = parser.parse_args()
    if args.from_log:
        records = [json.loads(line) for line in args.from_log.read_text().splitlines() if line]
        print(table(records))
        return
    log = args.log or Path(tempfile.mkdtemp()) / "learning.jsonl"
    pytest_args = [*args.paths, *(["-k", args.k] if args.k else [])]
    for seed in args.seeds:
        wall = run_seed(seed, log, pytest_args)
        print(f"seed {seed}: {wall:.0f} s", flush=True)
    records = [json.loads(line) for line in log.read_text().splitlines() if line]
    print(f"\nlog: {log}\n")
    print(table(records))


if __name__ == "__main__":
    main()
