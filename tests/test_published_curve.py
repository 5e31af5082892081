"""``benchmarks/published.py``: a published Monitor curve at our frame counts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.benchmarks import BENCH, import_benchmark

ZOO = BENCH / "published" / "sb3-zoo-ppo-pong"
ZOO_DQN = BENCH / "published" / "sb3-zoo-dqn-pong"


@pytest.fixture(scope="module")
def published():
    return import_benchmark("published")


def _monitor(path: Path, rows: list[tuple[float, int]]) -> None:
    path.write_text("r,l\n" + "".join(f"{r},{n}\n" for r, n in rows))


def test_games_are_placed_at_the_runs_frame_count(tmp_path, published):
    # two envs in lockstep: env 0 ends games after 100 and 250 of its frames, env 1 after 150
    _monitor(tmp_path / "monitor_0.csv", [(-21.0, 100), (-19.0, 150)])
    _monitor(tmp_path / "monitor_1.csv", [(-20.0, 150)])
    games = published.published_games(tmp_path)
    assert games == [(200.0, -21.0), (300.0, -20.0), (500.0, -19.0)]
    assert math.isnan(published.rolling_mean_at(games, 199.0, 2))
    assert published.rolling_mean_at(games, 200.0, 2) == -21.0
    assert published.rolling_mean_at(games, 499.0, 2) == -20.5
    assert published.rolling_mean_at(games, 500.0, 2) == -19.5  # the last two: -20, -19
    assert published.rolling_mean_at(games, 1e9, 10) == -20.0


def test_ours_at_a_frame_count_is_the_last_value_before_it(tmp_path, published):
    csv = tmp_path / "hierl_seed0.csv"
    csv.write_text(
        "timesteps,wall_s,episode_reward_mean,evaluation_reward_mean\n"
        "100,1,-21.0,\n200,2,-20.0,-19.0\n300,3,-18.0,\n"
    )
    ours = published.our_curve(csv, frame_skip=4)
    assert [r["frames"] for r in ours] == [400.0, 800.0, 1200.0]
    assert published.value_at(ours, 1199.0, "episode_reward_mean") == -20.0
    assert published.value_at(ours, 1200.0, "evaluation_reward_mean") == -19.0  # skips the gap
    assert math.isnan(published.value_at(ours, 399.0, "episode_reward_mean"))
    assert math.isnan(published.value_at(ours, 1201.0, "episode_reward_mean"))  # past its end


def test_an_empty_directory_names_itself(tmp_path, published):
    with pytest.raises(SystemExit, match=str(tmp_path)):
        published.published_games(tmp_path)


def test_sb3_monitor_files_are_read_as_sb3_writes_them(tmp_path, published):
    (tmp_path / "0.monitor.csv").write_text('#{"t_start": 1.0}\nr,l,t\n-21.0,100,3.5\n')
    assert published.published_games(tmp_path) == [(100.0, -21.0)]
    (tmp_path / "1.monitor.csv").write_text("reward,length\n-20.0,100\n")
    with pytest.raises(SystemExit, match=r"1\.monitor\.csv: columns \['reward', 'length'\]"):
        published.published_games(tmp_path)


def test_the_zoo_extract_is_one_lockstep_run():
    """Eight envs stepping together end the extract within one game's frames of each other:
    a row left out or repeated while copying would move one env's total by a game (6,600+)."""
    totals, games = [], 0
    for path in sorted(ZOO.glob("monitor_*.csv")):
        rows = path.read_text().split("\n")[1:-1]
        lengths = [int(row.split(",")[1]) for row in rows]
        assert min(lengths) >= 3000  # a whole game of Pong: at least 21 points
        totals.append(sum(lengths))
        games += len(rows)
    assert len(totals) == 8 and games == 1332
    assert max(totals) - min(totals) < 6619  # the shortest game in the files
    assert 10.1e6 < 8 * min(totals) < 10.3e6


def test_the_zoo_dqn_extract_and_when_it_reached_18(published):
    """One env's games to 10.2M frames; its 100-game training return first reaches +18
    at 4,878,777 frames (what RESULTS.md cites; a row dropped or repeated moves it)."""
    games = published.published_games(ZOO_DQN)
    assert len(games) == 1528 and games[-1][0] == 10_206_045
    assert all(-21 <= score <= 21 for _, score in games)
    assert published.published_first_reaching(games, 18.0, 100) == 4_878_777
    assert math.isnan(published.published_first_reaching(games, 21.0, 100))


def test_first_reaching_needs_a_full_window(published):
    games = [(100.0, 20.0), (200.0, 10.0), (300.0, 20.0), (400.0, 20.0)]
    assert published.published_first_reaching(games, 15.0, 2) == 200.0  # not 100: 1 game
    assert published.published_first_reaching(games, 20.0, 2) == 400.0
    assert published.published_first_reaching(games, 16.0, 3) == 300.0  # 50/3
    assert math.isnan(published.published_first_reaching(games, 17.0, 3))
    rows = [{"frames": 4.0, "x": 1.0}, {"frames": 8.0, "x": math.nan}, {"frames": 12.0, "x": 3.0}]
    assert published.first_reaching(rows, "x", 2.0) == 12.0
    assert math.isnan(published.first_reaching(rows, "x", 5.0))


