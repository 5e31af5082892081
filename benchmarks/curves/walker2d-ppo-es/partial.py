"""PPO-ES against PPO at equal total env steps (also while the PPO-ES seeds still run).

    python benchmarks/curves/walker2d-ppo-es/partial.py [PROGRESS_LOG]
    python benchmarks/curves/walker2d-ppo-es/partial.py PPO_ES_LOG --ppo-log PPO_LOG --every N

Reads the evaluation lines the PPO-ES runs printed (``progress.log`` beside this file by
default, or another run's, e.g. ``walker2d-ppo-es-2-members/progress.log``: every round,
whereas the CSVs are written at checkpoints only) and the PPO baseline's: the 1M-step
CSVs (``benchmarks/curves/walker2d-ppo/``) by default, or another PPO run's printed
evaluations (``--ppo-log``, e.g. ``walker2d-ppo-4m/progress.log``); prints the markdown
table of RESULTS.md at the round ends of ``STEPS`` (or every ``--every`` env steps).  The
last row is each run's final evaluation.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINE = re.compile(r"\s+hierl seed (\d): +([\d,]+) steps +(\d+) s +eval +([-\d.]+)")
STEPS = [163_840, 327_680, 491_520, 655_360, 819_200, 983_040]
"""Round ends of PPO-ES (4 rounds of 4 members, 8 of 2) where PPO also evaluated."""


def ppo_es(log: Path) -> dict[int, dict[int, float]]:
    """Seed -> env steps -> greedy evaluation return, from a progress log."""
    out: dict[int, dict[int, float]] = {}
    with log.open() as f:
        for m in filter(None, map(LINE.match, f)):
            out.setdefault(int(m[1]), {})[int(m[2].replace(",", ""))] = float(m[4])
    return out


def ppo() -> dict[int, dict[int, float]]:
    """Seed -> env steps -> greedy evaluation return, from the PPO baseline's CSVs."""
    out: dict[int, dict[int, float]] = {}
    for seed in range(3):
        with (HERE.parent / "walker2d-ppo" / f"hierl_seed{seed}.csv").open() as f:
            for row in csv.DictReader(f):
                if row["evaluation_reward_mean"] != "nan":
                    steps = int(float(row["timesteps"]))
                    out.setdefault(seed, {})[steps] = float(row["evaluation_reward_mean"])
    return out


def cell(values: list[float | None]) -> str:
    return " / ".join("-" if v is None else f"{v:,.0f}" for v in values)


def median(values: list[float | None]) -> str:
    return f"{statistics.median(values):,.0f}" if None not in values else "(not all seeds yet)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=Path, default=HERE / "progress.log")
    parser.add_argument("--ppo-log", type=Path, help="PPO's progress log (default: 1M CSVs)")
    parser.add_argument("--every", type=int, help="a row every N env steps (default: STEPS)")
    args = parser.parse_args()
    if args.every is not None and args.every <= 0:
        parser.error(f"--every must be a positive number of env steps, got {args.every}")
    es = ppo_es(args.log)
    if not es:
        sys.exit("no PPO-ES evaluation in the log yet")
    base = ppo_es(args.ppo_log) if args.ppo_log else ppo()
    if args.ppo_log and set(base) != set(es):
        sys.exit(f"PPO-ES has seeds {sorted(es)} but PPO's log {sorted(base)}: compare the same")
    seeds = range(max(max(es), max(base)) + 1)
    cols = " / ".join(map(str, seeds))
    print(f"| env steps, all members | PPO-ES seeds {cols} | median | PPO seeds {cols} | median |")
    print("|---|---|---|---|---|")
    end = max(max(steps) for steps in es.values())
    steps = range(args.every, end, args.every) if args.every else STEPS
    for x in [*(x for x in steps if x < end), end]:
        # the last row: each seed's final evaluation
        e = [es.get(s, {}).get(x if x != end else max(es.get(s, {0: None}))) for s in seeds]
        if args.ppo_log:  # its evaluation at x, or its last one (final row, or cut short)
            p = [
                base[s].get(x, base[s][max(base[s])] if x >= max(base[s]) else None) for s in seeds
            ]
        else:  # PPO stopped at 1,001,472 steps: its last evaluation (983,040) stands for 1M
            p = [base[s].get(min(x, 983_040)) for s in seeds]
        if all(v is None for v in e):
            continue
        print(f"| {x:,} | {cell(e)} | {median(e)} | {cell(p)} | {median(p)} |")


if __name__ == "__main__":
    main()
