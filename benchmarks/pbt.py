"""PBT against a fixed random search: each trial's hyperparameter schedule beside its return.

    hierl tune examples/tune/pbt_ppo_hopper.yaml --storage-path DIR
    python benchmarks/pbt.py DIR --file examples/tune/pbt_ppo_hopper.yaml --eval-episodes 20

Reads the Tune results of a ``hierl tune`` file holding a PBT experiment and a fixed one
over the same space (``DIR/<experiment>/<trial>/result.json``: each row carries the config
the iteration trained with, so a PBT trial's rows are its schedule; ``pbt_global.txt``
names who copied whom), and writes under ``benchmarks/curves/<name>/``:

* ``trials.csv``: one row per trial and iteration (env steps, wall-clock, training and
  greedy evaluation returns, the searched hyperparameters);
* ``schedules.png``: one column per experiment, the returns on top and each searched
  hyperparameter below, one colour per trial (PBT exploits marked);
* ``summary.json``: each trial's final greedy evaluation return (the last evaluation in
  its results; with ``--eval-episodes N`` also N fresh greedy episodes of its last
  checkpoint), the best trial of each experiment, the verdict, the git commit;

then rewrites the ``<name>`` block of ``benchmarks/RESULTS.md`` from them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Any

from common import BENCH_DIR, RESULTS_MD, replace_results_block

from hierl.algorithms.evaluation import evaluates_at
from hierl.bench.report import git_info, machine_info
from hierl.tune.experiments import ExperimentSpec, load_experiments, searched_keys

CURVES_DIR = BENCH_DIR / "curves"
EVAL_KEY = "evaluation/episode_reward_mean"
BASE_FIELDS = [
    "experiment",
    "trial",
    "seed",
    "iteration",
    "timesteps",
    "time_total_s",
    "timestamp",
    "episode_reward_mean",
    "evaluation_reward_mean",
]


def _is_pbt(spec: ExperimentSpec) -> bool:
    return spec.scheduler.get("type") == "pbt"


def read_trials(exp_dir: Path, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each trial's rows (``BASE_FIELDS`` and ``keys``), by trial id, in iteration order.

    A trial's ``result.json`` is appended to across pauses and restores; a row repeated
    for an iteration (a restore from an earlier checkpoint) is replaced by the later one.
    An evaluation carried into a later row (``always_attach_evaluation_results``) is NaN
    there, as is a failed evaluation's (it carries the latest metrics too).
    """
    trials: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(exp_dir.glob("*/result.json")):
        by_iteration: dict[int, dict[str, Any]] = {}
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            config = r.get("config", {})
            # with always_attach_evaluation_results every row carries the latest
            # evaluation: only the iterations that evaluated count as evaluations
            fresh = not config.get("always_attach_evaluation_results") or (
                evaluates_at(r["training_iteration"], config.get("evaluation_interval") or 0)
                and r.get("evaluation/episodes", 0) > 0  # a failed one carries the last
            )
            row = {
                "experiment": exp_dir.name,
                "trial": r["trial_id"],
                "seed": config.get("seed"),
                "iteration": r["training_iteration"],
                "timesteps": r["timesteps_total"],
                "time_total_s": r["time_total_s"],
                "timestamp": r["timestamp"],
                "episode_reward_mean": r.get("episode_reward_mean", math.nan),
                "evaluation_reward_mean": r.get(EVAL_KEY, math.nan) if fresh else math.nan,
            }
            for key in keys:
                value: Any = config
                for part in key.split("/"):
                    value = value.get(part) if isinstance(value, dict) else None
                row[key] = value
            by_iteration[row["iteration"]] = row
        if by_iteration:
            rows = [by_iteration[i] for i in sorted(by_iteration)]
            trials[rows[0]["trial"]] = rows
    return trials


def read_exploits(exp_dir: Path) -> list[dict[str, Any]]:
    """PBT's exploits: ``{"trial", "donor", "iteration"}`` from ``pbt_global.txt``."""
    path = exp_dir / "pbt_global.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            target, donor, target_iter, _donor_iter, _old, _new = json.loads(line)
            out.append(
                {"trial": _tag_index(target), "donor": _tag_index(donor), "iteration": target_iter}
            )
    return out


