"""``benchmarks/learning.py``: a run cut off between checkpoints keeps its curve on disk,
and ``--resume`` goes on from the checkpoint, not from the last row."""

from __future__ import annotations

import pytest

from hierl.algorithms.registry import get_trainer_class
from hierl.tune.experiments import ExperimentSpec


@pytest.mark.timeout(120)
def test_a_run_cut_between_checkpoints_keeps_every_row_and_resumes_at_its_checkpoint(
    learning, tmp_path, monkeypatch
):
    config = {
        "num_evaluators": 0,
        "rollout_fragment_length": 50,
        "train_batch_size": 100,
        "model": {"hiddens": [8]},
    }
    spec = ExperimentSpec(run="PG", env="CartPole-v1", config=config, checkpoint_freq=2)
    out = tmp_path / "curves"
    out.mkdir()
    trainer_class = get_trainer_class("PG")

    class CutAtThirdIteration(trainer_class):
        def train(self):
            if self.iteration == 3:
                raise KeyboardInterrupt  # the session ends during the 4th iteration
            return super().train()

    monkeypatch.setattr(learning, "get_trainer_class", lambda name: CutAtThirdIteration)
    with pytest.raises(KeyboardInterrupt):
        learning.run_hierl(spec, 0, 10_000, out, resume=False)
    rows = learning.read_curve(out / "hierl_seed0.csv")
    step = rows[0]["timesteps"]  # env steps per iteration
    assert [r["timesteps"] for r in rows] == [step, 2 * step, 3 * step]  # 3rd: past the save

    monkeypatch.setattr(learning, "get_trainer_class", get_trainer_class)
    learning.run_hierl(spec, 0, int(4 * step), out, resume=True)
    resumed = learning.read_curve(out / "hierl_seed0.csv")
    assert [r["timesteps"] for r in resumed] == [step, 2 * step, 3 * step, 4 * step]
    # the first two kept as written; the 3rd retrained from iteration 2's checkpoint
    assert [r["wall_s"] for r in resumed[:2]] == [r["wall_s"] for r in rows[:2]]
    assert resumed[2]["wall_s"] != rows[2]["wall_s"]


def test_resume_keeps_a_finished_hierl_curve_whose_checkpoint_is_gone(
    learning, tmp_path, monkeypatch
):
    spec = ExperimentSpec(run="PG", env="CartPole-v1", config={})
    built = []

    def trainer_class(config):
        built.append(config["seed"])
        raise RuntimeError("built")  # stands in for a (slow) training run

    monkeypatch.setattr(learning, "get_trainer_class", lambda name: trainer_class)
    monkeypatch.setattr(learning, "RESULTS_DIR", tmp_path / "no-checkpoints")
    learning._write_csv(tmp_path / "hierl_seed0.csv", _rows(500, 1000))
    assert learning.run_hierl(spec, 0, 1000, tmp_path, resume=True) == tmp_path / "hierl_seed0.csv"
    assert built == []
    with pytest.raises(RuntimeError, match="built"):  # short of the budget: run from scratch
        learning.run_hierl(spec, 0, 1500, tmp_path, resume=True)
    assert built == [0]


def _rows(*timesteps: int) -> list[dict[str, float]]:
    return [
        {"timesteps": t, "wall_s": 1.0, "episode_reward_mean": 0.0, "evaluation_reward_mean": 0.0}
        for t in timesteps
    ]


def test_resume_keeps_a_finished_sb3_curve_and_reruns_an_unfinished_one(
    learning, tmp_path, monkeypatch
):
    spec = ExperimentSpec(run="TD3", env="Pendulum-v1", config={})
    built = []

    def peer(spec, seed):
        built.append(seed)
        raise RuntimeError("built")  # stands in for SB3's (slow) run

    monkeypatch.setitem(learning.SB3_PEERS, "TD3", peer)
    learning._write_csv(tmp_path / "sb3_seed0.csv", _rows(500, 1000))
    assert learning.run_sb3(spec, 0, 1000, tmp_path, resume=True) == tmp_path / "sb3_seed0.csv"
    assert built == []
    with pytest.raises(RuntimeError, match="built"):  # short of the budget: run again
        learning.run_sb3(spec, 0, 1500, tmp_path, resume=True)
    with pytest.raises(RuntimeError, match="built"):  # without --resume: always run
        learning.run_sb3(spec, 0, 1000, tmp_path, resume=False)
    assert built == [0, 0]


@pytest.mark.timeout(300)
def test_an_sb3_run_resumes_from_its_checkpoint_with_its_replay_buffer(
    learning, tmp_path, monkeypatch
):
    pytest.importorskip("stable_baselines3")  # the bench extra
    monkeypatch.setattr(learning, "RESULTS_DIR", tmp_path / "results")
    config = {
        "timesteps_per_iteration": 100,
        "evaluation_interval": 1,
        "evaluation_num_episodes": 1,
        "optimizer_config": {"learning_starts": 100, "buffer_size": 1000},
        "model": {"hiddens": [8]},
    }
    spec = ExperimentSpec(run="TD3", env="Pendulum-v1", config=config, checkpoint_freq=2)
    out = tmp_path / "curves"
    out.mkdir()
    ckpt = tmp_path / "results" / "learning" / "curves" / "sb3_checkpoint_seed0"

    learning.run_sb3(spec, 0, 300, out)  # evaluated every 100 steps, saved every 200
    rows = learning.read_curve(out / "sb3_seed0.csv")
    assert [r["timesteps"] for r in rows] == [100, 200, 300]
    model, _, _, progress = learning.load_sb3(ckpt, spec, 0)
    assert progress["timesteps"] == model.num_timesteps == 200
    assert model.replay_buffer.size() == 200  # the rows it had, not an empty buffer

    learning.run_sb3(spec, 0, 500, out, resume=True)
    resumed = learning.read_curve(out / "sb3_seed0.csv")
    assert [r["timesteps"] for r in resumed] == [100, 200, 300, 400, 500]
    assert [r["wall_s"] for r in resumed[:2]] == [r["wall_s"] for r in rows[:2]]
    assert resumed[2]["wall_s"] != rows[2]["wall_s"]  # step 300 was played again
    assert sorted(f.name for f in ckpt.iterdir()) == [
        "buffer_000000000400.pkl",
        "model_000000000400.zip",
        "progress.json",
    ]


