"""Acting from nested checkpoints (issue 40): PPO-ES / A3C-ES act with their recorded
best member and ES with its policy, through ``BaseTrainer.for_acting`` and the same
``hierl rollout`` / ``export`` / serve path as flat checkpoints, without Ray."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from hierl.algorithms.es import ESTrainer
from hierl.algorithms.population import PPOESTrainer
from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer
from hierl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from hierl.cli import main
from hierl.loggers import read_results
from hierl.serve.policy import ServedPolicy
from tests.support.helpers import free_port, sigint_as_from_a_terminal

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_COLOR_PREFIX": "0",
}
HIERL = [sys.executable, "-m", "hierl.cli"]
MEMBERS = {
    "PPO_ES": {
        "num_evaluators": 0,
        "num_cpus_for_driver": 0.25,
        "train_batch_size": 200,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 1,
        "model": {"hiddens": [8]},
    },
    "A3C_ES": {
        "num_evaluators": 1,
        "num_cpus_per_evaluator": 0.25,
        "num_cpus_for_driver": 0.25,
        "train_batch_size": 200,
        "model": {"hiddens": [8]},
    },
}
ES_TINY = {
    "num_evaluators": 0,
    "episodes_per_batch": 4,
    "noise_size": 2**16,
    "eval_prob": 0.0,
    "model": {"hiddens": [8]},
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("hierl: error: "), stderr
    return lines[0]


@pytest.fixture(scope="module", params=["PPO_ES", "A3C_ES"])
def population_run(request, tmp_path_factory, ray_session) -> tuple[str, Path]:
    """Two rounds of a population of 2 tiny members on CartPole, trained by the CLI:
    ``(algorithm, output dir)``."""
    algo = request.param
    out = tmp_path_factory.mktemp(algo) / "run"
    config = {
        "population_size": 2,
        "round_time_s": 0,
        "max_member_iterations_per_round": 1,
        "member_config": MEMBERS[algo],
    }
    argv = ["train", "--algo", algo, "--env", "CartPole-v1", "--config", json.dumps(config)]
    argv += ["--stop", "training_iteration=2", "--output-dir", str(out), "--no-curve", "-q"]
    rc, _, stderr = _run(argv)
    assert rc == 0, stderr[-3000:]
    return algo, out


def _member_weights(state: dict, member: int) -> dict[str, np.ndarray]:
    return state["members"][str(member)]["evaluator"]["policies"]["default_policy"]["weights"]


def test_population_checkpoint_records_each_score_and_the_best_member(population_run):
    _, run = population_run
    _, state = load_checkpoint(run / "checkpoints" / "000002")
    last = read_results(run)[-1]
    scores = [last[f"population/episode_reward_mean/{i}"] for i in range(2)]
    assert state["scores"] == pytest.approx(scores, nan_ok=True)
    assert state["best_member"] == last["population/best_member"]
    ranked = [s if not math.isnan(s) else -math.inf for s in scores]
    assert ranked[state["best_member"]] == max(ranked)


def test_for_acting_is_the_best_member_without_ray_or_actors(population_run):
    """In a fresh process: the member that acts is the recorded best one, with its
    weights; Ray is never initialised, so no actor can have started."""
    algo, run = population_run
    path = run / "checkpoints" / "000002"
    script = (
        "import json, sys, numpy as np, ray\n"
        "from hierl.algorithms.trainer_base import BaseTrainer\n"
        f"t = BaseTrainer.for_acting({str(path)!r})\n"
        "a = t.compute_single_action(np.zeros(4, np.float32), explore=False)\n"
        "w = {k: v.tolist() for k, v in t.get_weights()['default_policy'].items()}\n"
        "print(json.dumps({'cls': t.name, 'action': int(a), 'ray': ray.is_initialized(),\n"
        "    'evaluators': len(t.evaluators.remote_evaluators), 'weights': w}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=ENV, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["cls"] == algo.removesuffix("_ES") and got["action"] in (0, 1)
    assert got["ray"] is False and got["evaluators"] == 0
    _, state = load_checkpoint(path)
    expected = _member_weights(state, state["best_member"])
    assert sorted(got["weights"]) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got["weights"][name], np.float32), value)


def test_rollout_export_and_serve_a_population_checkpoint(population_run, tmp_path):
    _, run = population_run
    rc, stdout, stderr = _run(["rollout", str(run), "--episodes", "2", "--seed", "0"])
    assert rc == 0, stderr
    assert "episode 2: return" in stdout and "mean return:" in stdout

    rc, stdout, stderr = _run(["export", str(run), "--output", str(tmp_path / "ts")])
    assert rc == 0, stderr
    model = torch.jit.load(str(tmp_path / "ts" / "policy.pt"))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with BaseTrainer.for_acting(run / "checkpoints" / "000002") as acting:
        expected = [acting.compute_single_action(o, explore=False) for o in obs]
        served = ServedPolicy(acting)
        answer = served.act([served.parse({"observations": obs.tolist()})])[0]
    np.testing.assert_array_equal(model(torch.as_tensor(obs))[0].numpy(), expected)
    assert answer["actions"] == [int(a) for a in expected]

    served = ServedPolicy.from_checkpoint(run / "checkpoints" / "000002")
    try:
        assert served.spec()["action_space"]["type"] == "Discrete"
    finally:
        served.stop()


def test_cli_serve_answers_with_the_best_member_and_stops_on_ctrl_c(population_run):
    algo, run = population_run
    if algo == "PPO_ES":  # the same serve path; A3C-ES's members also have evaluators to drop
        pytest.skip("hierl serve of a population is tested on A3C_ES")
    port = free_port()
    argv = [*HIERL, "serve", str(run), "--port", str(port), "--num-cpus", "0.25"]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_from_a_terminal,
    )
    try:
        lines = []
        while not lines or "Ctrl-C" not in lines[-1]:  # it prints 3 lines, then waits
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        obs = [0.01, -0.2, 0.03, 0.4]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/act",
            json.dumps({"observation": obs}).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            action = json.loads(answer.read())["action"]
        with BaseTrainer.for_acting(run / "checkpoints" / "000002") as acting:
            assert action == acting.compute_single_action(np.float32(obs), explore=False)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_a_population_checkpoint_without_a_best_member_is_one_clear_line(population_run, tmp_path):
    algo, run = population_run
    meta, state = load_checkpoint(run / "checkpoints" / "000002")
    del state["best_member"]
    old = save_checkpoint(tmp_path / "old", meta, state)
    line = _one_error_line(_run(["rollout", str(old), "--episodes", "1"])[2])
    assert "records no best member" in line and algo in line and str(old) in line
    state["best_member"] = 7
    bad = save_checkpoint(tmp_path / "bad", meta, state)
    line = _one_error_line(_run(["export", str(bad)])[2])
    assert "best member 7" in line and "['0', '1']" in line


# -- ES --------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["CartPole-v1", "Pendulum-v1"])
def es_checkpoint(request, tmp_path_factory) -> Path:
    with ESTrainer({**ES_TINY, "env": request.param}) as trainer:
        trainer.train()
        return trainer.save(tmp_path_factory.mktemp("es") / "ckpt")


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_es_checkpoint_exports_its_policy_and_serves(es_checkpoint, fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    rc, _, stderr = _run(["export", str(es_checkpoint), "--format", fmt, "--output", str(tmp_path)])
    assert rc == 0, stderr
    spec = json.loads((tmp_path / "policy.json").read_text())
    assert spec["algorithm"] == "ES" and spec["observation_filter"]["type"] == "MeanStdFilter"
    with BaseTrainer.for_acting(es_checkpoint) as acting:
        space = acting.get_policy().observation_space
        space.seed(0)
        obs = np.stack([space.sample() for _ in range(6)]).astype(np.float32) * 3
        expected = np.stack([acting.compute_single_action(o, explore=False) for o in obs])
        served = ServedPolicy(acting)
        answer = served.act([served.parse({"observations": obs.tolist()})])[0]
    if fmt == "torchscript":
        actions = torch.jit.load(str(tmp_path / "policy.pt"))(torch.as_tensor(obs))[0].numpy()
    else:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
        actions = session.run(None, {"obs": obs})[0]
    np.testing.assert_allclose(actions, expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(answer["actions"]), expected, atol=1e-5)


def test_es_checkpoint_rolls_out_from_the_cli(es_checkpoint):
    rc, stdout, stderr = _run(["rollout", str(es_checkpoint), "--steps", "30"])
    assert rc == 0, stderr
    assert "mean return:" in stdout


# -- the hook ------------------------------------------------------------------------------
class _NoPolicyLoop(BaseTrainer):
    name = "NO_POLICY_LOOP"
    config_class = BaseConfig


def test_a_nested_algorithm_without_a_flat_policy_refuses_by_default():
    with pytest.raises(CheckpointError, match="NO_POLICY_LOOP holds no single flat policy"):
        _NoPolicyLoop.acting_checkpoint({"env": "CartPole-v1"}, {})


def test_population_acting_checkpoint_gives_the_best_members_config_and_state():
    config = PPOESTrainer.config_class(env="CartPole-v1", seed=3, population_size=3).to_dict()
    members = {str(i): {"member": i} for i in range(3)}
    cls, member, state = PPOESTrainer.acting_checkpoint(
        config, {"members": members, "best_member": 2}
    )
    assert cls is PPOESTrainer.member_class
    assert member["seed"] == 3 * 3 + 2 and member["env"] == "CartPole-v1"
    assert state == {"member": 2}


def test_an_alphazero_checkpoint_points_at_its_search_for_acting():
    from hierl.algorithms.alphazero import AlphaZeroTrainer

    with pytest.raises(CheckpointError, match=r"load_player.*hierl play.*hierl serve"):
        AlphaZeroTrainer.acting_checkpoint({}, {})
