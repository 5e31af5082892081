"""The ``hierl`` command line: train / rollout / list / config, errors and progress output."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hierl.cli import (
    default_output_dir,
    default_stop,
    load_config_arg,
    main,
    parse_stop,
    reached_stop,
)
from hierl.cli.progress import TrainingProgress, format_line, stop_fraction
from tests.support.helpers import RESULT_KEYS

pytestmark = pytest.mark.timeout(120)

TINY = json.dumps({"train_batch_size": 200, "num_envs_per_evaluator": 2})
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _train_args(out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--algo",
        "PG",
        "--env",
        "CartPole-v1",
        "--config",
        TINY,
        "--output-dir",
        str(out),
        *extra,
    ]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny PG run: 2 iterations, a checkpoint every iteration."""
    out = tmp_path_factory.mktemp("run") / "out"
    rc, stdout, stderr = _run(
        _train_args(out, "--stop", "training_iteration=2", "--checkpoint-freq", "1", "--seed", "3")
    )
    return out, rc, stdout, stderr


# -- train -----------------------------------------------------------------------------
def test_train_writes_results_params_and_summary(trained):
    out, rc, stdout, stderr = trained
    assert rc == 0, stderr
    lines = (out / "result.jsonl").read_text().splitlines()
    assert len(lines) == 2
    results = [json.loads(line) for line in lines]
    for i, result in enumerate(results, start=1):
        assert RESULT_KEYS.issubset(result)
        assert result["training_iteration"] == i
        assert any(k.startswith("learner/") for k in result)
        assert any(k.endswith("_time_ms") for k in result)
    assert results[-1]["timesteps_total"] >= 400
    params = json.loads((out / "params.json").read_text())
    assert params["env"] == "CartPole-v1"
    assert params["optimizer_config"]["train_batch_size"] == 200
    assert params["seed"] == 3
    # plain (non-TTY) progress lines, stop conditions, final summary
    assert "stop when any of: training_iteration >= 2" in stdout
    assert re.search(r"^iter 1 \| t=\d+ \| reward .* steps/s \| [\d.]+s$", stdout, re.M)
    assert re.search(r"^iter 2 \| ", stdout, re.M)
    assert "done (training_iteration = 2 >= 2)" in stdout
    assert f"checkpoint: {(out / 'checkpoints' / '000002').resolve()}" in stdout
    assert f"output dir: {out.resolve()}" in stdout


def test_train_checkpoints_are_loadable(trained):
    from hierl.algorithms.trainer import Trainer

    out, rc, _, _ = trained
    assert rc == 0
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["000001", "000002"]
    trainer = Trainer.from_checkpoint(out / "checkpoints" / "000002", num_evaluators=0)
    try:
        assert trainer.name == "PG"
        assert trainer.iteration == 2
        assert trainer.config.optimizer_config.train_batch_size == 200
    finally:
        trainer.stop()


def test_train_writes_learning_curve_png(trained):
    out, rc, _, _ = trained
    assert rc == 0
    data = (out / "learning_curve.png").read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 1000
    assert not list(out.glob(".*tmp*"))


def test_train_quiet_yaml_config_and_default_output_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("train_batch_size: 100\nnum_envs_per_evaluator: 2\nseed: 1\nlr: 0.01\n")
    rc, stdout, stderr = _run(
        [
            "train",
            "--algo",
            "PG",
            "--env",
            "CartPole-v1",
            "--config",
            str(cfg),
            "--seed",
            "7",
            "--stop",
            "training_iteration=1",
            "--quiet",
        ]
    )
    assert rc == 0, stderr
    assert "iter 1 |" not in stdout
    assert "stop when" not in stdout
    assert "done" in stdout and "checkpoint:" in stdout and "output dir:" in stdout
    runs = list((tmp_path / "hierl_results").iterdir())
    assert len(runs) == 1
    assert re.fullmatch(r"PG_CartPole-v1_\d{8}-\d{6}", runs[0].name)
    params = json.loads((runs[0] / "params.json").read_text())
    assert params["optimizer_config"]["train_batch_size"] == 100
    assert params["lr"] == 0.01
    assert params["seed"] == 7  # --seed overrides the file
    assert (runs[0] / "checkpoints" / "000001" / "checkpoint.json").exists()
    assert len((runs[0] / "result.jsonl").read_text().splitlines()) == 1