def test_the_table_gives_each_seeds_final_evaluation_and_tail_mean(learning, tmp_path, monkeypatch):
    spec = ExperimentSpec(run="PG", env="CartPole-v1", config={})
    returns = {  # evaluated every 100 steps of a 600-step budget: the tail is 500 and 600
        "hierl_seed0.csv": [10, 20, 30, 40, 50, 70],
        "hierl_seed1.csv": [10, 20, 30, 40, 90, 110],
        "sb3_seed0.csv": [10, 20, 30, 40, 60, float("nan")],
    }
    for name, values in returns.items():
        rows = _rows(100, 200, 300, 400, 500, 600)
        for row, value in zip(rows, values, strict=True):
            row["evaluation_reward_mean"] = value
        learning._write_csv(tmp_path / name, rows)
    summary = learning.summarize("demo", tmp_path, spec, 600)
    runs = {
        impl: [(r["final_eval_return"], r["tail_eval_return"]) for r in v]
        for impl, v in summary["runs"].items()
    }
    assert runs == {"hierl": [(70, 60), (110, 100)], "sb3": [(60, 60)]}  # NaN: not evaluated
    blocks = []
    monkeypatch.setattr(learning, "replace_results_block", lambda name, b: blocks.append(b))
    learning.update_results_md("demo", summary, "python benchmarks/learning.py demo.yaml")
    lines = blocks[0].splitlines()
    assert "from 500 env steps on" in lines[3]
    assert lines[7] == "| hierl | 2 | 600 | 90.0 | 70, 110 | 80.0 | 60, 100 | 0.0 min |"
    assert lines[8] == "| sb3 | 1 | 600 | 60.0 | 60 | 60.0 | 60 | 0.0 min |"


def test_every_tabulates_each_seeds_latest_evaluation_and_the_medians(
    learning, tmp_path, monkeypatch
):
    spec = ExperimentSpec(run="SAC", env="Hopper-v5", config={})
    nan = float("nan")
    curves = {  # (env steps, evaluation) rows; NaN: no evaluation at that row
        "hierl_seed0.csv": [(100, 1), (200, 2), (300, 3), (400, nan), (500, 5), (600, 6)],
        "hierl_seed1.csv": [(150, 10), (250, nan), (350, 30), (450, 40)],  # cut at 450
        "hierl_seed2.csv": [(200, 7), (400, 9), (600, 11)],
        "sb3_seed0.csv": [(100, nan), (200, nan), (300, 4), (600, 8)],
    }
    for name, points in curves.items():
        rows = _rows(*(steps for steps, _ in points))
        for row, (_, value) in zip(rows, points, strict=True):
            row["evaluation_reward_mean"] = value
        learning._write_csv(tmp_path / name, rows)
    summary = learning.summarize("demo", tmp_path, spec, 600, every=200)
    table = {
        f"{impl} {run['seed']}": run["evaluations_every"]
        for impl, runs in summary["runs"].items()
        for run in runs
    }
    expected = {
        "hierl 0": [2, 3, 6],  # at 400 the latest is 300's
        "hierl 1": [10, 30, nan],  # never reached 600
        "hierl 2": [7, 9, 11],
        "sb3 0": [nan, 4, 8],  # no evaluation by 200
    }
    assert table.keys() == expected.keys()
    for key, values in expected.items():
        assert table[key] == pytest.approx(values, nan_ok=True), key
    blocks = []
    monkeypatch.setattr(learning, "replace_results_block", lambda name, b: blocks.append(b))
    learning.update_results_md("demo", summary, "python benchmarks/learning.py demo.yaml")
    lines = blocks[0].splitlines()
    start = lines.index("| env steps | 200 | 400 | 600 |")
    assert lines[start + 2 : start + 8] == [
        "| hierl seed 0 | 2 | 3 | 6 |",
        "| hierl seed 1 | 10 | 30 |  |",
        "| hierl seed 2 | 7 | 9 | 11 |",
        "| sb3 seed 0 |  | 4 | 8 |",
        "| **hierl median** | 7 | 9 | 8 |",  # 600: the median of the two seeds there
        "| **sb3 median** |  | 4 | 8 |",
    ]
    assert lines[-1] == "<!-- end demo -->"


def test_the_training_return_is_the_last_rung_s_under_the_ladder(learning):
    assert learning.training_return({"episode_reward_mean": 3.0}) == 3.0
    ladder = {f"rung_{i}/episode_reward_mean": float(i) for i in (1, 2, 9, 10)}
    pooled = {"episode_reward_mean": 5.5, "rung_10/epsilon": 0.01, **ladder}
    assert learning.training_return(pooled) == 10.0  # rung 10, the greediest, not "9" > "10"
