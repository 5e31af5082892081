"""``benchmarks/pbt.py``: Tune results of a PBT and a fixed experiment -> schedules, verdict."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support.benchmarks import import_benchmark

FILE = """\
p:
  run: PPO
  env: CartPole-v1
  num_samples: 2
  stop: {timesteps_total: 200}
  scheduler:
    type: pbt
    perturbation_interval: 1
    hyperparam_mutations: {lr: {loguniform: [0.0001, 0.01]}}
  config: &space
    lr: {loguniform: [0.0001, 0.01]}
f:
  run: PPO
  env: CartPole-v1
  num_samples: 2
  stop: {timesteps_total: 200}
  config: *space
"""


@pytest.fixture(scope="module")
def pbt():
    return import_benchmark("pbt")


def _row(trial: str, it: int, lr: float, ret: float, evaluation: float | None) -> dict:
    row = {
        "trial_id": trial,
        "training_iteration": it,
        "timesteps_total": 100 * it,
        "time_total_s": 2.0 * it,
        "timestamp": 1000 + 2 * it,
        "episode_reward_mean": ret,
        "config": {"lr": lr, "seed": int(trial[-1]), "env": "CartPole-v1"},
    }
    if evaluation is not None:  # as the trainer reports an evaluation
        row.update({"evaluation/episode_reward_mean": evaluation, "evaluation/episodes": 10})
    return row


def _trial(exp_dir: Path, name: str, rows: list[dict]) -> None:
    (exp_dir / name).mkdir(parents=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (exp_dir / name / "result.json").write_text(text)


def test_schedules_verdict_and_results_block(tmp_path, pbt):
    file = tmp_path / "exp.yaml"
    file.write_text(FILE)
    storage = tmp_path / "storage"
    # PBT: trial 1 copies trial 0 after iteration 1 and continues with a perturbed lr; its
    # iteration 2 was reported twice (paused, restored from an earlier checkpoint): the
    # later row counts
    _trial(
        storage / "p", "t0", [_row("a_00000", 1, 1e-3, 10, None), _row("a_00000", 2, 1e-3, 20, 50)]
    )
    _trial(
        storage / "p",
        "t1",
        [
            _row("a_00001", 1, 1e-4, 5, None),
            _row("a_00001", 2, 1.2e-3, 15, 30),
            _row("a_00001", 2, 1.2e-3, 25, 70),
        ],
    )
    (storage / "p" / "pbt_global.txt").write_text(
        json.dumps(["1_lr=0.0001", "0_lr=0.001", 1, 1, {}, {}]) + "\n"
    )
    _trial(
        storage / "f", "t0", [_row("b_00000", 1, 1e-3, 10, None), _row("b_00000", 2, 1e-3, 20, 60)]
    )
    _trial(storage / "f", "t1", [_row("b_00001", 1, 1e-4, 5, None), _row("b_00001", 2, 1e-4, 8, 9)])

    summary = pbt.summarize(storage, file, "demo", eval_episodes=0, curves_dir=tmp_path / "curves")
    out = tmp_path / "curves" / "demo"
    assert (out / "schedules.png").stat().st_size > 0
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 8  # 4 trials x 2 iterations, the repeated one once
    schedule = [float(r["lr"]) for r in rows if r["trial"] == "a_00001"]
    assert schedule == [1e-4, 1.2e-3]
    assert summary["experiments"]["p"]["exploits"] == [{"trial": 1, "donor": 0, "iteration": 1}]
    assert summary["best"]["p"]["trial"] == "a_00001"
    assert summary["best"]["p"]["final_eval_return"] == 70
    assert summary["best"]["f"]["trial"] == "b_00000"
    assert summary["verdict"] == {"pbt": "p", "fixed": "f", "pbt_beats_fixed": True}

    md = tmp_path / "RESULTS.md"
    md.write_text("# Learning results\n\nkept\n")
    for _ in range(2):  # rewriting replaces the block
        pbt.update_results_md(summary, "python benchmarks/pbt.py S", md)
    text = md.read_text()
    assert text.count("<!-- begin demo -->") == 1 and "kept" in text
    assert "**Verdict: the best PBT trial beats the best fixed trial** (70, trial a_00001" in text
    assert "| p | a_00001 | 1 | 200 | 70 | 70 | lr=0.0001 | lr=0.0012 |" in text


def test_no_verdict_before_every_trial_reaches_the_budget(tmp_path, pbt):
    file = tmp_path / "exp.yaml"
    file.write_text(FILE)
    storage = tmp_path / "storage"
    _trial(
        storage / "p", "t0", [_row("a_00000", 1, 1e-3, 10, None), _row("a_00000", 2, 1e-3, 20, 50)]
    )
    _trial(storage / "p", "t1", [_row("a_00001", 1, 1e-4, 5, None), _row("a_00001", 2, 1e-4, 8, 9)])
    md = tmp_path / "RESULTS.md"
    # the fixed experiment has not started: its two trials are missing
    summary = pbt.summarize(storage, file, "demo", eval_episodes=0, curves_dir=tmp_path / "c")
    assert summary["verdict"] is None and summary["unfinished_trials"] == {"p": 0, "f": 2}
    pbt.update_results_md(summary, "python benchmarks/pbt.py S", md)
    assert (
        "No verdict yet: not every trial has reached the budget** (f: 2 trial(s)" in md.read_text()
    )
    assert "- f: 0 trials, not started" in md.read_text()
    # one fixed trial still running (100 of 200 steps), with a higher return than PBT's
    _trial(storage / "f", "t0", [_row("b_00000", 1, 1e-3, 10, 90)])
    _trial(storage / "f", "t1", [_row("b_00001", 1, 1e-4, 5, None), _row("b_00001", 2, 1e-4, 8, 9)])
    summary = pbt.summarize(storage, file, "demo", eval_episodes=0, curves_dir=tmp_path / "c")
    assert summary["verdict"] is None and summary["unfinished_trials"] == {"p": 0, "f": 1}
    pbt.update_results_md(summary, "python benchmarks/pbt.py S", md)
    text = md.read_text()
    assert "| f | b_00000 | 0 | 100 (running) | 90 |" in text and "Verdict" not in text


def test_fresh_evaluation_of_last_checkpoints_is_cached(tmp_path, pbt, monkeypatch):
    from hierl.algorithms.registry import get_trainer_class
    from hierl.algorithms.trainer_base import BaseTrainer

    trial = tmp_path / "f" / "t0"
    _trial(tmp_path / "f", "t0", [_row("b_00000", 1, 1e-3, 10, None)])
    trainer = get_trainer_class("PG")(
        {"env": "CartPole-v1", "num_evaluators": 0, "train_batch_size": 100, "seed": 0}
    )
    try:
        trainer.train()
        trainer.save(trial / "checkpoint_000000")
    finally:
        trainer.stop()
    (tmp_path / "f" / "t1_pending").mkdir()  # Tune made its directory, nothing in it yet
    (first,) = pbt.evaluate_checkpoints(tmp_path / "f", 2, {"b_00000"}).values()
    assert first > 0
    assert pbt.evaluate_checkpoints(tmp_path / "f", 2, set()) == {}  # unfinished: skipped

    def no_rebuild(*args, **kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr(BaseTrainer, "from_checkpoint", staticmethod(no_rebuild))
    assert pbt.evaluate_checkpoints(tmp_path / "f", 2, {"b_00000"}) == {"b_00000": first}
    cache = json.loads((trial / pbt.FRESH_EVAL_FILE).read_text())
    assert cache == {"checkpoint_000000": {"2": first}}


def test_carried_evaluations_are_not_counted_as_evaluations(tmp_path, pbt):
    # always_attach_evaluation_results: iterations 1 and 3 carry earlier evaluations, and
    # iteration 4's evaluation failed (no episodes), so it carries iteration 2's too
    evaluated = [(1, None), (2, 5.0), (3, 5.0), (4, 5.0)]
    rows = [_row("t_0", it, 1e-3, 10.0 * it, ev) for it, ev in evaluated]
    rows[0]["evaluation/episode_reward_mean"] = float("nan")
    rows[3]["evaluation/episodes"] = 0
    for r in rows:
        r["config"].update(evaluation_interval=2, always_attach_evaluation_results=True)
    _trial(tmp_path / "exp", "t_0", rows)
    (trial,) = pbt.read_trials(tmp_path / "exp", ["lr"]).values()
    evals = [r["evaluation_reward_mean"] for r in trial]
    assert evals[1] == 5.0 and all(e != e for e in (evals[0], evals[2], evals[3]))