def test_train_merges_repeated_configs_in_order(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("train_batch_size: 100\nlr: 1e-3\nmodel: {hiddens: [8], activation: relu}\n")
    out = tmp_path / "out"
    override = '{"lr": 0.02, "model": {"hiddens": [4, 4]}}'
    argv = ["train", "--algo", "PG", "--env", "CartPole-v1", "--config", str(base)]
    argv += ["--config", override, "--output-dir", str(out), "--stop", "training_iteration=1"]
    rc, _, stderr = _run([*argv, "--quiet"])
    assert rc == 0, stderr
    params = json.loads((out / "params.json").read_text())
    assert params["optimizer_config"]["train_batch_size"] == 100  # only in the first
    assert params["lr"] == 0.02  # the later one wins
    # nested dicts merged key by key: hiddens from the second, activation from the first
    assert params["model"]["hiddens"] == [4, 4] and params["model"]["activation"] == "relu"


def test_default_output_dir_is_never_packaged(tmp_path):
    # pyproject's package patterns, applied by setuptools as when building a wheel
    import setuptools

    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    for package in ("hierl", "hierl/optimizers", "hierl_results/pkg"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "hierl_results" / "PG_CartPole-v1_20250101-120000").mkdir()  # a run: no .py
    (tmp_path / "hierl_results" / "PG_CartPole-v1_20250101-120000" / "params.json").write_text("")
    (tmp_path / "hierl_results" / "__init__.py").write_text("")
    assert default_output_dir("PG", "CartPole-v1").parts[0] == "hierl_results"
    finder = (
        setuptools.find_namespace_packages  # pyproject's default: namespaces = true
        if find.get("namespaces", True)
        else setuptools.find_packages
    )
    found = finder(where=str(tmp_path), include=find["include"], exclude=find.get("exclude", ()))
    assert sorted(found) == ["hierl", "hierl.optimizers"]


def test_merge_configs_merges_nested_dicts_and_replaces_the_rest():
    from hierl.cli import merge_configs

    base = {"lr": 1, "model": {"hiddens": [8], "activation": "relu"}, "stop": [1]}
    override = {"model": {"hiddens": [4]}, "stop": [2], "gamma": 0.9}
    assert merge_configs(base, override) == {
        "lr": 1,
        "model": {"hiddens": [4], "activation": "relu"},
        "stop": [2],
        "gamma": 0.9,
    }
    assert base["model"] == {"hiddens": [8], "activation": "relu"}  # inputs untouched
    assert merge_configs({"model": {"a": 1}}, {"model": None}) == {"model": None}


def test_train_ctrl_c_saves_checkpoint_and_exits_cleanly(tmp_path, monkeypatch):
    from hierl.algorithms.trainer import Trainer

    original = Trainer.train
    calls = []

    def train(self):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(Trainer, "train", train)
    out = tmp_path / "out"
    rc, stdout, stderr = _run(_train_args(out, "--stop", "training_iteration=100"))
    assert rc == 0, stderr
    assert "interrupted after 1 iterations" in stdout
    assert (out / "checkpoints" / "000001" / "checkpoint.json").exists()
    assert (out / "learning_curve.png").read_bytes().startswith(PNG_MAGIC)
    assert len((out / "result.jsonl").read_text().splitlines()) == 1


def test_train_unknown_stop_key_is_a_clear_error(tmp_path):
    rc, _, stderr = _run(_train_args(tmp_path / "out", "--stop", "episode_reward_maen=10"))
    assert rc == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("hierl: error: unknown stop key 'episode_reward_maen'")
    assert "did you mean 'episode_reward_mean'" in lines[0]
    assert "available keys:" in lines[0] and "timesteps_total" in lines[0]


def test_train_refuses_to_mix_runs_in_one_output_dir(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.jsonl").write_text('{"training_iteration": 1}\n')
    rc, _, stderr = _run(_train_args(out, "--stop", "training_iteration=1"))
    assert rc == 2
    assert "already holds a run" in stderr


# -- errors ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--algo", "PPOO", "--env", "CartPole-v1"], ["'PPOO'", "did you mean 'PPO'"]),
        (
            ["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", '{"lrr": 0.1}'],
            ["'lrr'", "did you mean 'lr'"],
        ),
        (
            ["train", "--algo", "PG", "--env", "CartPole-v1", "--config", '{"lr": -1}'],
            ["'lr'", "must be > 0"],
        ),
        (
            ["train", "--algo", "PG", "--env", "CartPole-v1", "--config", '{"lr": 0.1'],
            ["invalid inline JSON"],
        ),
        (
            ["train", "--algo", "PG", "--env", "CartPole-v1", "--config", "missing.yaml"],
            ["missing.yaml", "does not exist"],
        ),
        (
            ["train", "--algo", "PG", "--env", "CartPole-v1", "--config", "[1]"],
            ["neither"],
        ),
        (["train", "--algo", "PG", "--env", "CartPol-v1"], ["unknown env 'CartPol-v1'"]),
        (["train", "--algo", "PG"], ["no environment", "--env"]),
        (
            ["train", "--algo", "PG", "--env", "CartPole-v1", "--stop", "training_iteration"],
            ["malformed stop condition", "KEY=VALUE"],
        ),
        (
            ["train", "--algo", "PG", "--env", "CartPole-v1", "--stop", "timesteps_total=lots"],
            ["'lots'", "not a number"],
        ),
        (["train", "--env", "CartPole-v1"], ["required", "--algo"]),
        (["train", "--algo", "PG", "--checkpoint-freq", "-1"], ["--checkpoint-freq"]),
        (["rollout", "/nonexistent/checkpoint"], ["/nonexistent/checkpoint", "does not exist"]),
        (["rollout", "ckpt", "--episodes", "0"], ["--episodes", "must be >= 1"]),
        (["frobnicate"], ["invalid choice"]),
        ([], ["required"]),
        (["config", "PPOO"], ["did you mean 'PPO'"]),
    ],
)
def test_user_errors_print_one_line_and_return_2(argv, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, stdout, stderr = _run(argv)
    assert rc == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("hierl: error: ")
    for text in expected:
        assert text in lines[0]
    assert "Traceback" not in stderr + stdout
    assert not (tmp_path / "hierl_results").exists()


def test_unreadable_config_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [unclosed\n")
    rc, _, stderr = _run(["train", "--algo", "PG", "--env", "CartPole-v1", "--config", str(bad)])
    assert rc == 2
    assert len(stderr.strip().splitlines()) == 1
    assert "not valid YAML" in stderr


def test_corrupt_checkpoint_is_a_user_error(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "checkpoint.json").write_text("{not json")
    rc, _, stderr = _run(["rollout", str(ckpt)])
    assert rc == 2
    assert "corrupt" in stderr
    assert len(stderr.strip().splitlines()) == 1


# -- rollout ---------------------------------------------------------------------------
def test_rollout_prints_returns_and_mean(trained, capsys):
    out, rc, _, _ = trained
    assert rc == 0
    assert main(["rollout", str(out / "checkpoints" / "000002"), "--episodes", "2"]) == 0
    stdout = capsys.readouterr().out
    assert len(re.findall(r"^episode \d+: return [\d.]+, length \d+$", stdout, re.M)) == 2
    match = re.search(r"^mean return: ([\d.]+) over 2 episodes$", stdout, re.M)
    assert match and float(match.group(1)) > 0


def test_rollout_accepts_run_dir_and_seed_is_reproducible(trained, capsys):
    out, rc, _, _ = trained
    assert rc == 0
    argv = ["rollout", str(out), "--episodes", "2", "--explore", "--seed", "5"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert "mean return:" in first


def test_rollout_output_logs_whole_episodes_with_their_action_logp(trained, capsys, tmp_path):
    from hierl.evaluators.offline import iter_episodes, list_files

    out, rc, _, _ = trained
    assert rc == 0
    argv = ["rollout", str(out), "--episodes", "3", "--output", str(tmp_path / "logged")]
    assert main([*argv, "--seed", "1"]) == 0
    stdout = capsys.readouterr().out
    returns = [float(r) for r in re.findall(r"^episode \d+: return ([\d.]+)", stdout, re.M)]
    episodes = list(iter_episodes(list_files(tmp_path / "logged")))
    assert [float(e["rewards"].sum()) for e in episodes] == returns and len(returns) >= 3
    assert all(np.all(e["action_logp"] < 0) for e in episodes)  # sampled, with logp


# -- help, list, config ----------------------------------------------------------------
ALGORITHMS = [
    *("A2C", "A3C", "A3C_ES", "ALPHAZERO", "APEX", "APEX_DDPG", "APEX_SAC", "APPO", "BC"),
    *("DDPG", "DQN", "ES", "IMPALA", "MARWIL", "PG", "PPO", "PPO_ES", "SAC", "TD3"),
]


def test_train_help_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "hierl.cli", "train", "--help"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--stop KEY=VALUE" in proc.stdout
    assert ", ".join(ALGORITHMS) in proc.stdout
    assert "example:" in proc.stdout and "hierl train --algo PPO" in proc.stdout
    assert "repeatable: merged in order" in " ".join(proc.stdout.split())


def test_closed_stdout_pipe_exits_quietly():
    # `hierl config PPO | head -1`: the reader goes away; no BrokenPipeError traceback.
    cmd = [sys.executable, "-m", "hierl.cli", "config", "PPO"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the first write: every write fails with EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=90) == 1, stderr  # Python's status for EPIPE
    assert stderr == ""
    pipeline = subprocess.run(
        f"{shlex.join(cmd)} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=90,
        executable="/bin/bash",
    )
    assert pipeline.stdout.startswith("PPO config keys") and pipeline.stdout.count("\n") == 1
    assert "Traceback" not in pipeline.stderr and "BrokenPipe" not in pipeline.stderr


def test_tune_malformed_search_space_is_one_error_line_and_status_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "exp1:\n  run: PG\n  env: CartPole-v1\n  config:\n"
        "    lr: {loguniform: {low: 1e-4, high: 5e-3}}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hierl.cli", "tune", str(path)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hierl: error: "), proc.stderr
    assert "'config.lr'" in lines[0] and "loguniform" in lines[0] and "valid forms" in lines[0]


@pytest.mark.parametrize("argv", [["--help"], ["rollout", "--help"], ["list", "--help"]])
def test_help_returns_0(argv, capsys):
    assert main(argv) == 0
    assert "usage: hierl" in capsys.readouterr().out


def test_list_and_config(capsys):
    assert main(["list", "--names"]) == 0
    assert capsys.readouterr().out.split() == ALGORITHMS
    assert main(["list"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["ALGORITHM", "OPTIMIZER", "DESCRIPTION"]
    assert [r.split()[0] for r in rows[1:]] == ALGORITHMS
    assert re.search(r"^PPO +local +proximal policy optimization", "\n".join(rows), re.M)
    assert re.search(r"^PPO_ES +- +a population", "\n".join(rows), re.M)
    assert main(["config", "PPO"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^  lr = [\d.e-]+$", text, re.M)
    assert "Learning rate" in text
    assert "clip_param" in text


# -- helpers ---------------------------------------------------------------------------
def test_parse_stop_and_reached_stop():
    assert parse_stop("episode_reward_mean=475") == ("episode_reward_mean", 475.0)
    assert parse_stop(" timesteps_total = 1e6") == ("timesteps_total", 1e6)
    for bad in ("x", "=3", "x=", "x=abc", "x=nan", "x=inf"):
        with pytest.raises(Exception, match="stop condition"):
            parse_stop(bad)
    stop = {"episode_reward_mean": 100.0, "timesteps_total": 1000.0}
    assert reached_stop(stop, {"episode_reward_mean": math.nan, "timesteps_total": 10}) is None
    assert "timesteps_total" in reached_stop(
        stop, {"episode_reward_mean": 5.0, "timesteps_total": 1000}
    )
    assert "episode_reward_mean" in reached_stop(
        stop, {"episode_reward_mean": 100.5, "timesteps_total": 10}
    )


def test_default_stop_uses_reward_threshold():
    stop, _ = default_stop("CartPole-v1")
    assert stop == {"episode_reward_mean": 475.0, "timesteps_total": 1_000_000.0}
    stop, _ = default_stop("Pendulum-v1")  # no reward_threshold
    assert stop == {"timesteps_total": 1_000_000.0}


def test_load_config_arg_json_file_and_inline(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"lr": 0.01}')
    assert load_config_arg(str(path)) == {"lr": 0.01}
    assert load_config_arg(' {"gamma": 0.9} ') == {"gamma": 0.9}
    yml = tmp_path / "c.yml"
    yml.write_text(
        "lr: 1e-3\nentropy_coeff: 5E-4\ngamma: .99\ntrain_batch_size: 1e3\nenv: e5\nx: .5e1\n"
    )
    assert load_config_arg(str(yml)) == {
        "lr": 1e-3,
        "entropy_coeff": 5e-4,
        "gamma": 0.99,
        "train_batch_size": 1000.0,
        "env": "e5",
        "x": 5.0,
    }
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    assert load_config_arg(str(empty)) == {}


def test_progress_plain_line_and_live_panel():
    result = {
        "training_iteration": 12,
        "timesteps_total": 6144,
        "episode_reward_mean": 87.25,
        "episode_reward_min": 12.0,
        "episode_reward_max": 200.0,
        "episode_len_mean": 87.25,
        "sample_throughput": 2450.4,
        "time_total_s": 7.06,
    }
    assert format_line(result) == (
        "iter 12 | t=6144 | reward 87.2 (min 12.0, max 200.0) | len 87.2 | 2450 steps/s | 7.1s"
    )
    no_episodes = {
        **result,
        **dict.fromkeys(
            ("episode_reward_mean", "episode_reward_min", "episode_reward_max"), math.nan
        ),
    }
    assert "reward n/a (min n/a, max n/a)" in format_line(no_episodes)
    assert stop_fraction(50, 100) == 0.5
    assert stop_fraction(150, 100) == 1.0
    assert stop_fraction(math.nan, 100) == 0.0
    assert stop_fraction(-200, -110) == 0.0  # negative targets: done or not
    assert stop_fraction(-100, -110) == 1.0

    from rich.console import Console

    progress = TrainingProgress({"timesteps_total": 12288, "episode_reward_mean": 475}, "PG")
    assert not progress.use_live  # stdout is not a terminal under pytest
    buf = io.StringIO()
    Console(file=buf, width=120, color_system=None).print(progress.renderable(result))
    text = buf.getvalue()
    assert "6144" in text and "87.2" in text and "2450" in text
    assert "timesteps_total >= 12288" in text and "50%" in text
    assert "episode_reward_mean >= 475" in text and "18%" in text


def test_progress_quiet_prints_nothing(capsys):
    with TrainingProgress({"training_iteration": 3}, quiet=True) as progress:
        progress.update({"training_iteration": 1})
        progress.log("checkpoint saved")
    assert capsys.readouterr().out == ""


def test_rollout_of_an_alphazero_checkpoint_points_at_hierl_play(tmp_path, capsys):
    from hierl.algorithms.alphazero import AlphaZeroTrainer

    config = {"env": "hierl/TicTacToe-v0", "num_self_play_workers": 0}
    with AlphaZeroTrainer(config) as trainer:
        path = trainer.save(tmp_path / "ckpt")
    assert main(["rollout", str(path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "ALPHAZERO checkpoint" in err and f"hierl play {path}" in err
