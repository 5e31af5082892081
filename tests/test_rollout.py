"""``hierl rollout``: steps, env overrides, rendering, video, multi-agent episodes."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.playback import RolloutError, RolloutOptions, rollout
from hierl.cli import main
from hierl.evaluators import make_multi_agent, register_env
from tests.support.helpers import free_port


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A PG CartPole-v1 checkpoint after one iteration."""
    path = tmp_path_factory.mktemp("rollout") / "ckpt"
    with PGTrainer({"env": "CartPole-v1", "train_batch_size": 200, "seed": 0}) as trainer:
        trainer.train()
        return trainer.save(path)


def episodes(out: str) -> list[tuple[float, int, bool]]:
    """``(return, length, cut)`` of every episode line ``hierl rollout`` printed."""
    rows = re.findall(r"^episode \d+: return ([-\d.]+), length (\d+)(.*)$", out, re.M)
    return [(float(r), int(n), "cut short" in rest) for r, n, rest in rows]


def test_steps_limit_the_whole_rollout_and_cut_the_last_episode(checkpoint, capsys):
    assert main(["rollout", str(checkpoint), "--steps", "150", "--seed", "3"]) == 0
    played = episodes(capsys.readouterr().out)
    assert sum(n for _, n, _ in played) == 150
    assert [cut for *_, cut in played] == [False] * (len(played) - 1) + [True]
    # both limits: whichever comes first
    assert main(["rollout", str(checkpoint), "--steps", "10000", "--episodes", "2"]) == 0
    assert len(episodes(capsys.readouterr().out)) == 2


def test_env_config_is_merged_and_env_replaced(checkpoint, capsys):
    argv = ["rollout", str(checkpoint), "--episodes", "3", "--explore"]
    assert main([*argv, "--env-config", '{"max_episode_steps": 7}']) == 0
    assert [n for _, n, _ in episodes(capsys.readouterr().out)] == [7, 7, 7]
    # another env with the same spaces; its episodes are capped at 200 steps
    assert main([*argv, "--env", "CartPole-v0"]) == 0
    assert all(n <= 200 for _, n, _ in episodes(capsys.readouterr().out))
    assert main([*argv, "--env", "Pendulum-v1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--env Pendulum-v1 must have the spaces the policy was trained on" in err
    assert main([*argv, "--env-config", "[1, 2]"]) == 2
    assert "--env-config must be a JSON object" in capsys.readouterr().err


def test_video_dir_records_a_playable_mp4_per_episode(checkpoint, tmp_path, capsys):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")  # moviepy's writer
    pytest.importorskip("pygame")  # CartPole's renderer
    videos = tmp_path / "videos"
    argv = ["rollout", str(checkpoint), "--episodes", "2", "--video-dir", str(videos)]
    assert main([*argv, "--env-config", '{"max_episode_steps": 12}']) == 0
    assert [n for _, n, _ in episodes(capsys.readouterr().out)] == [12, 12]
    files = sorted(videos.glob("*.mp4"))
    assert [f.name for f in files] == ["rollout-episode-0.mp4", "rollout-episode-1.mp4"]
    reader = imageio_ffmpeg.read_frames(str(files[0]))
    meta = next(reader)
    frames = list(reader)
    assert meta["size"] == (600, 400)  # CartPole's rgb_array frames
    # a frame per step (Gymnasium versions differ in keeping the reset frame)
    assert len(frames) in (12, 13)
    assert len({bytes(f) for f in frames}) > 1  # the pole moves


class RenderProbe(gym.Env):
    """Counts the frames it renders on screen; ``honest`` False ignores render_mode."""

    metadata = {"render_modes": ["human"]}
    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)
    shown = 0

    def __init__(self, render_mode: str | None = None, honest: bool = True):
        self.render_mode = render_mode if honest else None
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.render_mode == "human":
            type(self).shown += 1
        return np.zeros(4, np.float32), 1.0, self.t >= 5, False, {}


register_env("render_probe", lambda config: RenderProbe(**config))


def test_render_shows_every_step_and_a_creator_ignoring_render_mode_is_named():
    options = RolloutOptions(episodes=2, render=True)
    with PGTrainer({"env": "render_probe", "train_batch_size": 50}) as trainer:
        RenderProbe.shown = 0
        played = list(rollout(trainer, options))
        assert [p.record.episode_length for p in played] == [5, 5]
        assert RenderProbe.shown == 10
    with (
        PGTrainer(
            {"env": "render_probe", "env_config": {"honest": False}, "train_batch_size": 50}
        ) as trainer,
        pytest.raises(RolloutError, match="its creator must pass render_mode on"),
    ):
        list(rollout(trainer, options))


def test_options_are_checked():
    with pytest.raises(RolloutError, match="needs a limit"):
        RolloutOptions(episodes=None)
    with pytest.raises(RolloutError, match="steps = 0 is invalid"):
        RolloutOptions(steps=0)
    with pytest.raises(RolloutError, match="exclude each other"):
        RolloutOptions(render=True, video_dir="v")


register_env("multi_cartpole", lambda config: make_multi_agent("CartPole-v1")(config))


def test_multi_agent_rollout_plays_whole_episodes(tmp_path, capsys):
    config = {"env": "multi_cartpole", "train_batch_size": 200, "seed": 0}
    with PGTrainer(config) as trainer:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
    assert main(["rollout", str(path), "--episodes", "3", "--seed", "1"]) == 0
    played = episodes(capsys.readouterr().out)
    assert len(played) == 3 and not any(cut for *_, cut in played)
    # both agents' rewards: each agent's CartPole pays 1 a step until it falls
    assert all(total >= length for total, length, _ in played)
    assert main(["rollout", str(path), "--steps", "100"]) == 2
    err = capsys.readouterr().err
    assert "multi-agent rollout plays whole episodes" in err and "steps" in err


def test_rollout_and_export_leave_the_runs_input_and_output_alone(tmp_path, capsys):
    from hierl.algorithms.ppo import PPOTrainer

    port = free_port()
    logged = tmp_path / "logged"
    config = {
        "env": "CartPole-v1",
        "input": "external",  # its server holds the port while the run goes on
        "input_external": {"port": port},
        "output": str(logged),
    }
    with PPOTrainer(config) as trainer:
        path = trainer.save(tmp_path / "ckpt")
        # acting with the checkpoint binds no port and logs nothing
        assert main(["rollout", str(path), "--episodes", "2"]) == 0
        assert main(["export", str(path), "--output", str(tmp_path / "exported")]) == 0
    assert not list(logged.rglob("*.parquet"))
    capsys.readouterr()


def test_a_run_dir_resolves_to_its_newest_complete_checkpoint(checkpoint, tmp_path, capsys):
    import shutil

    run = tmp_path / "run" / "checkpoints"
    shutil.copytree(checkpoint, run / "000001")
    (run / "000002").mkdir()
    (run / "000002" / "checkpoint.json").write_text("{not json")
    assert main(["rollout", str(tmp_path / "run"), "--episodes", "1"]) == 0
    captured = capsys.readouterr()
    assert len(episodes(captured.out)) == 1
    assert "warning: skipping checkpoint" in captured.err and "000002" in captured.err