def _tag_index(tag: str) -> int:
    """The trial index of a PBT experiment tag (``"3_clip_param=..."`` -> 3)."""
    return int(str(tag).split("_", 1)[0])


FRESH_EVAL_FILE = "fresh_evaluation.json"
"""Kept in each trial's directory: ``{checkpoint name: {episodes: return}}``, so that a
rerun evaluates only checkpoints it has not evaluated."""


def evaluate_checkpoints(exp_dir: Path, episodes: int, trial_ids: set[str]) -> dict[str, float]:
    """The last checkpoint of each trial of ``trial_ids`` playing ``episodes`` greedy
    episodes (the trial's own evaluation seed), by trial id."""
    from hierl.algorithms.trainer_base import BaseTrainer

    out = {}
    for trial_dir in sorted(p for p in exp_dir.iterdir() if p.is_dir()):
        checkpoints = sorted(trial_dir.glob("checkpoint_*"))
        result_file = trial_dir / "result.json"
        results = result_file.read_text().splitlines() if result_file.exists() else []
        if not checkpoints or not results:  # a trial not started yet
            continue
        trial_id = json.loads(results[0])["trial_id"]
        if trial_id not in trial_ids:
            continue
        cache_path = trial_dir / FRESH_EVAL_FILE
        cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
        cached = cache.get(checkpoints[-1].name, {}).get(str(episodes))
        if cached is None:
            trainer = BaseTrainer.from_checkpoint(
                checkpoints[-1], evaluation_num_episodes=episodes, evaluation_interval=1
            )
            try:
                cached = float(trainer.evaluation.run(trainer.local_evaluator)[EVAL_KEY])
            finally:
                trainer.stop()
            cache.setdefault(checkpoints[-1].name, {})[str(episodes)] = cached
            cache_path.write_text(json.dumps(cache, indent=2) + "\n")
        out[trial_id] = cached
    return out


def _final_eval(rows: list[dict[str, Any]]) -> float:
    evals = [
        r["evaluation_reward_mean"]
        for r in rows
        if r["evaluation_reward_mean"] == r["evaluation_reward_mean"]
    ]
    return evals[-1] if evals else math.nan


