"""``hierl train --config FILE`` with an experiment file: every tuned example runs this way.

The experiment gives the algorithm, env, stop conditions, checkpoint frequency and config;
command-line flags override them.  Each file of ``examples/tuned/`` trains one iteration
with small batches set by ``--set`` (Atari and MuJoCo extras installed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest

from hierl import get_trainer_class
from hierl.cli import main
from hierl.loggers import read_results
from hierl.yaml_loader import load_yaml

REPO = Path(__file__).resolve().parents[1]
TUNED = sorted((REPO / "examples" / "tuned").glob("*.yaml"))

SMALL = {
    "PPO": [
        "num_envs_per_evaluator=2",
        "rollout_fragment_length=16",
        "train_batch_size=32",
        "sgd_minibatch_size=16",
        "num_sgd_iter=1",
    ],
    "A2C": ["num_envs_per_evaluator=2"],
    "APPO": [
        "num_envs_per_evaluator=2",
        "rollout_fragment_length=16",
        "train_batch_size=32",
        "sgd_minibatch_size=16",
        "optimizer_config.min_step_time_s=0",
    ],
    "APEX": [
        "num_envs_per_evaluator=1",
        "timesteps_per_iteration=64",
        "optimizer_config.learning_starts=32",
        "optimizer_config.buffer_size=1000",
        "optimizer_config.train_batch_size=16",
        "optimizer_config.num_replay_shards=1",
    ],
    "DQN": [
        "timesteps_per_iteration=64",
        "optimizer_config.learning_starts=32",
        "optimizer_config.buffer_size=1000",
    ],
    "PPO_ES": [
        "population_size=2",
        "max_member_iterations_per_round=1",
        "member_config.rollout_fragment_length=16",
        "member_config.train_batch_size=32",
        "member_config.sgd_minibatch_size=16",
        "member_config.num_sgd_iter=1",
    ],
    "ES": [
        "optimizer_config.episodes_per_batch=2",
        "optimizer_config.max_episode_steps=50",
        "optimizer_config.top_directions=1",
    ],
    "SAC": [
        "random_timesteps=32",
        "timesteps_per_iteration=64",
        "optimizer_config.learning_starts=32",
        "optimizer_config.buffer_size=1000",
        "optimizer_config.train_batch_size=16",
    ],
    "ALPHAZERO": [
        "num_self_play_workers=0",
        "num_envs_per_self_play_worker=2",
        "time_budget_s=null",
        "train_rounds_per_iter=1",
        "learning_starts=32",
        "train_batch_size=32",
        "sgd_steps_per_round=2",
        "num_simulations=4",
        "arena_games=2",
        "strength_games=2",
        "baseline_simulations=4",
        "conv_channels=4",
    ],
    "TD3": [
        "random_timesteps=32",
        "timesteps_per_iteration=64",
        "optimizer_config.learning_starts=32",
        "optimizer_config.buffer_size=1000",
    ],
}
"""Per algorithm: ``--set`` overrides that make one iteration take seconds."""


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _experiment(path: Path) -> tuple[str, dict]:
    ((name, body),) = load_yaml(path.read_text()).items()
    return name, body


def test_every_tuned_file_is_covered():
    assert TUNED
    assert {_experiment(p)[1]["run"] for p in TUNED} <= set(SMALL)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", TUNED, ids=lambda p: p.stem)
def test_each_tuned_file_trains_one_iteration_from_hierl_train(path, tmp_path):
    _, body = _experiment(path)
    out = tmp_path / "run"
    overrides = [a for s in SMALL[body["run"]] for a in ("--set", s)]
    argv = ["train", "--config", str(path), "--output-dir", str(out), "--no-curve"]
    fields = dataclasses.fields(get_trainer_class(body["run"]).config_class)
    if "num_evaluators" in {f.name for f in fields}:  # not a population's (its members')
        argv += ["--num-evaluators", "0"]
    argv += ["--stop", "training_iteration=1", *overrides]
    rc, stdout, stderr = _run(argv)
    assert rc == 0, stderr
    assert f"training {body['run']} on {body['env']}" in stdout
    (result,) = read_results(out)
    assert result["training_iteration"] == 1 and result["timesteps_total"] > 0
    params = json.loads((out / "params.json").read_text())
    assert params["env"] == body["env"]
    assert params["seed"] == 0  # the seed 'hierl tune' gives the experiment's first trial
    overridden = {s.split("=")[0] for s in SMALL[body["run"]]} | {"num_evaluators"}
    for key, value in body["config"].items():  # the file's config, where no flag overrides it
        if key not in overridden and isinstance(value, int | float | str):
            assert value in (params.get(key), params.get("optimizer_config", {}).get(key)), key
    run = json.loads((out / "run.json").read_text())
    assert run["stop"] == {"training_iteration": 1.0}  # --stop replaced the file's
    assert run["checkpoint_freq"] == body["checkpoint_freq"]
    assert (out / "checkpoints").is_dir()


EXPERIMENTS = """\
small:
  run: pg  # any case, as --algo
  env: CartPole-v1
  stop: {training_iteration: 2}
  checkpoint_freq: 1
  num_samples: 3
  config: {train_batch_size: 100, lr: 0.002}
