"""``hierl train`` for everyday use: TensorBoard / CSV logs, ``--resume``, ``--set``,
``hierl config --yaml``, ``hierl tune --resume`` and ``hierl bench --help``."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hierl.algorithms.registry import get_trainer_class, trainer_names
from hierl.checkpoint import load_checkpoint
from hierl.cli import load_config_arg, main
from hierl.loggers import ResultLogger, read_results, read_scalars, truncate_logs

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
TINY = json.dumps({"train_batch_size": 200, "num_envs_per_evaluator": 2})
ENV = {
    **os.environ,
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_COLOR_PREFIX": "0",
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _train(out: Path, *extra: str) -> list[str]:
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
        "--seed",
        "0",
        "--no-curve",
        "-q",
        *extra,
    ]


def _events(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard files, read back as TensorBoard would."""
    files = sorted(run_dir.glob("events.out.tfevents.*"))
    assert files, f"no TensorBoard event files in {run_dir}"
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        merged: dict[str, list[tuple[int, float]]] = {}
        for f in files:
            for tag, points in read_scalars(f).items():
                merged.setdefault(tag, []).extend(points)
        return {tag: sorted(points) for tag, points in merged.items()}
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def _csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("hierl: error: "), stderr
    return lines[0]


@pytest.fixture(scope="module")
def run3(tmp_path_factory):
    """A tiny PG run: 3 iterations, a checkpoint every iteration."""
    out = tmp_path_factory.mktemp("run") / "out"
    rc, _, stderr = _run(_train(out, "--stop", "training_iteration=3", "--checkpoint-freq", "1"))
    assert rc == 0, stderr
    return out


# -- logs --------------------------------------------------------------------------------
def test_tensorboard_events_hold_every_iteration_under_tunes_names(run3):
    results = read_results(run3)
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    scalars = _events(run3)
    steps = [r["timesteps_total"] for r in results]
    reward = scalars["ray/tune/episode_reward_mean"]
    assert [s for s, _ in reward] == steps  # Tune's step: timesteps_total
    np.testing.assert_allclose([v for _, v in reward], [r["episode_reward_mean"] for r in results])
    assert "ray/tune/learner/policy_loss" in scalars or any(
        t.startswith("ray/tune/learner/") for t in scalars
    )
    assert "ray/tune/training_iteration" not in scalars  # left out, as Tune does


def test_progress_csv_has_one_row_per_iteration_and_stable_columns(run3):
    header, rows = _csv(run3 / "progress.csv")
    assert len(rows) == 3
    assert all(len(r) == len(header) for r in rows)
    assert len(set(header)) == len(header)
    assert {"episode_reward_mean", "timesteps_total", "training_iteration"} <= set(header)
    # every key of every result is a column (keys that appear after iteration 1 too)
    keys = {k for r in read_results(run3) for k in r}
    assert keys == set(header)
    it = header.index("training_iteration")
    assert [r[it] for r in rows] == ["1", "2", "3"]


def test_result_logger_widens_csv_and_truncates_every_log(tmp_path):
    with ResultLogger(tmp_path) as log:
        for i in range(1, 5):
            result = {"training_iteration": i, "timesteps_total": 10 * i, "r": float(i)}
            if i >= 3:
                result["evaluation"] = {"r": -i}  # a nested key that appears later
            log.log(result)
    header, rows = _csv(tmp_path / "progress.csv")
    assert header == ["training_iteration", "timesteps_total", "r", "evaluation/r"]
    assert rows[0] == ["1", "10", "1.0", ""] and rows[3] == ["4", "40", "4.0", "-4"]
    (events,) = tmp_path.glob("events.out.tfevents.*")
    assert read_scalars(events)["ray/tune/evaluation/r"] == [(30, -3.0), (40, -4.0)]

    with open(tmp_path / "result.jsonl", "a") as f:
        f.write('{"training_iteration": 5, "timest')  # a line cut short by a kill
    kept = truncate_logs(tmp_path, 2)
    assert [r["training_iteration"] for r in kept] == [1, 2]
    assert [r["training_iteration"] for r in read_results(tmp_path)] == [1, 2]
    header2, rows2 = _csv(tmp_path / "progress.csv")
    assert header2 == header and [r[0] for r in rows2] == ["1", "2"]
    assert read_scalars(events)["ray/tune/r"] == [(10, 1.0), (20, 2.0)]
    assert "ray/tune/evaluation/r" not in read_scalars(events)


