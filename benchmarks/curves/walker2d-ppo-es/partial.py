"""PPO-ES against PPO at equal total env steps (also while the PPO-ES seeds still run).

    python benchmarks/curves/walker2d-ppo-es/partial.py [PROGRESS_LOG]

Reads the evaluation lines the PPO-ES runs printed (``progress.log`` beside this file by
default, or another run's, e.g. ``walker2d-ppo-es-2-members/progress.log``: every round,
whereas the CSVs are written at checkpoints only) and the PPO baseline's CSVs
(``benchmarks/curves/walker2d-ppo/``); prints the markdown table of RESULTS.md.  The
last row is each run's final evaluation.
"""

from __future__ import annotations

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


def main() -> None:
    es, base = ppo_es(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "progress.log"), ppo()
    print(
        "| env steps, all members | PPO-ES seeds 0 / 1 / 2 | median "
        "| PPO seeds 0 / 1 / 2 | median |"
    )
    print("|---|---|---|---|---|")
    if not es:
        sys.exit("no PPO-ES evaluation in the log yet")
    end = max(max(steps) for steps in es.values())
    for x in [*(x for x in STEPS if x < end), end]:
        # the last row: each seed's final evaluation
        e = [es.get(s, {}).get(x if x != end else max(es.get(s, {0: None}))) for s in range(3)]
        # PPO stopped at 1,001,472 steps: its last evaluation (983,040) stands for 1M
        p = [base[s].get(min(x, 983_040)) for s in range(3)]
        if all(v is None for v in e):
            continue
        median = cell([statistics.median(e)]) if None not in e else "(not all seeds yet)"
        print(f"| {x:,} | {cell(e)} | {median} | {cell(p)} | {statistics.median(p):,.0f} |")


if __name__ == "__main__":
    main()
