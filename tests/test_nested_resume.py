"""``hierl train --resume`` of nested trainers (issue 36, "Out of the box"): a run cut
after 2 iterations and resumed to 3 ends where a run never cut does (PPO-ES, ES:
synchronous, so the same weights; A3C-ES, AlphaZero: asynchronous, so the counters
continue from the checkpoint)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from hierl.checkpoint import load_checkpoint
from hierl.cli import main
from hierl.loggers import read_results
from tests.support.helpers import TINY_ALPHAZERO

pytestmark = pytest.mark.timeout(300)

PPO_MEMBER = {
    "num_evaluators": 0,
    "num_cpus_for_driver": 0.25,
    "train_batch_size": 200,
    "sgd_minibatch_size": 100,
    "num_sgd_iter": 2,
    "model": {"hiddens": [8]},
}
POPULATION = {
    "population_size": 3,
    "round_time_s": 0,  # one train() per member and round: deterministic
    "max_member_iterations_per_round": 1,
    "noise_stdev": 0.05,
}
CONFIGS = {
    "PPO_ES": ("CartPole-v1", {**POPULATION, "population_size": 2, "member_config": PPO_MEMBER}),
    "A3C_ES": (
        "CartPole-v1",
        {
            **POPULATION,
            "population_size": 2,
            "member_config": {
                "num_evaluators": 1,
                "num_cpus_per_evaluator": 0.25,
                "num_cpus_for_driver": 0.25,
                "train_batch_size": 200,
                "model": {"hiddens": [8]},
            },
        },
    ),
    "ES": (
        "CartPole-v1",
        {
            "num_evaluators": 0,
            "episodes_per_batch": 6,
            "noise_size": 2**16,
            "eval_prob": 0.0,
            "model": {"hiddens": [8]},
        },
    ),
    "ALPHAZERO": (
        "hierl/TicTacToe-v0",
        TINY_ALPHAZERO,
    ),
}


def _run(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc == 0, err.getvalue()
    return out.getvalue()


def _train(algo: str, out: Path, iterations: int) -> None:
    env, config = CONFIGS[algo]
    _run(
        [
            *("train", "--algo", algo, "--env", env, "--config", json.dumps(config)),
            *("--stop", f"training_iteration={iterations}", "--checkpoint-freq", "1"),
            *("--output-dir", str(out), "--seed", "3", "--no-curve", "-q"),
        ]
    )


def _resumed(algo: str, tmp_path: Path) -> Path:
    """A run of 2 iterations, then ``--resume``d to 3."""
    cut = tmp_path / "cut"
    _train(algo, cut, 2)
    stdout = _run(["train", "--resume", str(cut), "--stop", "training_iteration=3", "-q"])
    assert "done (training_iteration = 3 >= 3)" in stdout
    return cut


def _cut_and_resumed(algo: str, tmp_path: Path) -> tuple[Path, Path]:
    """``(straight, resumed)``: 3 iterations in one run; 2, then ``--resume`` to 3."""
    straight = tmp_path / "straight"
    _train(algo, straight, 3)
    return straight, _resumed(algo, tmp_path)


def _policy_weights(evaluator_state: dict) -> dict[str, np.ndarray]:
    return evaluator_state["policies"]["default_policy"]["weights"]


def _assert_same_arrays(a: dict, b: dict, what: str) -> None:
    assert sorted(a) == sorted(b), what
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what}/{name}")


def _counts(counters: dict) -> dict:
    """Counters without the wall-clock time."""
    return {k: v for k, v in counters.items() if k != "time_total_s"}


def _checkpoint(run: Path, iteration: int) -> dict:
    return load_checkpoint(run / "checkpoints" / f"{iteration:06d}")[1]


def _same_logs(straight: Path, resumed: Path, keys: tuple[str, ...]) -> None:
    a, b = read_results(straight), read_results(resumed)
    assert [r["training_iteration"] for r in b] == [1, 2, 3]
    for key in keys:
        assert [r[key] for r in b] == [r[key] for r in a], key


@pytest.mark.ray
def test_ppo_es_resumes_to_the_weights_of_an_uncut_run(ray_session, tmp_path):
    straight, resumed = _cut_and_resumed("PPO_ES", tmp_path)
    a, b = _checkpoint(straight, 3), _checkpoint(resumed, 3)
    assert _counts(b["counters"]) == _counts(a["counters"])
    assert b["scores"] == a["scores"] and b["best_member"] == a["best_member"]
    assert len(a["members"]) == len(b["members"]) == 2
    for i in range(2):
        member_a, member_b = a["members"][str(i)], b["members"][str(i)]
        assert _counts(member_b["counters"]) == _counts(member_a["counters"])
        _assert_same_arrays(
            _policy_weights(member_a["evaluator"]), _policy_weights(member_b["evaluator"]), str(i)
        )
    _same_logs(straight, resumed, ("timesteps_total", "population/best_member"))


def test_es_resumes_to_the_weights_of_an_uncut_run(tmp_path):
    straight, resumed = _cut_and_resumed("ES", tmp_path)
    a, b = _checkpoint(straight, 3), _checkpoint(resumed, 3)
    assert _counts(b["counters"]) == _counts(a["counters"])
    _assert_same_arrays(_policy_weights(a["evaluator"]), _policy_weights(b["evaluator"]), "ES")
    _same_logs(straight, resumed, ("timesteps_total", "episode_reward_mean"))


@pytest.mark.ray
def test_a3c_es_resumes_its_counters_from_the_checkpoint(ray_session, tmp_path):
    resumed = _resumed("A3C_ES", tmp_path)
    before, after = _checkpoint(resumed, 2), _checkpoint(resumed, 3)
    assert after["counters"]["iteration"] == 3
    assert after["counters"]["timesteps_total"] > before["counters"]["timesteps_total"]
    for i in range(2):
        member_before, member_after = before["members"][str(i)], after["members"][str(i)]
        assert member_after["counters"]["iteration"] > member_before["counters"]["iteration"]
    results = read_results(resumed)
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert results[2]["timesteps_total"] > results[1]["timesteps_total"]


def test_alphazero_resumes_its_counters_and_replay_from_the_checkpoint(tmp_path):
    resumed = _resumed("ALPHAZERO", tmp_path)
    before, after = _checkpoint(resumed, 2), _checkpoint(resumed, 3)
    assert after["iteration"] == 3 and after["best_version"] >= before["best_version"]
    assert after["counters"]["train_rounds"] > before["counters"]["train_rounds"]
    assert after["counters"]["moves"] > before["counters"]["moves"]
    results = read_results(resumed)
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert results[2]["timesteps_total"] > results[1]["timesteps_total"]


# -- a member lost mid-round, on a MuJoCo task -------------------------------------------
@pytest.mark.ray
def test_a_ppo_es_member_killed_on_walker2d_is_recreated_and_the_round_goes_on(ray_session):
    from hierl.algorithms.population import PPOESTrainer
    from tests.test_population import kill_member

    member = {**PPO_MEMBER, "train_batch_size": 256, "sgd_minibatch_size": 128}
    config = {
        **POPULATION,
        "env": "Walker2d-v5",
        "env_config": {"max_episode_steps": 50},
        "member_config": {**member, "observation_filter": "MeanStdFilter"},
    }
    with PPOESTrainer(config) as trainer:
        first = trainer.train()
        kill_member(trainer, 1)  # its next train() fails inside the round
        result = trainer.train()
        assert result["population/num_member_restarts"] == 1
        assert trainer.member_failures[0][0] == 1
        assert [result[f"population/iterations/{i}"] for i in range(3)] == [1, 1, 1]
        assert result["timesteps_total"] == 2 * first["timesteps_total"]
        assert result["training_iteration"] == 2
        assert np.isfinite(result["episode_reward_mean"])