def plot(path: Path, experiments: dict[str, dict[str, Any]], keys: list[str]) -> None:
    """Returns on top, each searched hyperparameter below; one column per experiment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(experiments)
    fig, axes = plt.subplots(
        1 + len(keys),
        len(names),
        figsize=(6 * len(names), 2.2 * (1 + len(keys))),
        sharex=True,
        squeeze=False,
    )
    for col, name in enumerate(names):
        trials = experiments[name]["trials"]
        for i, (trial, rows) in enumerate(sorted(trials.items())):
            color = f"C{i}"
            steps = [r["timesteps"] for r in rows]
            ax = axes[0][col]
            ax.plot(
                steps,
                [r["episode_reward_mean"] for r in rows],
                color=color,
                alpha=0.35,
                linewidth=1,
            )
            evals = [
                (r["timesteps"], r["evaluation_reward_mean"])
                for r in rows
                if r["evaluation_reward_mean"] == r["evaluation_reward_mean"]
            ]
            if evals:
                ax.plot(
                    *zip(*evals, strict=True),
                    color=color,
                    marker="o",
                    markersize=3,
                    label=f"trial {trial[-1]} (seed {rows[0]['seed']})",
                )
            for row, key in enumerate(keys, start=1):
                # a row holds the config its iteration trained with: up to its steps
                axes[row][col].step(steps, [r[key] for r in rows], where="pre", color=color)
        for exploit in experiments[name]["exploits"]:
            ax = axes[0][col]
            ax.axvline(
                exploit["iteration"] * _steps_per_iteration(trials),
                color="grey",
                linewidth=0.5,
                linestyle=":",
            )
        marks = ", exploits (dotted)" if experiments[name]["exploits"] else ""
        axes[0][col].set_title(
            f"{name}: greedy evaluation (dots), training return (faint){marks}", fontsize=9
        )
        if trials:
            axes[0][col].legend(fontsize=7)
        axes[-1][col].set_xlabel("env steps of the trial")
        for row, key in enumerate(keys, start=1):
            axes[row][col].set_ylabel(key, fontsize=8)
            if key == "lr":
                axes[row][col].set_yscale("log")
    axes[0][0].set_ylabel("return")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _steps_per_iteration(trials: dict[str, list[dict[str, Any]]]) -> float:
    rows = next(iter(trials.values()))
    return rows[-1]["timesteps"] / rows[-1]["iteration"]


def summarize(
    storage: Path, file: Path, name: str, eval_episodes: int, curves_dir: Path = CURVES_DIR
) -> dict[str, Any]:
    """Read every experiment of ``file`` under ``storage``; write the CSV, PNG and summary
    to ``curves_dir/name``."""
    specs = load_experiments(file)
    out = curves_dir / name
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for spec in specs.values() for k in searched_keys(spec.config)})
    experiments: dict[str, dict[str, Any]] = {}
    for exp_name, spec in specs.items():
        exp_dir = storage / exp_name
        trials = read_trials(exp_dir, keys) if exp_dir.is_dir() else {}
        budget = spec.stop.get("timesteps_total")
        done = {
            t for t, rows in trials.items() if budget is None or rows[-1]["timesteps"] >= budget
        }
        fresh = evaluate_checkpoints(exp_dir, eval_episodes, done) if eval_episodes else {}
        starts = [rows[0]["timestamp"] - rows[0]["time_total_s"] for rows in trials.values()]
        ends = [r["timestamp"] for rows in trials.values() for r in rows]
        experiments[exp_name] = {
            "pbt": _is_pbt(spec),
            "budget": budget,
            "trials": trials,
            "exploits": read_exploits(exp_dir),
            "wall_s": max(ends) - min(starts) if trials else None,
            "final": {
                t: {
                    "seed": rows[-1]["seed"],
                    "timesteps": rows[-1]["timesteps"],
                    "finished": t in done,
                    "final_eval_return": _final_eval(rows),
                    "fresh_eval_return": fresh.get(t),
                    "final_config": {k: rows[-1][k] for k in keys},
                    "first_config": {k: rows[0][k] for k in keys},
                }
                for t, rows in trials.items()
            },
        }
    with (out / "trials.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, BASE_FIELDS + keys)
        writer.writeheader()
        for exp in experiments.values():
            for rows in exp["trials"].values():
                writer.writerows(rows)
    plot(out / "schedules.png", experiments, keys)
    score = "fresh_eval_return" if eval_episodes else "final_eval_return"
    best = {}
    for exp_name, exp in experiments.items():
        if exp["final"]:
            trial, final = max(exp["final"].items(), key=lambda kv: _rank(kv[1][score]))
            best[exp_name] = {"trial": trial, **final}
    pbt = [n for n, e in experiments.items() if e["pbt"]]
    fixed = [n for n, e in experiments.items() if not e["pbt"]]
    unfinished = {
        n: specs[n].num_samples - sum(f["finished"] for f in e["final"].values())
        for n, e in experiments.items()
    }
    summary = {
        "name": name,
        "file": str(file),
        "score": score,
        "eval_episodes": eval_episodes,
        "experiments": {
            n: {k: v for k, v in e.items() if k != "trials"} for n, e in experiments.items()
        },
        "best": best,
        "unfinished_trials": unfinished,
        "verdict": None,
        "git": git_info(),
        "machine": machine_info(),
    }
    if len(pbt) == 1 and len(fixed) == 1 and not any(unfinished.values()):
        # CRUCIAL: a verdict only at the same budget: every trial of both at its end
        holds = best[pbt[0]][score] > best[fixed[0]][score]
        summary["verdict"] = {"pbt": pbt[0], "fixed": fixed[0], "pbt_beats_fixed": holds}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _rank(value: float | None) -> float:
    """A return to rank trials by (none yet: last)."""
    return -math.inf if value is None or value != value else value


def _num(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.0f}"


def _fmt_config(config: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in config.items()
    )


def update_results_md(summary: dict[str, Any], command: str, results_md: Path = RESULTS_MD) -> None:
    """Replace the ``summary['name']`` block of ``results_md`` (added at the end if new)."""
    name, score = summary["name"], summary["score"]
    what = (
        f"{summary['eval_episodes']} fresh greedy episodes of each trial's last checkpoint"
        if summary["eval_episodes"]
        else "the last greedy evaluation in each trial's results"
    )
    lines = [
        f"<!-- begin {name} -->",
        f"### {name}: PBT against a fixed random search ({summary['file']})",
        "",
        f"`{command}` at commit `{str(summary['git'].get('commit', '?'))[:10]}`; final "
        f"return: {what}; schedules: `benchmarks/curves/{name}/schedules.png`, rows: "
        f"`trials.csv`.",
        "",
        "| experiment | trial | seed | env steps | final return | last in-run evaluation | "
        "starting config | final config |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for exp_name, exp in summary["experiments"].items():
        for trial, f in sorted(exp["final"].items()):
            steps = f"{f['timesteps']:,}" + ("" if f["finished"] else " (running)")
            lines.append(
                f"| {exp_name} | {trial} | {f['seed']} | {steps} | {_num(f[score])} | "
                f"{_num(f['final_eval_return'])} | {_fmt_config(f['first_config'])} | "
                f"{_fmt_config(f['final_config'])} |"
            )
    lines.append("")
    for exp_name, exp in summary["experiments"].items():
        wall = f"{exp['wall_s'] / 60:.1f} min wall-clock" if exp["wall_s"] else "not started"
        lines.append(
            f"- {exp_name}: {len(exp['final'])} trials, {wall}"
            + (f", {len(exp['exploits'])} exploits" if exp["pbt"] else "")
        )
    verdict = summary.get("verdict")
    unfinished = {n: k for n, k in summary["unfinished_trials"].items() if k}
    if unfinished:
        lines += [
            "",
            "**No verdict yet: not every trial has reached the budget** ("
            + ", ".join(f"{n}: {k} trial(s) to finish" for n, k in unfinished.items())
            + ").",
        ]
    elif verdict:
        p, f = summary["best"][verdict["pbt"]], summary["best"][verdict["fixed"]]
        beats = "beats" if verdict["pbt_beats_fixed"] else "does not beat"
        lines += [
            "",
            f"**Verdict: the best PBT trial {beats} the best fixed trial** "
            f"({p[score]:.0f}, trial {p['trial']}, against "
            f"{f[score]:.0f}, trial {f['trial']}, at the same budget).",
        ]
    lines.append(f"<!-- end {name} -->")
    replace_results_block(name, "\n".join(lines), results_md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("storage", type=Path, help="the --storage-path the file ran with")
    parser.add_argument(
        "--file", type=Path, default=Path("examples/tune/pbt_ppo_hopper.yaml"), help="its file"
    )
    parser.add_argument("--name", default="", help="curves/RESULTS name (default: file stem)")
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=0,
        help="also play N greedy episodes of each trial's last checkpoint (0: use the last "
        "in-run evaluation)",
    )
    args = parser.parse_args()
    name = args.name or args.file.stem.replace("_", "-")
    summary = summarize(args.storage.resolve(), args.file, name, args.eval_episodes)
    command = (
        f"python benchmarks/pbt.py STORAGE --file {args.file}"
        + (f" --name {args.name}" if args.name else "")
        + (f" --eval-episodes {args.eval_episodes}" if args.eval_episodes else "")
    )
    update_results_md(summary, command)
    print(json.dumps(summary["best"], indent=2, default=str))
    print(json.dumps(summary.get("verdict"), default=str))


if __name__ == "__main__":
    main()