def test_the_table_puts_both_curves_at_the_same_frame_counts(tmp_path, published):
    _monitor(tmp_path / "monitor_0.csv", [(-21.0, 100), (-19.0, 150)])
    _monitor(tmp_path / "monitor_1.csv", [(-20.0, 150)])
    csv = tmp_path / "hierl_seed0.csv"
    csv.write_text(
        "timesteps,wall_s,episode_reward_mean,evaluation_reward_mean\n"
        "50,1,-21.0,\n100,2,-18.0,-17.0\n"
    )
    ours = {"hierl seed0": published.our_curve(csv, frame_skip=4)}
    text = published.table(published.published_games(tmp_path), ours, [300.0, 400.0], 2, "zoo")
    assert text.splitlines() == [
        "| frames | 0.0003M | 0.0004M |",
        "|---|---|---|",
        "| zoo training return (last 2 games) | -20.5 | -20.5 |",
        "| hierl seed0 training return (last 2 games) | -21.0 | -18.0 |",
        "| hierl seed0 greedy evaluation (latest) | - | -17.0 |",
    ]
    steps = published.table(
        published.published_games(tmp_path), ours, [300.0], 2, "zoo", published.STEP_UNITS
    )
    assert steps.splitlines()[:3] == [
        "| env steps | 0.0003M |",
        "|---|---|",
        "| zoo training return (last 2 episodes) | -20.5 |",
    ]


@pytest.mark.parametrize(
    ("run", "episodes", "steps", "return_at_300k"),
    [
        ("sac-halfcheetah", 1000, 1_000_000, 6597.6),
        ("sac-hopper", 2315, 999_950, 1409.3),
        ("td3-halfcheetah", 1000, 1_000_000, 8003.5),
        ("td3-hopper", 2776, 999_871, 2077.8),
    ],
)
def test_the_zoo_mujoco_extracts_are_whole_runs(published, run, episodes, steps, return_at_300k):
    """The zoo's SAC and TD3 runs on MuJoCo (one env, 1M steps): every episode kept, and
    the 100-episode training return at 300k steps that RESULTS.md cites."""
    games = published.published_games(BENCH / "published" / f"sb3-zoo-{run}")
    assert len(games) == episodes and games[-1][0] == steps
    assert published.rolling_mean_at(games, 300_000, 100) == pytest.approx(return_at_300k, abs=0.05)


def test_the_published_greedy_evaluations_are_placed_in_frames(tmp_path, published):
    """``evaluations.csv`` counts agent steps: at frame skip 4 an evaluation at 100 steps
    stands at 400 frames, and the table shows the latest one by each column, past the
    last one too (the run evaluated no more, it did not end)."""
    _monitor(tmp_path / "monitor_0.csv", [(-21.0, 400), (-19.0, 800)])
    (tmp_path / "evaluations.csv").write_text(
        "timesteps,mean_return,episodes\n100,-20.0,10\n200,-15.5,10\n"
    )
    evaluations = published.published_evaluations(tmp_path, frame_skip=4)
    assert [r["frames"] for r in evaluations] == [400.0, 800.0]
    row = {"frames": 1200.0, "episode_reward_mean": -18.0, "evaluation_reward_mean": -14.0}
    games = published.published_games(tmp_path)
    text = published.table(
        games, {"hierl": [row]}, [300.0, 400.0, 1200.0], 2, "zoo", evaluations=evaluations
    )
    assert (
        text.splitlines()[3] == "| zoo greedy evaluation (latest, 10 games) | - | -20.0 | -15.5 |"
    )
    assert published.first_reaching(evaluations, "evaluation_reward_mean", -16.0) == 800.0
    assert published.published_evaluations(tmp_path / "absent", frame_skip=4) == []
    (tmp_path / "evaluations.csv").write_text("step,return\n1,2\n")
    with pytest.raises(SystemExit, match="timesteps and mean_return"):
        published.published_evaluations(tmp_path, frame_skip=4)


@pytest.mark.parametrize(
    ("run", "frame_skip", "evaluations", "episodes", "at", "mean"),
    [
        ("dqn-pong", 4, 255, 10, 4_040_000, 19.0),  # its first greedy +18: 1.01M steps
        ("ppo-pong", 4, 255, 10, 7_800_000, 19.2),  # its first greedy +18: 1.95M steps
        ("sac-halfcheetah", 1, 100, 20, 300_000, 7197.1),
        ("sac-hopper", 1, 100, 20, 300_000, 1540.4),
        ("td3-halfcheetah", 1, 100, 20, 300_000, 8487.9),
        ("td3-hopper", 1, 40, 20, 300_000, 2670.5),
    ],
)
def test_the_zoo_evaluation_extracts(published, run, frame_skip, evaluations, episodes, at, mean):
    """The zoo runs' greedy evaluations (their ``evaluations.npz``, as CSV) that
    RESULTS.md cites; the Pong runs' only to the 10.2M frames of their Monitor extracts."""
    rows = published.published_evaluations(BENCH / "published" / f"sb3-zoo-{run}", frame_skip)
    assert len(rows) == evaluations and {r["episodes"] for r in rows} == {episodes}
    assert published.value_at(rows, at, "evaluation_reward_mean") == pytest.approx(mean, abs=0.05)
    if run.endswith("-pong"):
        assert published.first_reaching(rows, "evaluation_reward_mean", 18.0) == at
