"""A published learning curve beside ours, at the same frame counts.

    python benchmarks/published.py benchmarks/published/sb3-zoo-ppo-pong \
        benchmarks/curves/pong-ppo/hierl_seed0.csv --frame-skip 4

The published curve is a run's Stable-Baselines3 ``Monitor`` files (``<env>.monitor.csv``
as SB3 writes them, or ``monitor_<env>.csv``; columns ``r`` and ``l``: one row per whole
game, its unclipped score and its length in emulator frames; ``#`` lines are skipped).
The run's envs step in lockstep (a ``DummyVecEnv``), so when env ``i`` ends a game after
``L`` of its own frames, the run has taken ``n_envs * L`` frames. At each frame count the
training return is the mean of the last ``--window`` games ended by then over all envs, as
hierl's ``episode_reward_mean`` is (``metrics_smoothing_episodes``: 100, whole games,
sampled actions, unclipped). Ours comes from a ``benchmarks/learning.py`` CSV, whose
``timesteps`` are agent steps: ``--frame-skip`` of them make a frame count.

If the directory also has ``evaluations.csv`` (the run's SB3 ``EvalCallback`` log:
``timesteps`` in agent steps over all envs, ``mean_return`` over ``episodes`` greedy
episodes), its latest greedy evaluation by each frame count is shown too.

Prints a Markdown table (training returns at each frame count, and the latest greedy
evaluation by then; one pair of rows per CSV given) and writes ``vs_<published dir
name>.png`` beside the first CSV.  With ``--target T`` it also prints the first frame
count at which each training return (and each greedy evaluation) reached ``T``.

For a run without frame skip (MuJoCo: ``--frame-skip 1``, each Monitor row an episode
and ``l`` its env steps) the table and figure count env steps and episodes instead:

    python benchmarks/published.py benchmarks/published/sb3-zoo-sac-halfcheetah \
        benchmarks/curves/halfcheetah-sac/hierl_seed0.csv --frame-skip 1 --every 50000
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
from pathlib import Path

from common import read_curve

ATARI_UNITS = ("frames", "games")
"""What the x axis counts and what one Monitor row is, for an Atari run (frame skip > 1)."""
STEP_UNITS = ("env steps", "episodes")
"""The same for a run without frame skip (MuJoCo: ``--frame-skip 1``)."""


def published_games(directory: Path) -> list[tuple[float, float]]:
    """(run frames when the game ended, its score) for every game in ``directory``, in order."""
    paths = sorted({*directory.glob("monitor_*.csv"), *directory.glob("*.monitor.csv")})
    if not paths:
        raise SystemExit(f"no monitor_<env>.csv or <env>.monitor.csv files in {directory}")
    games = []
    for path in paths:
        frames = 0
        with path.open() as f:
            reader = csv.DictReader(line for line in f if not line.startswith("#"))
            if not {"r", "l"} <= set(reader.fieldnames or ()):
                raise SystemExit(
                    f"{path}: columns {reader.fieldnames}; a Monitor file has 'r' and 'l'"
                )
            for row in reader:
                frames += int(row["l"])
                games.append((float(frames * len(paths)), float(row["r"])))
    return sorted(games)


def published_evaluations(directory: Path, frame_skip: int) -> list[dict[str, float]]:
    """The run's greedy evaluations from ``directory/evaluations.csv`` as rows with
    ``frames`` (its ``timesteps`` are agent steps) and ``evaluation_reward_mean``, the
    shape of ``our_curve``'s rows; empty if the file is absent."""
    path = directory / "evaluations.csv"
    if not path.exists():
        return []
    with path.open() as f:
        reader = csv.DictReader(f)
        if not {"timesteps", "mean_return"} <= set(reader.fieldnames or ()):
            raise SystemExit(
                f"{path}: columns {reader.fieldnames}; expected timesteps and mean_return"
            )
        return [
            {
                "frames": float(row["timesteps"]) * frame_skip,
                "evaluation_reward_mean": float(row["mean_return"]),
                "episodes": float(row.get("episodes") or "nan"),
            }
            for row in reader
        ]


def rolling_mean_at(games: list[tuple[float, float]], frames: float, window: int) -> float:
    """Mean score of the last ``window`` games ended by ``frames`` (NaN before the first)."""
    end = bisect.bisect_right(games, (frames, math.inf))
    recent = games[max(0, end - window) : end]
    return sum(score for _, score in recent) / len(recent) if recent else math.nan


def published_first_reaching(games: list[tuple[float, float]], target: float, window: int) -> float:
    """The run's frame count when the mean of its last ``window`` games (a full window)
    first reached ``target``; NaN if it never did."""
    for end in range(window, len(games) + 1):
        if sum(score for _, score in games[end - window : end]) / window >= target:
            return games[end - 1][0]
    return math.nan


def first_reaching(rows: list[dict[str, float]], key: str, target: float) -> float:
    """The frame count of our first row whose ``key`` reached ``target``; NaN if none."""
    return next((r["frames"] for r in rows if r[key] >= target), math.nan)


def our_curve(path: Path, frame_skip: int) -> list[dict[str, float]]:
    """The rows of a learning.py CSV with a ``frames`` column added."""
    rows = read_curve(path)
    if not rows:
        raise SystemExit(f"{path} has no rows")
    for row in rows:
        row["frames"] = row["timesteps"] * frame_skip
    return rows


