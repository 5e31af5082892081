"""Nested trainers out of the box (issue 36): ``hierl train --algo ES --env Hopper-v5``
trains with the task's tuned file; PPO-ES on Walker2d, ES on Hopper and AlphaZero on
Connect Four show one progress line per iteration and stop on Ctrl-C (SIGINT) with a
checkpoint that acts and resumes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hierl.checkpoint import load_checkpoint
from hierl.cli import experiment_file, main
from tests.support.helpers import TINY_ALPHAZERO, sigint_as_from_a_terminal

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_COLOR_PREFIX": "0",
}
TINY_PPO_ES = {
    "population_size": 2,
    "round_time_s": 0,
    "max_member_iterations_per_round": 1,
    "member_config": {
        "num_evaluators": 0,
        "num_cpus_for_driver": 0.25,
        "train_batch_size": 256,
        "sgd_minibatch_size": 128,
        "num_sgd_iter": 1,
        "observation_filter": "MeanStdFilter",
        "model": {"hiddens": [16]},
    },
}
TINY_CONNECT_FOUR = {**TINY_ALPHAZERO, "env_config": {"rows": 4, "cols": 5}}
COMMANDS = {
    # the tuned file's settings, but 4 perturbed episodes of at most 100 steps a batch
    "ES": [
        *("--algo", "ES", "--env", "Hopper-v5"),
        *("--set", "optimizer_config.episodes_per_batch=4"),
        *("--set", "optimizer_config.top_directions=0"),
        *("--set", "env_config.max_episode_steps=100"),
    ],
    "PPO_ES": [
        *("--algo", "PPO_ES", "--env", "Walker2d-v5", "--config", json.dumps(TINY_PPO_ES)),
        *("--set", "env_config.max_episode_steps=100"),
    ],
    "ALPHAZERO": [
        *("--algo", "ALPHAZERO", "--env", "hierl/ConnectFour-v0"),
        *("--config", json.dumps(TINY_CONNECT_FOUR)),
    ],
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("algo", sorted(COMMANDS))
def test_ctrl_c_stops_a_nested_run_with_a_checkpoint_that_resumes(algo, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "hierl.cli", "train", *COMMANDS[algo]]
    argv += ["--stop", "training_iteration=100000", "--output-dir", str(out), "--no-curve"]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_from_a_terminal,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 200
        while not any(line.startswith("iter 2 ") for line in lines):  # live progress
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    stdout = "".join(lines)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert f"{algo} on" in stdout and " interrupted after " in stdout
    checkpoints = sorted((out / "checkpoints").iterdir())
    assert checkpoints, stdout
    meta, _ = load_checkpoint(checkpoints[-1])
    assert meta["algorithm"] == algo
    assert f"checkpoint: {checkpoints[-1].resolve()}" in stdout
    # the checkpoint resumes (one more iteration than it holds)
    done = int(checkpoints[-1].name)
    rc, stdout, stderr = _run(
        ["train", "--resume", str(out), "--stop", f"training_iteration={done + 1}", "-q"]
    )
    assert rc == 0, stderr
    assert f"done (training_iteration = {done + 1} >= {done + 1})" in stdout


def test_es_on_hopper_trains_with_its_tuned_file_unless_a_config_is_given(tmp_path):
    argv = ["train", "--algo", "es", "--env", "Hopper-v5", "--stop", "training_iteration=1"]
    argv += ["--set", "optimizer_config.episodes_per_batch=2", "--no-curve"]
    argv += ["--set", "optimizer_config.top_directions=0"]  # (the file keeps 4 of 8 pairs)
    argv += ["--set", "env_config.max_episode_steps=20"]
    rc, stdout, stderr = _run([*argv, "--output-dir", str(tmp_path / "tuned")])
    assert rc == 0, stderr
    tuned = experiment_file.TUNED_DIR / "hopper-es-linear.yaml"
    assert f"using the tuned settings for ES on Hopper-v5 in {tuned}" in stdout
    params = json.loads((tmp_path / "tuned" / "params.json").read_text())
    assert params["model"]["hiddens"] == []  # the file's linear policy
    assert params["optimizer_config"]["stepsize"] == 0.02

    rc, stdout, stderr = _run([*argv, "--config", "{}", "--output-dir", str(tmp_path / "plain")])
    assert rc == 0, stderr
    assert "tuned settings" not in stdout
    params = json.loads((tmp_path / "plain" / "params.json").read_text())
    assert params["model"]["hiddens"] == [64, 64]


def test_tuned_experiments_match_algorithm_and_env_and_skip_searches(tmp_path, monkeypatch):
    (tmp_path / "b-walker.yaml").write_text(
        "b: {run: PPO_ES, env: Walker2d-v5, config: {population_size: 4}}\n"
    )
    (tmp_path / "a-walker.yaml").write_text(
        "one: {run: ppo_es, env: Walker2d-v5}\ntwo: {run: PPO, env: Walker2d-v5}\n"
    )
    (tmp_path / "c-search.yaml").write_text(
        "s: {run: PPO_ES, env: Walker2d-v5, config: {noise_stdev: {grid_search: [0.1, 0.2]}}}\n"
    )
    (tmp_path / "d-broken.yaml").write_text("run: [unclosed\n")
    monkeypatch.setattr(experiment_file, "TUNED_DIR", tmp_path)
    found = experiment_file.tuned_experiments("PPO_ES", "Walker2d-v5")
    assert found == [(tmp_path / "a-walker.yaml", "one"), (tmp_path / "b-walker.yaml", "b")]
    assert experiment_file.tuned_experiments("PPO_ES", "Hopper-v5") == []