other:
  run: PPO
  env: CartPole-v1
  config: {train_batch_size: 128, sgd_minibatch_size: 64}
"""


def test_an_experiment_gives_algorithm_env_stop_and_config(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(EXPERIMENTS)
    out = tmp_path / "small"
    argv = ["train", "--config", str(path), "--experiment", "small", "--output-dir", str(out)]
    rc, stdout, stderr = _run([*argv, "--no-curve", "--set", "lr=0.003"])
    assert rc == 0, stderr
    assert "training PG on CartPole-v1" in stdout
    assert "stop when any of: training_iteration >= 2 (experiment 'small')" in stdout
    assert "num_samples apply with 'hierl tune'" in stdout
    assert [r["training_iteration"] for r in read_results(out)] == [1, 2]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["000001", "000002"]
    params = json.loads((out / "params.json").read_text())
    assert params["lr"] == 0.003  # --set over the experiment's config
    assert params["optimizer_config"]["train_batch_size"] == 100


def test_several_experiments_need_one_named(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(EXPERIMENTS)
    rc, _, stderr = _run(["train", "--config", str(path)])
    assert rc == 2
    assert "holds 2 experiments (small, other): name the one to train with --experiment" in stderr
    rc, _, stderr = _run(["train", "--config", str(path), "--experiment", "nope"])
    assert rc == 2 and "no experiment 'nope'" in stderr and "it has: small, other" in stderr
    rc, _, stderr = _run(["train", "--algo", "PG", "--env", "CartPole-v1", "--experiment", "x"])
    assert rc == 2 and "pass the file with --config FILE" in stderr


def test_a_search_space_is_sent_to_hierl_tune(tmp_path):
    path = tmp_path / "search.yaml"
    path.write_text(
        "grid:\n  run: PG\n  env: CartPole-v1\n  config: {lr: {grid_search: [0.1, 0.2]}}\n"
    )
    rc, _, stderr = _run(["train", "--config", str(path)])
    assert rc == 2
    assert (
        f"searches lr: 'hierl train' runs one config; run the search with 'hierl tune {path}'"
        in (stderr)
    )


def test_flags_override_the_experiment(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(EXPERIMENTS)
    out = tmp_path / "run"
    argv = ["train", "--config", str(path), "--experiment", "other", "--output-dir", str(out)]
    argv += ["--algo", "APPO", "--env", "Acrobot-v1", "--stop", "training_iteration=1"]
    argv += ["--seed", "7", "--checkpoint-freq", "0", "--no-curve", "-q"]
    rc, _, stderr = _run([*argv, "--set", "optimizer_config.min_step_time_s=0"])
    # PPO's sgd settings are APPO's too; the algorithm, env, seed and stop are the flags'
    assert rc == 0, stderr
    params = json.loads((out / "params.json").read_text())
    assert params["env"] == "Acrobot-v1" and params["seed"] == 7
    assert json.loads((out / "run.json").read_text())["algorithm"] == "APPO"
    assert len(read_results(out)) == 1