def value_at(rows: list[dict[str, float]], frames: float, key: str, clip: bool = True) -> float:
    """``key`` in the last row at or before ``frames`` that has it (NaN: none, or, with
    ``clip``, the curve ends before ``frames``)."""
    if not rows or (clip and frames > rows[-1]["frames"]):
        return math.nan
    value = math.nan
    for row in rows:
        if row["frames"] > frames:
            break
        if not math.isnan(row[key]):
            value = row[key]
    return value


def table(
    games: list[tuple[float, float]],
    ours: dict[str, list[dict[str, float]]],
    points: list[float],
    window: int,
    name: str,
    units: tuple[str, str] = ATARI_UNITS,
    evaluations: list[dict[str, float]] | None = None,
) -> str:
    """The Markdown comparison at ``points`` (frame counts); ``ours`` by run label;
    ``evaluations``: the published run's greedy evaluations, if it has them."""
    x, episodes = units

    def row(label: str, values: list[float]) -> str:
        return (
            f"| {label} | "
            + " | ".join("-" if math.isnan(x) else f"{x:.1f}" for x in values)
            + " |"
        )

    lines = [
        f"| {x} | " + " | ".join(f"{p / 1e6:g}M" for p in points) + " |",
        "|---|" + "---|" * len(points),
        row(
            f"{name} training return (last {window} {episodes})",
            [rolling_mean_at(games, p, window) for p in points],
        ),
    ]
    if evaluations:
        lines.append(
            row(
                f"{name} greedy evaluation (latest, {evaluations[-1]['episodes']:.0f} {episodes})",
                [value_at(evaluations, p, "evaluation_reward_mean", clip=False) for p in points],
            )
        )
    for label, rows in ours.items():
        lines.append(
            row(
                f"{label} training return (last {window} {episodes})",
                [value_at(rows, p, "episode_reward_mean") for p in points],
            )
        )
        lines.append(
            row(
                f"{label} greedy evaluation (latest)",
                [value_at(rows, p, "evaluation_reward_mean") for p in points],
            )
        )
    return "\n".join(lines)


def plot(
    games: list[tuple[float, float]],
    ours: dict[str, list[dict[str, float]]],
    window: int,
    name: str,
    out: Path,
    units: tuple[str, str] = ATARI_UNITS,
    evaluations: list[dict[str, float]] | None = None,
) -> None:
    """Both training returns (and the greedy evaluations) against frames."""
    x, episodes = units
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(
        [f for f, _ in games],
        [rolling_mean_at(games, f, window) for f, _ in games],
        color="C1",
        label=f"{name}: training return (last {window} {episodes})",
    )
    if evaluations:
        ax.plot(
            [r["frames"] for r in evaluations],
            [r["evaluation_reward_mean"] for r in evaluations],
            "x",
            color="C1",
            markersize=3,
            label=f"{name}: greedy evaluation",
        )
    for k, (label, rows) in enumerate(ours.items()):
        color = "C0" if k == 0 else f"C{k + 1}"
        ax.plot(
            [r["frames"] for r in rows],
            [r["episode_reward_mean"] for r in rows],
            color=color,
            label=f"{label}: training return (last {window} {episodes})",
        )
        evals = [(r["frames"], r["evaluation_reward_mean"]) for r in rows]
        evals = [(f, v) for f, v in evals if not math.isnan(v)]
        if evals:  # a curve run without evaluation_interval has none
            ax.plot(
                *zip(*evals, strict=True),
                "o",
                color=color,
                markersize=3,
                label=f"{label}: greedy evaluation",
            )
    ax.set_xlabel(x)
    ax.set_ylabel(f"return (whole {episodes}, unclipped)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("published", type=Path, help="a directory of monitor_<env>.csv files")
    parser.add_argument("ours", type=Path, nargs="+", help="benchmarks/learning.py curve CSVs")
    parser.add_argument(
        "--frame-skip", type=int, default=4, help="frames per agent step (1: MuJoCo, env steps)"
    )
    parser.add_argument("--window", type=int, default=100, help="games per training return")
    parser.add_argument("--every", type=float, default=1e6, help="frames between table columns")
    parser.add_argument("--target", type=float, help="also print when each reached this return")
    args = parser.parse_args()
    games = published_games(args.published)
    evaluations = published_evaluations(args.published, args.frame_skip)
    ours = {
        f"{path.parent.name} {path.stem.replace('_', ' ')}": our_curve(path, args.frame_skip)
        for path in args.ours
    }
    end = min(games[-1][0], max(rows[-1]["frames"] for rows in ours.values()))
    points = [args.every * k for k in range(1, int(end // args.every) + 1)]
    name = args.published.name
    units = ATARI_UNITS if args.frame_skip > 1 else STEP_UNITS
    print(table(games, ours, points, args.window, name, units, evaluations))
    if args.target is not None:
        first = published_first_reaching(games, args.target, args.window)
        print(f"\nwhen each first reached {args.target:g} ({units[0]}):")
        print(f"  {name} training return: {first:,.0f}")
        if evaluations:
            reached = first_reaching(evaluations, "evaluation_reward_mean", args.target)
            print(f"  {name} greedy evaluation: {reached:,.0f}")
        for label, rows in ours.items():
            for key, what in (
                ("episode_reward_mean", "training return"),
                ("evaluation_reward_mean", "greedy evaluation"),
            ):
                print(f"  {label} {what}: {first_reaching(rows, key, args.target):,.0f}")
    out = args.ours[0].parent / f"vs_{name}.png"
    plot(games, ours, args.window, name, out, units, evaluations)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
