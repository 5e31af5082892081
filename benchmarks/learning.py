"""Learning curves of a tuned example: hierl (and optionally Stable-Baselines3) over seeds.

    python benchmarks/learning.py examples/tuned/hopper-ppo.yaml --seeds 3 --peer sb3
    python benchmarks/learning.py examples/tuned/pong-ppo.yaml --seeds 1 --resume --target 18

Runs the file's (single) experiment for each seed until ``--budget`` env steps (default:
its ``stop.timesteps_total``), checkpointing every ``checkpoint_freq`` iterations;
``--resume`` continues each seed from its last checkpoint (kept in the gitignored
``benchmarks/results/learning/``; restore is exact where the env can be snapshotted, as
classic-control and Atari envs can: a run cut into chunks gives the same curve as one
run) and keeps a finished curve, with or without its checkpoint.  ``--peer sb3`` runs
SB3's PPO, SAC or TD3 with the same hyperparameters beside it, in the same process, one
after the other, checkpointed and resumed the same way (SB3's resume is inexact: its
episode in progress restarts).  ``--target R`` also reports, per seed, the env steps
and wall-clock of the first evaluation of at least ``R``; with ``--stop-at-target`` each
seed's run ends there (time-to-target comparisons).

Writes, under ``benchmarks/curves/<name>/``: one CSV per implementation and
seed (env steps, wall-clock seconds, training and greedy evaluation returns; for Ape-X,
the training return is the last rung's of the epsilon ladder, ``training_return``), a PNG of the
evaluation curves, and ``summary.json`` with the git commit; then rewrites the
experiment's table in ``benchmarks/RESULTS.md`` from those files (each seed's last
evaluation and the mean of its evaluations over the last sixth of the budget; with
``--every STEPS``, also each seed's latest evaluation at every STEPS env steps and the
medians), so a reader can regenerate it with the same command.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import BENCH_DIR, RESULTS_DIR, RESULTS_MD, read_curve, replace_results_block

from hierl import get_trainer_class
from hierl.bench.report import git_info, machine_info
from hierl.files import atomic_write
from hierl.tune.experiments import ExperimentSpec, load_experiments

FIELDS = ["timesteps", "wall_s", "episode_reward_mean", "evaluation_reward_mean"]
CURVES_DIR = BENCH_DIR / "curves"
"""Learning curves are kept in the repository (CSV + PNG per experiment), unlike results/."""
TAIL = 1 / 6
"""The share of the budget at its end whose evaluations a seed's tail mean averages (the
last 50k of 300k steps): one 5-episode evaluation is noisy, their mean less so."""


def _checkpoint_dir(out: Path, name: str) -> Path:
    """Where a curve's checkpoint lives: ``benchmarks/results/learning/``, not the repo."""
    return RESULTS_DIR / "learning" / out.name / name


def _checkpoint_freq(spec: ExperimentSpec) -> int:
    """Iterations between checkpoints: the file's ``checkpoint_freq``, else 10."""
    return spec.checkpoint_freq or 10


