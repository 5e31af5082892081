"""Every ``hierl`` subcommand reports an error in the user's files or settings as one
``hierl: error: ...`` line with exit status 2 (also when raised in a Ray worker); bugs
keep their traceback.  Clean exits: no Ray Data or Tune noise on stderr; offline runs
show the evaluation return on the progress line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from hierl.algorithms.pg import PGTrainer
from hierl.cli import main
from hierl.cli.progress import TrainingProgress, format_line
from hierl.config import ConfigError
from tests.support.helpers import REPO, run_cli

NOISE = ("Traceback", "Exception ignored", "SystemExit", "Ray is not initialized")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A checkpoint, logged data made with it, a corrupt copy of that data and other
    bad files."""
    root = tmp_path_factory.mktemp("cli_errors")
    config = {"env": "CartPole-v1", "train_batch_size": 200, "model": {"hiddens": [8]}}
    with PGTrainer(config) as trainer:
        checkpoint = trainer.save(root / "ckpt")
    assert (
        main(["rollout", str(checkpoint), "--episodes", "8", "--output", str(root / "good")]) == 0
    )
    (good,) = (root / "good").glob("*.parquet")
    corrupt = root / "corrupt"
    corrupt.mkdir()
    data = bytearray(good.read_bytes())
    data[100 : len(data) // 2] = b"\xab" * (len(data) // 2 - 100)  # footer intact, pages not
    (corrupt / "a.parquet").write_bytes(good.read_bytes())
    (corrupt / "b.parquet").write_bytes(bytes(data))
    truncated = root / "truncated"
    truncated.mkdir()
    (truncated / "a.parquet").write_bytes(good.read_bytes()[:1000])
    bad_ckpt = root / "bad_ckpt"
    bad_ckpt.mkdir()
    (bad_ckpt / "checkpoint.json").write_text((checkpoint / "checkpoint.json").read_text())
    (bad_ckpt / "arrays.npz").write_bytes(b"not a zip")
    (root / "bad.yaml").write_text("a: [1, 2\n")
    (root / "a_file").write_text("")
    bad_trial = {"exp": {"run": "BC", "env": "CartPole-v1", "stop": {"training_iteration": 2}}}
    bad_trial["exp"]["config"] = {"input": str(corrupt)}
    (root / "bad_trial.yaml").write_text(json.dumps(bad_trial))
    return {
        "root": root,
        "ckpt": checkpoint,
        "good": root / "good",
        "corrupt": corrupt,
        "truncated": truncated,
    }


BC = ["train", "--algo", "BC", "--env", "CartPole-v1", "--no-curve", "-q"]
CASES = {
    # subcommand: argv with {root}/{ckpt}/... placeholders, and a text the line must hold
    "train-truncated-parquet": (
        [*BC, "--set", "input={truncated}", "--output-dir", "{root}/o1"],
        "is not a readable Parquet file",
    ),
    "train-corrupt-parquet": (
        [*BC, "--set", "input={corrupt}", "--output-dir", "{root}/o2"],
        "is corrupt",
    ),
    "train-bad-yaml": ([*BC, "--config", "{root}/bad.yaml"], "is not valid YAML"),
    "train-missing-config": ([*BC, "--config", "{root}/nope.yaml"], "does not exist"),
    "rollout-corrupt-checkpoint": (["rollout", "{root}/bad_ckpt"], "corrupt"),
    "rollout-output-is-a-file": (
        ["rollout", "{ckpt}", "--episodes", "1", "--output", "{root}/a_file"],
        "cannot be used as a directory",
    ),
    "export-corrupt-checkpoint": (["export", "{root}/bad_ckpt"], "corrupt"),
    "serve-corrupt-checkpoint": (["serve", "{root}/bad_ckpt"], "corrupt"),
    "tune-bad-yaml": (["tune", "{root}/bad.yaml"], "cannot read experiment file"),
    "tune-missing-file": (["tune", "{root}/nope.yaml"], "No such file"),
    "config-unknown-algorithm": (["config", "NOPE"], "unknown algorithm 'NOPE'"),
    "list-bad-flag": (["list", "--bogus"], "unrecognized arguments"),
    "bench-unknown-env": (["bench", "optimizers", "--env", "NoSuchEnv-v9"], "--env: unknown env"),
}


def _argv(argv: list[str], files: dict) -> list[str]:
    names = {k: str(v) for k, v in files.items()}
    return [a.format(**names) for a in argv]


@pytest.mark.parametrize("case", list(CASES))
def test_each_subcommand_reports_a_bad_file_or_setting_in_one_line(case, files, capsys):
    argv, expected = CASES[case]
    assert main(_argv(argv, files)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hierl: error: "), err
    assert expected in lines[0] and "Traceback" not in err


def test_a_bug_keeps_its_traceback(monkeypatch):
    """Only the project's user errors become one line: anything else propagates, also a
    user error that a bug wrapped."""
    import hierl.cli.commands as commands

    def buggy(args):
        try:
            raise ConfigError("a setting")
        except ConfigError as e:
            raise RuntimeError("a bug") from e

    monkeypatch.setattr(commands, "_default_optimizer", buggy)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["list"])


@pytest.mark.timeout(600)
def test_an_error_in_a_ray_actor_is_one_line(files):
    """A corrupt Parquet file read by a remote evaluator (a Ray actor): its cause's
    message, not Ray's wrapped traceback."""
    argv = [*BC, "--set", f"input={files['corrupt']}", "--num-evaluators", "1"]
    proc = run_cli([*argv, "--output-dir", str(files["root"] / "o3")], files["root"])
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hierl: error: input file"), proc.stderr
    assert "is corrupt" in lines[0] and "set input_skip_bad_files" in lines[0]


@pytest.mark.timeout(600)
def test_a_tune_trial_failed_by_a_user_error_is_one_line(files):
    proc = run_cli(
        ["tune", str(files["root"] / "bad_trial.yaml"), "--storage-path", "tune"], files["root"]
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("hierl: error: experiment 'exp', trial "), (
        proc.stderr
    )
    assert "is corrupt" in errors[0]
    assert not any(noise in proc.stderr for noise in NOISE), proc.stderr


# -- clean exits and the progress line ----------------------------------------------------
@pytest.mark.timeout(600)
def test_offline_cli_run_shows_the_evaluation_return_and_exits_cleanly(files):
    argv = ["train", "--algo", "BC", "--env", "CartPole-v1", "--no-curve", "--stop"]
    argv += ["training_iteration=2", "--set", f"input={files['good']}"]
    argv += ["--set", "evaluation_interval=1", "--num-evaluators", "1"]
    proc = run_cli([*argv, "--output-dir", str(files["root"] / "o4")], files["root"])
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("iter ")]
    assert len(lines) == 2 and all("| eval reward " in line for line in lines), proc.stdout
    assert "n/a (min n/a" not in proc.stdout
    done = [line for line in proc.stdout.splitlines() if " done (" in line]
    assert len(done) == 1 and "evaluation/episode_reward_mean n/a" not in done[0], proc.stdout
    assert re.search(r"evaluation/episode_reward_mean -?\d", done[0]), done[0]
    assert not any(noise in proc.stderr for noise in NOISE), proc.stderr


RAY_DATA_SCRIPT = """
import sys
import ray
import ray.data
from hierl.algorithms.marwil import BCTrainer
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
trainer = BCTrainer({"env": "CartPole-v1", "input": ray.data.read_parquet(sys.argv[1]),
                     "train_batch_size": 100})
trainer.train()
if sys.argv[2] == "stop":
    trainer.stop()
print("trained")
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("end", ["stop", "exit"])
def test_a_ray_dataset_run_ends_without_ray_data_noise(end, files, tmp_path):
    """Stopped or not, the Ray Data iteration ends while Ray is still up."""
    script = tmp_path / "ray_data_run.py"
    script.write_text(RAY_DATA_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run(
        [sys.executable, str(script), str(files["good"]), end],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0 and "trained" in proc.stdout, proc.stderr
    assert not any(noise in proc.stderr for noise in NOISE), proc.stderr


def test_progress_shows_the_latest_evaluation_return_when_no_training_episode_ended(capsys):
    nan = float("nan")
    offline = {
        "training_iteration": 3,
        "timesteps_total": 600,
        "episode_reward_mean": nan,
        "episode_reward_min": nan,
        "episode_reward_max": nan,
        "episode_len_mean": nan,
        "evaluation/episode_reward_mean": 26.9,
        "evaluation/episode_reward_min": 20.0,
        "evaluation/episode_reward_max": 40.0,
        "evaluation/episode_len_mean": 26.9,
    }
    assert "| eval reward 26.9 (min 20.0, max 40.0) | len 26.9 |" in format_line(offline)
    online = {**offline, "episode_reward_mean": 10.0, "episode_reward_min": 9.0}
    assert "| reward 10.0 (min 9.0, max n/a) |" in format_line(online)
    progress = TrainingProgress({"training_iteration": 9})
    progress.update(offline)
    no_evaluation = {k: v for k, v in offline.items() if not k.startswith("evaluation/")}
    progress.update({**no_evaluation, "training_iteration": 4})  # between evaluations
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("iter 4 |") and "eval reward 26.9" in out[1]


@pytest.mark.timeout(600)
def test_a_tune_run_exits_cleanly(files):
    experiment = {
        "exp": {
            "run": "PG",
            "env": "CartPole-v1",
            "num_samples": 2,
            "stop": {"training_iteration": 2},
            "config": {"train_batch_size": 200, "model": {"hiddens": [8]}},
        }
    }
    path = files["root"] / "ok_experiment.yaml"
    path.write_text(json.dumps(experiment))
    proc = run_cli(["tune", str(path), "--storage-path", "tune_ok"], files["root"])
    assert proc.returncode == 0, proc.stderr
    assert "best trials" in proc.stdout
    assert not any(noise in proc.stderr for noise in NOISE), proc.stderr