# -- resume ------------------------------------------------------------------------------
def _weights(checkpoint: Path) -> dict[str, np.ndarray]:
    _, state = load_checkpoint(checkpoint)
    return state["evaluator"]["policies"]["default_policy"]["weights"]


@pytest.mark.timeout(240)
def test_sigkilled_train_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    """SIGKILL mid-run, --resume: same weights (and logs) as a run never interrupted."""
    hierl = [sys.executable, "-m", "hierl.cli"]
    killed = tmp_path / "killed"
    argv = _train(killed, "--stop", "training_iteration=100000", "--checkpoint-freq", "1")
    proc = subprocess.Popen([*hierl, *argv[0:]], cwd=REPO, env=ENV, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while not (killed / "checkpoints" / "000002").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 90 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done = sorted(int(p.name) for p in (killed / "checkpoints").iterdir() if p.name.isdigit())
    target = done[-1] + 2

    resume = [*hierl, "train", "--resume", str(killed), "--stop", f"training_iteration={target}"]
    proc = subprocess.run(resume, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"from checkpoint {(killed / 'checkpoints' / f'{done[-1]:06d}').resolve()}" in (
        proc.stdout
    )
    straight = tmp_path / "straight"
    argv = _train(straight, "--stop", f"training_iteration={target}", "--checkpoint-freq", "1")
    proc = subprocess.run([*hierl, *argv], cwd=REPO, env=ENV, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]

    expected = _weights(straight / "checkpoints" / f"{target:06d}")
    resumed = _weights(killed / "checkpoints" / f"{target:06d}")
    assert sorted(resumed) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    # the logs hold each iteration once, and match the uninterrupted run's
    a, b = read_results(straight), read_results(killed)
    assert [r["training_iteration"] for r in b] == list(range(1, target + 1))
    for key in ("timesteps_total", "episode_reward_mean", "episodes_total"):
        assert [r[key] for r in b] == [r[key] for r in a], key
    _, rows = _csv(killed / "progress.csv")
    assert len(rows) == target
    reward = _events(killed)["ray/tune/episode_reward_mean"]
    assert [s for s, _ in reward] == [r["timesteps_total"] for r in a]


def test_resume_falls_back_from_a_corrupt_last_checkpoint(run3, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run3, run)
    (run / "checkpoints" / "000003" / "arrays.npz").write_bytes(b"not a zip")
    rc, stdout, stderr = _run(["train", "--resume", str(run), "-q"])
    assert rc == 0, stderr
    warning = stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("hierl: warning: checkpoint ")
    assert "000003" in warning[0] and "corrupt" in warning[0]
    assert f"resuming from '{run / 'checkpoints' / '000002'}'" in warning[0]
    # iteration 3 was redone (the saved stop: training_iteration=3) and logged once
    assert "done (training_iteration = 3 >= 3)" in stdout
    assert [r["training_iteration"] for r in read_results(run)] == [1, 2, 3]
    load_checkpoint(run / "checkpoints" / "000003")  # rewritten whole


def test_resume_at_its_stop_condition_says_so_and_trains_nothing(run3, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run3, run)
    rc, stdout, stderr = _run(["train", "--resume", str(run)])
    assert rc == 0, stderr
    assert "already done (training_iteration = 3 >= 3) at iteration 3" in stdout
    assert "--stop" in stdout
    assert len(read_results(run)) == 3


def test_resume_bad_input_is_one_error_line(run3, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = _one_error_line(_run(["train", "--resume", str(empty)])[2])
    assert "no checkpoint" in line and str(empty) in line

    line = _one_error_line(_run(["train", "--resume", str(run3), "--algo", "ppo"])[2])
    assert "--algo PPO" in line and "algorithm PG" in line

    broken = tmp_path / "broken"
    shutil.copytree(run3, broken)
    for ckpt in (broken / "checkpoints").iterdir():
        (ckpt / "checkpoint.json").write_text("{")
    line = _one_error_line(_run(["train", "--resume", str(broken)])[2])
    assert "no complete checkpoint" in line and "000003" in line

    line = _one_error_line(_run(["train", "--resume", str(run3), "--set", "lr=0.1"])[2])
    assert "--set would change it" in line

    line = _one_error_line(_run(["train", "--resume", str(tmp_path / "nope")])[2])
    assert "no such directory" in line


def test_a_new_run_in_a_used_output_dir_points_to_resume(run3):
    rc, _, stderr = _run(_train(run3, "--stop", "training_iteration=1"))
    assert rc == 2
    line = _one_error_line(stderr)
    assert "already holds a run" in line and f"--resume {run3}" in line


# -- overrides ---------------------------------------------------------------------------
def test_set_reaches_the_config_and_the_policy(tmp_path):
    out = tmp_path / "out"
    rc, _, stderr = _run(
        _train(
            out,
            "--set",
            "model.hiddens=[32,32]",
            "--set",
            "lr=1e-3",
            "--set",
            "model.activation=relu",
            "--ray-address",
            "127.0.0.1:1",  # kept in the config; no Ray is started with 0 evaluators
            "--stop",
            "training_iteration=1",
        )
    )
    assert rc == 0, stderr
    params = json.loads((out / "params.json").read_text())
    assert params["model"]["hiddens"] == [32, 32] and params["model"]["activation"] == "relu"
    assert params["lr"] == 1e-3 and params["ray_address"] == "127.0.0.1:1"
    assert params["optimizer_config"]["train_batch_size"] == 200  # --config still applies
    weights = _weights(out / "checkpoints" / "000001")
    assert weights["pi_torso.net.0.weight"].shape == (32, 4)
    assert weights["pi_torso.net.2.weight"].shape == (32, 32)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("lrr=0.1", ["unknown config key 'lrr'", "did you mean 'lr'"]),
        ("model.hiddenz=[8]", ["'model.hiddenz'", "did you mean 'hiddens'"]),
        ("lr=fast", ["'lr' = 'fast'", "must be a number"]),
        ("model.hiddens=[a]", ["'model.hiddens'", "integer"]),
        ("lr", ["malformed override 'lr'", "KEY=VALUE"]),
        ("model..hiddens=[8]", ["malformed override"]),
        ("lr=[1, 2", ["not valid YAML"]),
    ],
)
def test_bad_set_is_one_error_line(override, expected, tmp_path):
    rc, _, stderr = _run(_train(tmp_path / "out", "--set", override))
    assert rc == 2
    line = _one_error_line(stderr)
    for text in expected:
        assert text in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("algo", trainer_names())
def test_config_yaml_reads_back_to_the_default_config(algo, tmp_path, capsys):
    assert main(["config", algo, "--yaml"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config_class = get_trainer_class(algo).config_class
    assert config_class.from_dict(load_config_arg(str(path))) == config_class.from_dict({})
    lines = text.splitlines()
    assert lines[0].startswith(f"# {algo} config")
    # every top-level key is there, documented by a comment above it
    for key in config_class.from_dict({}).to_dict():
        (i,) = [n for n, line in enumerate(lines) if line.startswith(f"{key}:")]
        assert lines[i - 1].startswith("#"), key


def test_config_yaml_file_trains_with_set_on_top(tmp_path, capsys):
    assert main(["config", "PG", "--yaml"]) == 0
    path = tmp_path / "pg.yaml"
    path.write_text(capsys.readouterr().out)
    out = tmp_path / "out"
    argv = ["train", "--algo", "PG", "--env", "CartPole-v1", "--config", str(path)]
    argv += ["--set", "optimizer_config.train_batch_size=100", "--set", "num_envs_per_evaluator=1"]
    rc, _, stderr = _run([*argv, "--output-dir", str(out), "--stop", "training_iteration=1"])
    assert rc == 0, stderr
    assert read_results(out)[0]["timesteps_total"] == 100


def test_bench_help_shows_options_and_defaults(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for text in ("--iterations", "--evaluators", "--optimizers", "--output-dir"):
        assert text in out
    assert "(default: 5)" in out and "hierl_results/bench" in out


# -- hierl tune --resume -------------------------------------------------------------------
def test_tune_resume_bad_input_is_one_error_line(tmp_path):
    line = _one_error_line(_run(["tune", "--resume", str(tmp_path)])[2])
    assert "not an experiment directory of 'hierl tune'" in line
    line = _one_error_line(_run(["tune", "exp.yaml", "--resume", str(tmp_path)])[2])
    assert "FILE does not go with it" in line
    line = _one_error_line(_run(["tune"])[2])
    assert "FILE" in line and "--resume" in line
    line = _one_error_line(_run(["tune", "exp.yaml", "--resume", "--seed", "1"])[2])
    assert "--seed does not go with it" in line
    line = _one_error_line(_run(["tune", "exp.yaml", "--seed", "-1"])[2])
    assert "-1" in line


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_tune_seed_replaces_the_trial_seeds_and_the_sampled_configs(ray_session, tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "tiny:\n  run: PG\n  env: CartPole-v1\n  stop: {training_iteration: 1}\n"
        "  num_samples: 2\n  seed: 3\n"
        "  config: {train_batch_size: 100, num_envs_per_evaluator: 1,\n"
        "           lr: {loguniform: [0.0001, 0.01]}}\n"
    )

    def configs(*flags):
        storage = tmp_path / f"results{len(flags)}"
        assert (
            main(["tune", str(exp), "--storage-path", str(storage), "--verbose", "0", *flags]) == 0
        )
        rows = [
            json.loads(p.read_text().splitlines()[-1]) for p in storage.glob("tiny/*/result.json")
        ]
        return sorted((r["config"]["seed"], r["config"]["lr"]) for r in rows)

    file_seeded, reseeded = configs(), configs("--seed", "7")
    assert [seed for seed, _ in file_seeded] == [3, 4]  # the file's base seed
    assert [seed for seed, _ in reseeded] == [7, 8]
    assert {lr for _, lr in reseeded}.isdisjoint(lr for _, lr in file_seeded)


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_tune_resume_restores_the_experiment(ray_session, tmp_path, capsys):
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "tiny:\n  run: PG\n  env: CartPole-v1\n  stop: {training_iteration: 1}\n"
        "  config: {train_batch_size: 100, num_envs_per_evaluator: 1}\n"
    )
    storage = tmp_path / "results"
    assert main(["tune", str(exp), "--storage-path", str(storage), "--verbose", "0"]) == 0
    first = capsys.readouterr().out
    assert (storage / "tiny" / "hierl_experiment.json").exists()
    assert main(["tune", "--resume", str(storage / "tiny"), "--verbose", "0"]) == 0
    again = capsys.readouterr().out
    assert "best trials" in again and "tiny" in again and "done" in again
    # the same (one) trial, not a new run of the experiment
    (trial,) = [p for p in (storage / "tiny").iterdir() if p.is_dir()]
    trial_id = json.loads((trial / "result.json").read_text().splitlines()[-1])["trial_id"]
    assert trial_id in first and trial_id in again


def test_logdir_in_the_config_is_refused_naming_the_output_dir(tmp_path):
    rc, _, err = _run(_train(tmp_path / "out", "--set", f"logdir={tmp_path / 'elsewhere'}"))
    assert rc == 2
    assert "config key 'logdir'" in err and "--output-dir" in err
    assert not (tmp_path / "elsewhere").exists()