def _write_csv(path: Path, rows: list[dict[str, float]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)  # atomic: a cut-off run never leaves half a file


def training_return(result: dict[str, Any]) -> float:
    """A result's training return (the mean of the last 100 episodes): the trainer's
    ``episode_reward_mean``, or under Ape-X's epsilon ladder the last rung's (the
    evaluator nearest greedy; the pooled mean mixes in play at epsilon 0.4)."""
    rungs = [k for k in result if k.startswith("rung_") and k.endswith("/episode_reward_mean")]
    if not rungs:
        return result["episode_reward_mean"]
    last = max(rungs, key=lambda k: int(k[len("rung_") : -len("/episode_reward_mean")]))
    return result[last]


def run_hierl(
    spec: ExperimentSpec,
    seed: int,
    budget: int,
    out: Path,
    resume: bool,
    stop_at: float | None = None,
) -> Path:
    """Train one seed to ``budget`` env steps (or until a greedy evaluation reaches
    ``stop_at``); the CSV's path."""
    csv_path = out / f"hierl_seed{seed}.csv"
    ckpt = _checkpoint_dir(out, f"checkpoint_seed{seed}")
    if resume and csv_path.exists():
        # A finished curve is kept without its checkpoint (gone with another machine, or
        # never copied): summarising more seeds must not rerun the finished ones.
        rows = read_curve(csv_path)
        if _finished(rows, budget, stop_at):
            print(f"  seed {seed}: finished at {int(rows[-1]['timesteps'])} env steps", flush=True)
            return csv_path
    trainer = get_trainer_class(spec.run)({**spec.config, "env": spec.env, "seed": seed})
    rows = []
    if resume and ckpt.exists():
        trainer.restore(ckpt)
        done = trainer.timesteps_total
        rows = [r for r in read_curve(csv_path) if r["timesteps"] <= done]
        print(f"  seed {seed}: resumed at {done} env steps", flush=True)
    elif resume and csv_path.exists():
        print(f"  seed {seed}: no checkpoint at {ckpt}; its unfinished curve is rerun", flush=True)
    finished = _finished(rows, budget, stop_at)
    try:
        while not finished:
            result = trainer.train()
            rows.append(
                {
                    "timesteps": result["timesteps_total"],
                    "wall_s": result["time_total_s"],
                    "episode_reward_mean": training_return(result),
                    "evaluation_reward_mean": result.get(
                        "evaluation/episode_reward_mean", float("nan")
                    ),
                }
            )
            if "evaluation/episode_reward_mean" in result:
                print(
                    f"  hierl seed {seed}: {int(result['timesteps_total']):>9,} steps "
                    f"{result['time_total_s']:7.0f} s  "
                    f"eval {rows[-1]['evaluation_reward_mean']:8.1f}",
                    flush=True,
                )
            finished = _finished(rows[-1:], budget, stop_at)  # the new row decides
            # Every iteration's row is on disk at once (a run cut off between checkpoints
            # still shows how far it got); --resume keeps the rows up to its checkpoint.
            _write_csv(csv_path, rows)
            if trainer.iteration % _checkpoint_freq(spec) == 0 or finished:
                trainer.save(ckpt)
    finally:
        trainer.stop()
    return csv_path


def _finished(rows: list[dict[str, float]], budget: int, stop_at: float | None = None) -> bool:
    """Whether a curve is done: it reached ``budget`` env steps (or the ``stop_at`` return)."""
    return bool(rows) and (rows[-1]["timesteps"] >= budget or _reached(rows, stop_at))


def _reached(rows: list[dict[str, float]], target: float | None) -> bool:
    return target is not None and _first_reaching(rows, target) is not None


def make_sb3_ppo(spec: ExperimentSpec, seed: int) -> tuple[Any, Any, Any]:
    """SB3's PPO with the experiment's hyperparameters (MuJoCo-style MLP configs): the
    model, its training env and an evaluation env (both VecNormalize'd like hierl's
    MeanStdFilter when the experiment sets it; the evaluation one frozen)."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    c = spec.config
    n_envs = int(c.get("num_envs_per_evaluator", 1))
    norm = c.get("observation_filter") == "MeanStdFilter"

    def venv(k: int) -> VecNormalize | DummyVecEnv:
        v = DummyVecEnv([lambda: gym.make(spec.env) for _ in range(k)])
        return VecNormalize(v, norm_obs=True, norm_reward=False) if norm else v

    env, eval_env = venv(n_envs), venv(1)
    if norm:
        eval_env.training = False
    lr0 = float(c.get("lr", 3e-4))
    model_cfg = c.get("model", {})
    hiddens = list(model_cfg.get("hiddens", [64, 64]))
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[model_cfg.get("activation", "tanh")]
    model = PPO(
        "MlpPolicy",
        env,
        learning_rate=(lambda f: f * lr0) if c.get("lr_schedule") else lr0,
        n_steps=int(c["rollout_fragment_length"]),
        batch_size=int(c["sgd_minibatch_size"]),
        n_epochs=int(c["num_sgd_iter"]),
        gamma=float(c.get("gamma", 0.99)),
        gae_lambda=float(c.get("lambda_", 0.95)),
        clip_range=float(c.get("clip_param", 0.2)),
        ent_coef=float(c.get("entropy_coeff", 0.0)),
        vf_coef=float(c.get("vf_loss_coeff", 0.5)),
        max_grad_norm=float(c.get("grad_clip", 0.5)),
        policy_kwargs={"net_arch": {"pi": hiddens, "vf": hiddens}, "activation_fn": act},
        seed=seed,
        device="cpu",
    )
    return model, env, eval_env


def make_sb3_off_policy(spec: ExperimentSpec, seed: int) -> tuple[Any, Any, Any]:
    """SB3's SAC or TD3 with the experiment's settings as hierl resolves them (its
    config class's defaults where the file sets none): one env, one gradient step per
    env step, uniformly random actions for the first ``learning_starts`` steps."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv

    cfg = get_trainer_class(spec.run).config_class.from_dict({**spec.config, "env": spec.env})
    replay = cfg.optimizer_config
    if replay.replay_ratio != replay.train_batch_size or cfg.rollout_fragment_length != 1:
        raise SystemExit("--peer sb3 for SAC/TD3 needs one update per env step")
    env, eval_env = (DummyVecEnv([lambda: gym.make(spec.env)]) for _ in range(2))
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[cfg.model.activation]
    common = {
        "buffer_size": replay.buffer_size,
        "batch_size": replay.train_batch_size,
        "learning_starts": replay.learning_starts,
        "tau": cfg.tau,
        "gamma": cfg.gamma,
        "train_freq": 1,
        "gradient_steps": 1,
        "policy_kwargs": {"net_arch": list(cfg.model.hiddens), "activation_fn": act},
        "seed": seed,
        "device": "cpu",
    }
    if spec.run == "SAC":
        ent_coef = "auto_" + repr(cfg.initial_alpha) if cfg.learn_alpha else cfg.initial_alpha
        target = "auto" if cfg.target_entropy is None else cfg.target_entropy
        model = SAC(
            "MlpPolicy",
            env,
            learning_rate=cfg.lr,
            ent_coef=ent_coef,
            target_entropy=target,
            **common,
        )
    else:
        if cfg.actor_lr != cfg.critic_lr:
            raise SystemExit("--peer sb3 for TD3 needs actor_lr == critic_lr (SB3 has one)")
        dim = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(dim), cfg.exploration_noise * np.ones(dim))
        model = TD3(
            "MlpPolicy",
            env,
            learning_rate=cfg.actor_lr,
            action_noise=noise,
            policy_delay=cfg.policy_delay,
            target_policy_noise=cfg.target_noise,
            target_noise_clip=cfg.target_noise_clip,
            **common,
        )
    return model, env, eval_env


SB3_PEERS = {"PPO": make_sb3_ppo, "SAC": make_sb3_off_policy, "TD3": make_sb3_off_policy}
"""The algorithms ``--peer sb3`` runs, and their builders."""


def save_sb3(ckpt: Path, model: Any, env: Any, timesteps: int, wall_s: float) -> None:
    """SB3's model, its replay buffer (off-policy) and its VecNormalize statistics (PPO
    with a filter) under ``ckpt``, named by ``timesteps``; ``progress.json``, written
    last and atomically, names the complete set, so a run cut mid-save resumes from the
    set before.  SB3's own formats (pickle inside): load only what this script wrote."""
    from stable_baselines3.common.vec_env import VecNormalize

    ckpt.mkdir(parents=True, exist_ok=True)
    tag = f"{timesteps:012d}"
    model.save(ckpt / f"model_{tag}.zip")
    if getattr(model, "replay_buffer", None) is not None:
        model.save_replay_buffer(ckpt / f"buffer_{tag}.pkl")
    if isinstance(env, VecNormalize):
        env.save(str(ckpt / f"vecnormalize_{tag}.pkl"))
    progress = {"tag": tag, "timesteps": timesteps, "wall_s": wall_s}
    atomic_write(ckpt / "progress.json", lambda p: p.write_text(json.dumps(progress)))
    for f in ckpt.iterdir():
        if f.name != "progress.json" and tag not in f.name:
            f.unlink()


def load_sb3(ckpt: Path, spec: ExperimentSpec, seed: int) -> tuple[Any, Any, Any, dict]:
    """The peer as ``save_sb3`` left it under ``ckpt``: (model, env, eval_env, progress).
    The episode in progress then is abandoned (the env restarts), as hierl's MuJoCo
    resumes do, and the random streams are reseeded from ``seed`` and the step count."""
    from stable_baselines3.common.vec_env import VecNormalize

    progress = json.loads((ckpt / "progress.json").read_text())
    tag = progress["tag"]
    model, env, eval_env = SB3_PEERS[spec.run](spec, seed)
    if isinstance(env, VecNormalize):
        env = VecNormalize.load(str(ckpt / f"vecnormalize_{tag}.pkl"), env.venv)
    model = type(model).load(ckpt / f"model_{tag}.zip", env=env, device="cpu")
    if (ckpt / f"buffer_{tag}.pkl").exists():
        model.load_replay_buffer(ckpt / f"buffer_{tag}.pkl")
    model._last_obs = None  # learn() resets the env instead of stepping a stale episode
    model.set_random_seed(seed + int(progress["timesteps"]))
    return model, env, eval_env, progress


def run_sb3(spec: ExperimentSpec, seed: int, budget: int, out: Path, resume: bool = False) -> Path:
    """SB3's peer of the experiment (``SB3_PEERS``) to ``budget`` steps, evaluated as
    hierl is: every ``evaluation_interval`` iterations' worth of env steps, and
    checkpointed as hierl is (``save_sb3``, every ``checkpoint_freq`` iterations' worth).
    With ``resume`` a finished CSV is kept and an unfinished one goes on from its
    checkpoint (or from scratch without one)."""
    if spec.run not in SB3_PEERS:
        raise SystemExit(f"--peer sb3 runs {', '.join(SB3_PEERS)}, not {spec.run}")
    csv_path = out / f"sb3_seed{seed}.csv"
    ckpt = _checkpoint_dir(out, f"sb3_checkpoint_seed{seed}")
    if resume and csv_path.exists():
        rows = read_curve(csv_path)
        if _finished(rows, budget):
            print(f"  sb3 seed {seed}: finished at {int(rows[-1]['timesteps'])} env steps")
            return csv_path
    rows, done, wall0 = [], 0, 0.0
    if resume and (ckpt / "progress.json").exists():
        model, env, eval_env, progress = load_sb3(ckpt, spec, seed)
        done, wall0 = int(progress["timesteps"]), float(progress["wall_s"])
        rows = [r for r in read_curve(csv_path) if r["timesteps"] <= done]
        print(f"  sb3 seed {seed}: resumed at {done} env steps", flush=True)
    else:
        model, env, eval_env = SB3_PEERS[spec.run](spec, seed)
    import torch  # after the resume check and the peer: a kept curve needs no SB3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize, sync_envs_normalization

    c = spec.config
    n_envs = env.num_envs
    norm = isinstance(env, VecNormalize)
    if spec.run == "PPO":
        per_iteration = int(c["train_batch_size"])
    else:
        cls = get_trainer_class(spec.run).config_class
        per_iteration = cls.from_dict({**c, "env": spec.env}).timesteps_per_iteration
    every = int(c.get("evaluation_interval", 10)) * per_iteration
    save_every = _checkpoint_freq(spec) * per_iteration
    episodes = int(c.get("evaluation_num_episodes", 5))
    start = time.perf_counter() - wall0

    class EvaluateAndSave(BaseCallback):
        next_save = (done // save_every + 1) * save_every

        def _on_step(self) -> bool:
            if self.num_timesteps % every < n_envs:
                if norm:
                    sync_envs_normalization(env, eval_env)
                mean, _ = evaluate_policy(model, eval_env, episodes, deterministic=True)
                rows.append(
                    {
                        "timesteps": self.num_timesteps,
                        "wall_s": time.perf_counter() - start,
                        "episode_reward_mean": float("nan"),
                        "evaluation_reward_mean": float(mean),
                    }
                )
                print(
                    f"  sb3 seed {seed}: {self.num_timesteps:>9,} steps "
                    f"{rows[-1]['wall_s']:7.0f} s  eval {mean:8.1f}",
                    flush=True,
                )
                _write_csv(csv_path, rows)  # a run cut off still shows how far it got
            return True

        def _on_rollout_start(self) -> None:
            # between a finished update and the next sample: nothing half-learned is lost
            if self.num_timesteps >= self.next_save:
                save_sb3(ckpt, model, env, self.num_timesteps, time.perf_counter() - start)
                self.next_save += save_every

    torch.set_num_threads(1)
    model.learn(
        total_timesteps=budget - done, callback=EvaluateAndSave(), reset_num_timesteps=not done
    )
    _write_csv(csv_path, rows)
    return csv_path


def _final(rows: list[dict[str, float]]) -> tuple[float, float, float]:
    """(last evaluation return, env steps and wall seconds at the end)."""
    evals = [
        r["evaluation_reward_mean"]
        for r in rows
        if r["evaluation_reward_mean"] == r["evaluation_reward_mean"]
    ]
    return (evals[-1] if evals else float("nan")), rows[-1]["timesteps"], rows[-1]["wall_s"]


def _tail_mean(rows: list[dict[str, float]], budget: int) -> float:
    """The mean of the evaluations at env steps >= (1 - ``TAIL``) x ``budget`` (NaN: none)."""
    tail = [
        r["evaluation_reward_mean"]
        for r in rows
        if r["timesteps"] >= (1 - TAIL) * budget
        and r["evaluation_reward_mean"] == r["evaluation_reward_mean"]
    ]
    return float(np.mean(tail)) if tail else float("nan")


def _first_reaching(rows: list[dict[str, float]], target: float) -> dict[str, float] | None:
    """The env steps and wall seconds of the first evaluation >= ``target`` (None: none)."""
    for r in rows:
        if r["evaluation_reward_mean"] >= target:  # NaN (no evaluation) compares False
            return {"timesteps": r["timesteps"], "wall_s": r["wall_s"]}
    return None


def _columns(budget: int, every: int) -> list[int]:
    """The env steps of the ``--every`` table: ``every``, ``2 * every``, ... up to ``budget``."""
    return list(range(every, budget + 1, every))


def _latest_evaluations(rows: list[dict[str, float]], columns: list[int]) -> list[float]:
    """Per column, the latest evaluation at or before its env steps (NaN: none yet, or the
    run has not reached the column)."""
    out = []
    for column in columns:
        evals = [
            r["evaluation_reward_mean"]
            for r in rows
            if r["timesteps"] <= column
            and r["evaluation_reward_mean"] == r["evaluation_reward_mean"]
        ]
        reached = bool(rows) and rows[-1]["timesteps"] >= column
        out.append(evals[-1] if evals and reached else float("nan"))
    return out


def summarize(
    name: str,
    out: Path,
    spec: ExperimentSpec,
    budget: int,
    target: float | None = None,
    every: int | None = None,
) -> dict[str, Any]:
    """Write summary.json and the PNG from every CSV under ``out``; the summary.

    ``every``: each run also records its latest evaluation at every ``every`` env steps
    (``evaluations_every``), the rows of ``--every``'s table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs: dict[str, list[dict[str, Any]]] = {}
    fig, ax = plt.subplots(figsize=(7, 4))
    for path in sorted(out.glob("*_seed*.csv")):
        impl, seed = path.stem.split("_seed")
        rows = read_curve(path)
        if not rows:
            continue
        ret, steps, wall = _final(rows)
        run = {
            "seed": int(seed),
            "final_eval_return": ret,
            "tail_eval_return": _tail_mean(rows, budget),
            "timesteps": steps,
            "wall_s": wall,
        }
        if target is not None:
            run["reached_target"] = _first_reaching(rows, target)
        if every is not None:
            run["evaluations_every"] = _latest_evaluations(rows, _columns(budget, every))
        runs.setdefault(impl, []).append(run)
        pts = [
            (r["timesteps"], r["evaluation_reward_mean"])
            for r in rows
            if r["evaluation_reward_mean"] == r["evaluation_reward_mean"]
        ]
        if pts:
            ax.plot(
                *zip(*pts, strict=True),
                label=f"{impl} seed {seed}",
                color="C0" if impl == "hierl" else "C1",
                alpha=0.8,
            )
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title(f"{name}: {spec.run} on {spec.env} (commit {git_info().get('commit', '?')[:8]})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=100)
    plt.close(fig)
    summary = {
        "experiment": name,
        "run": spec.run,
        "env": spec.env,
        "budget": budget,
        "target": target,
        "every": every,
        "git": git_info(),
        "machine": machine_info(),
        "runs": runs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def update_results_md(name: str, summary: dict[str, Any], command: str) -> None:
    """Replace this experiment's block in RESULTS.md (added at the end if new)."""
    target = summary.get("target")
    lines = [
        f"<!-- begin {name} -->",
        f"### {name}: {summary['run']} on {summary['env']}",
        "",
        f"`{command}` at commit `{str(summary['git'].get('commit', '?'))[:10]}`, "
        f"budget {summary['budget']:,} env steps; curve: "
        f"`benchmarks/curves/{name}/curve.png`. Tail mean: the mean of a seed's "
        f"evaluations from {(1 - TAIL) * summary['budget']:,.0f} env steps on.",
        "",
        "| implementation | seeds | env steps | median final evaluation return | per seed "
        "| median tail mean | per seed | median wall-clock |"
        + (f" first evaluation >= {target:g} |" if target is not None else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if target is not None else ""),
    ]
    for impl, runs in summary["runs"].items():
        rets = [r["final_eval_return"] for r in runs]
        tails = [r["tail_eval_return"] for r in runs]
        row = (
            f"| {impl} | {len(runs)} | {int(statistics.median(r['timesteps'] for r in runs)):,} | "
            f"{statistics.median(rets):.1f} | {', '.join(f'{x:.0f}' for x in rets)} | "
            f"{statistics.median(tails):.1f} | {', '.join(f'{x:.0f}' for x in tails)} | "
            f"{statistics.median(r['wall_s'] for r in runs) / 60:.1f} min |"
        )
        if target is not None:
            reached = [r["reached_target"] for r in runs]
            row += (
                " "
                + ", ".join(
                    f"{int(x['timesteps']):,} steps, {x['wall_s'] / 60:.0f} min"
                    if x
                    else "not reached"
                    for x in reached
                )
                + " |"
            )
        lines.append(row)
    if summary.get("every"):
        lines += ["", *_evaluations_table(summary)]
    lines.append(f"<!-- end {name} -->")
    replace_results_block(name, "\n".join(lines))


def _evaluations_table(summary: dict[str, Any]) -> list[str]:
    """``--every``'s table: each seed's latest greedy evaluation at every ``every`` env
    steps, then each implementation's median over the seeds that reached the column."""

    def cell(value: float) -> str:
        return f"{value:,.0f}" if value == value else ""

    columns = _columns(summary["budget"], summary["every"])
    labels = [f"{c // 1000:,}k" if c % 1000 == 0 else f"{c:,}" for c in columns]
    lines = [
        "Greedy evaluation return, each seed's latest at or before each column's env steps:",
        "",
        "| env steps | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(columns),
    ]
    medians = []
    for impl, runs in summary["runs"].items():
        for run in runs:
            values = run["evaluations_every"]
            lines.append(f"| {impl} seed {run['seed']} | " + " | ".join(map(cell, values)) + " |")
        per_column = zip(*(run["evaluations_every"] for run in runs), strict=True)
        reached = [[v for v in column if v == v] for column in per_column]
        medians.append(
            f"| **{impl} median** | "
            + " | ".join(cell(statistics.median(v)) if v else "" for v in reached)
            + " |"
        )
    return lines + medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a tuned example (examples/tuned/*.yaml)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1")
    parser.add_argument("--budget", type=int, default=0, help="env steps (0: the file's stop)")
    parser.add_argument("--peer", choices=["sb3"], help="also run this library")
    parser.add_argument("--resume", action="store_true", help="continue from checkpoints")
    parser.add_argument(
        "--only-seed",
        type=int,
        help="run this one of the seeds and write no summary (seeds in parallel processes; "
        "then summarize with --seeds N --resume)",
    )
    parser.add_argument(
        "--target", type=float, help="also report when evaluation first reached this return"
    )
    parser.add_argument(
        "--every",
        type=int,
        help="also tabulate each seed's latest evaluation at every EVERY env steps",
    )
    parser.add_argument(
        "--stop-at-target",
        action="store_true",
        help="stop each seed's run at its first evaluation of at least --target",
    )
    args = parser.parse_args()
    if args.stop_at_target and args.target is None:
        parser.error("--stop-at-target needs --target")
    if args.every is not None and args.every < 1:
        parser.error(f"--every must be >= 1 env step, got {args.every}")
    experiments = load_experiments(args.file)
    if len(experiments) != 1:
        raise SystemExit(f"{args.file} has {len(experiments)} experiments; expected one")
    ((name, spec),) = experiments.items()
    budget = args.budget or int(spec.stop.get("timesteps_total", 0))
    if budget <= 0:
        raise SystemExit("no budget: pass --budget STEPS or set stop.timesteps_total")
    out = CURVES_DIR / name
    out.mkdir(parents=True, exist_ok=True)
    stop_at = args.target if args.stop_at_target else None

    def run_seed(seed: int) -> None:
        print(f"{name}: hierl seed {seed}", flush=True)
        run_hierl(spec, seed, budget, out, args.resume, stop_at)
        if args.peer == "sb3":
            print(f"{name}: sb3 seed {seed}", flush=True)
            run_sb3(spec, seed, budget, out, args.resume)

    if args.only_seed is not None:
        if not 0 <= args.only_seed < args.seeds:
            parser.error(f"--only-seed {args.only_seed} is not one of seeds 0..{args.seeds - 1}")
        run_seed(args.only_seed)
        return
    for seed in range(args.seeds):
        run_seed(seed)
    summary = summarize(name, out, spec, budget, args.target, args.every)
    command = " ".join(
        ["python benchmarks/learning.py", args.file, f"--seeds {args.seeds}"]
        + ([f"--budget {args.budget}"] if args.budget else [])
        + ([f"--peer {args.peer}"] if args.peer else [])
        + ([f"--target {args.target:g}"] if args.target is not None else [])
        + (["--stop-at-target"] if args.stop_at_target else [])
        + ([f"--every {args.every}"] if args.every is not None else [])
    )
    update_results_md(name, summary, command)
    print(f"wrote {out} and {RESULTS_MD}")


if __name__ == "__main__":
    main()
